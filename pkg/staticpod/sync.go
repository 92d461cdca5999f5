package staticpod

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/podrules"
	"github.com/nodelet/nodelet/pkg/provider"
)

// errWaiting is a sync that must wait for something to happen first (the
// previous version of a static pod to stop): tried again, not an error.
var errWaiting = errors.New("waiting")

// errStopping is the wait for a static pod that is no longer wanted, or
// the previous version of one, to stop, during which its mirror pod stays
// as it is, as the kubelet keeps it until the pod has terminated.
var errStopping = fmt.Errorf("the static pod is stopping; %w", errWaiting)

// sync makes the node run the static pod of key as its sources say, and
// the API hold its mirror pod. The static pod comes first and needs no API.
func (c *Controller) sync(ctx context.Context, key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil // not a key we made
	}
	c.mu.Lock()
	want := c.desired[key]
	c.mu.Unlock()
	if want == nil && !c.sourcesRead() {
		// Not named by a source yet: its manifest may be unread still.
		// Each read enqueues every pod again.
		return nil
	}
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("pod", klog.KRef(namespace, name)))
	staticErr := c.syncStatic(ctx, key, namespace, name, want)
	if !c.apiSynced.Load() || errors.Is(staticErr, errStopping) {
		return staticErr
	}
	return errors.Join(staticErr, c.syncMirror(ctx, namespace, name, want))
}

// staticAction is what to do with the static pod of one name on the node.
type staticAction int

const (
	staticNone   staticAction = iota
	staticCreate              // wanted and not running: start it
	staticStop                // running and not wanted, or another version: stop it
)

// decideStatic compares the static pod wanted (nil: none) with the one
// the node runs under that name (nil: none), which is stopping if the
// node was asked to stop it. Versions are told apart by UID, which derives
// from the manifest: the same manifest is the same pod across agent
// restarts, and is left running. A pod that is stopping stops whatever is
// wanted: one whose manifest came back starts again once it has stopped,
// as the kubelet restarts it.
func decideStatic(want, running *corev1.Pod, stopping bool) staticAction {
	switch {
	case running == nil && want == nil:
		return staticNone
	case running == nil:
		return staticCreate
	case stopping || want == nil || running.UID != want.UID:
		return staticStop
	}
	return staticNone
}

func (c *Controller) syncStatic(ctx context.Context, key, namespace, name string, want *corev1.Pod) error {
	running, err := c.runner.GetPod(ctx, namespace, name)
	switch {
	case errors.Is(err, provider.ErrNotFound):
		running = nil
	case err != nil:
		return fmt.Errorf("get static pod from the node: %w", err)
	}
	if running != nil && !podrules.IsStaticPod(running) {
		if want == nil {
			return nil // an API pod: the pod controller's
		}
		return fmt.Errorf("static pod %s: the API's pod of that name runs on the node; %w", key, errWaiting)
	}
	c.mu.Lock()
	if running == nil {
		delete(c.stopping, key)
		delete(c.removed, key)
	}
	stopping := running != nil && (c.stopping[key] == running.UID || c.removed[key] == running.UID)
	c.mu.Unlock()
	switch decideStatic(want, running, stopping) {
	case staticStop:
		if err := c.runner.DeletePod(ctx, running); err != nil && !errors.Is(err, provider.ErrNotFound) {
			return fmt.Errorf("stop static pod: %w", err)
		}
		c.mu.Lock()
		c.stopping[key] = running.UID
		delete(c.removed, key)
		c.mu.Unlock()
		klog.FromContext(ctx).V(2).Info("Stopping static pod", "uid", running.UID, "replaced", want != nil)
		return fmt.Errorf("static pod %s: %w", key, errStopping)
	case staticCreate:
		err := c.runner.CreatePod(ctx, want.DeepCopy())
		var rej *provider.Rejection
		if errors.As(err, &rej) {
			// Tried again at the next read of the sources.
			c.warn(ctx, "pod:"+key, rej.Reason, fmt.Sprintf("static pod %s was rejected: %s", key, rej.Message))
			return nil
		}
		if err != nil {
			return fmt.Errorf("start static pod: %w", err)
		}
		c.forget("pod:" + key)
		klog.FromContext(ctx).Info("Started static pod", "uid", want.UID)
	}
	return nil
}

// mirrorAction is what to do with the mirror pod of one static pod.
type mirrorAction int

const (
	mirrorNone    mirrorAction = iota
	mirrorCreate               // none in the API: create it
	mirrorDelete               // no static pod: delete it
	mirrorReplace              // of another version, being deleted or of an old Node: delete and create
	mirrorBlocked              // an API pod that is no mirror pod holds the name
)

// decideMirror compares the static pod wanted (nil: none) with what the
// API holds under its name (nil: nothing), the node's UID known as nodeUID
// (empty: unknown, not checked).
func decideMirror(want, mirror *corev1.Pod, nodeUID types.UID) mirrorAction {
	if mirror != nil && !podrules.IsMirrorPod(mirror) {
		if want == nil {
			return mirrorNone
		}
		return mirrorBlocked
	}
	switch {
	case want == nil && mirror == nil:
		return mirrorNone
	case want == nil:
		return mirrorDelete
	case mirror == nil:
		return mirrorCreate
	case mirror.DeletionTimestamp != nil || !podrules.IsMirrorOf(mirror, want) || !ownedBy(mirror, nodeUID):
		return mirrorReplace
	}
	return mirrorNone
}

// ownedBy tells whether a mirror pod's controller is the Node of uid.
func ownedBy(mirror *corev1.Pod, uid types.UID) bool {
	if uid == "" {
		return true
	}
	ref := metav1.GetControllerOf(mirror)
	return ref != nil && ref.Kind == "Node" && ref.UID == uid
}

func (c *Controller) syncMirror(ctx context.Context, namespace, name string, want *corev1.Pod) error {
	mirror, err := c.pods.Pods(namespace).Get(name)
	switch {
	case apierrors.IsNotFound(err):
		mirror = nil
	case err != nil:
		return err
	}
	var node *corev1.Node
	if want != nil {
		node, err = c.nodes.Get(c.opts.NodeName)
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("mirror pod: node %s is not registered yet; %w", c.opts.NodeName, errWaiting)
		}
		if err != nil {
			return err
		}
	}
	var nodeUID types.UID
	if node != nil {
		nodeUID = node.UID
	}
	key := namespace + "/" + name
	switch decideMirror(want, mirror, nodeUID) {
	case mirrorNone:
		return nil
	case mirrorBlocked:
		c.warn(ctx, "mirror:"+key, "FailedCreateMirrorPod", fmt.Sprintf("static pod %s gets no mirror pod: a pod of that name that is not its mirror exists", key))
		return nil
	case mirrorDelete:
		return c.deleteMirror(ctx, mirror)
	case mirrorReplace:
		if err := c.deleteMirror(ctx, mirror); err != nil {
			return err
		}
	}
	return c.createMirror(ctx, key, want, node)
}

// deleteMirror deletes a mirror pod at once, never a newer one of the
// same name.
func (c *Controller) deleteMirror(ctx context.Context, mirror *corev1.Pod) error {
	err := c.client.CoreV1().Pods(mirror.Namespace).Delete(ctx, mirror.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0),
		Preconditions:      metav1.NewUIDPreconditions(string(mirror.UID)),
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete mirror pod: %w", err)
	}
	klog.FromContext(ctx).V(2).Info("Deleted mirror pod", "uid", mirror.UID, "hash", mirror.Annotations[podrules.ConfigMirrorAnnotation])
	return nil
}

// createMirror creates the mirror pod of a static pod. A mirror pod the
// API refuses for good (invalid, forbidden, its namespace missing) is
// reported and tried again at the next read of the sources.
func (c *Controller) createMirror(ctx context.Context, key string, static *corev1.Pod, node *corev1.Node) error {
	mirror := mirrorPod(static, node)
	_, err := c.client.CoreV1().Pods(mirror.Namespace).Create(ctx, mirror, metav1.CreateOptions{})
	switch {
	case err == nil:
		c.forget("mirror:" + key)
		klog.FromContext(ctx).V(2).Info("Created mirror pod", "hash", mirror.Annotations[podrules.ConfigMirrorAnnotation])
		return nil
	case apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsNotFound(err) || apierrors.IsBadRequest(err):
		c.warn(ctx, "mirror:"+key, "FailedCreateMirrorPod", fmt.Sprintf("static pod %s: create mirror pod: %v", key, err))
		return nil
	case apierrors.IsAlreadyExists(err):
		return fmt.Errorf("mirror pod: the cache is behind the API; %w", errWaiting)
	}
	return fmt.Errorf("create mirror pod: %w", err)
}

// mirrorPod is the API's view of a static pod: the same pod, marked with
// its hash and owned by its Node, as NodeRestriction lets a node create.
func mirrorPod(static *corev1.Pod, node *corev1.Node) *corev1.Pod {
	m := static.DeepCopy()
	m.UID, m.ResourceVersion = "", ""
	m.Status = corev1.PodStatus{}
	m.Annotations[podrules.ConfigMirrorAnnotation] = static.Annotations[podrules.ConfigHashAnnotation]
	m.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID, Controller: ptr.To(true),
	}}
	return m
}
