package pod

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/podrules"
	"github.com/nodelet/nodelet/pkg/provider"
)

// sync is the spec queue's sync: it makes the provider match the API for
// one pod (create, update, stop, finish the deletion). Statuses it reads
// from the provider or decides are handed to the status queue as reports;
// it writes only a final status, before the final delete.
func (c *Controller) sync(ctx context.Context, key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil // not a key we made; nothing to retry
	}
	pod, err := c.lister.Pods(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return c.syncGone(ctx, key, namespace, name)
	}
	if err != nil {
		return err
	}
	p, ok := c.provider(pod.Spec.NodeName)
	if !ok {
		return nil
	}
	rec := c.records.get(key, pod.Spec.NodeName, pod.UID)
	// pod is the cache's: read only here, and handed to a provider as
	// handOver says.
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("pod", klog.KObj(pod), "node", pod.Spec.NodeName))
	if podrules.IsMirrorPod(pod) {
		return c.syncMirror(ctx, key, p, pod)
	}
	return c.syncPod(ctx, key, rec, p, pod)
}

// syncPod makes the provider match the API for a pod that is not a mirror
// pod: pod is the controller's copy of the API's.
func (c *Controller) syncPod(ctx context.Context, key string, rec *podRecord, p provider.PodLifecycleHandler, pod *corev1.Pod) error {
	provPod, err := p.GetPod(ctx, pod.Namespace, pod.Name)
	switch {
	case errors.Is(err, provider.ErrNotFound):
		provPod = nil
	case err != nil:
		return fmt.Errorf("get pod from provider: %w", err)
	}
	if provPod != nil && podrules.IsStaticPod(provPod) {
		// A static pod holds the name on this node; it is not ours to stop.
		c.recorder.Eventf(pod, corev1.EventTypeWarning, "FailedCreate", "a static pod of the same name runs on node %s", pod.Spec.NodeName)
		return nil
	}
	if provPod != nil && provPod.UID != "" && provPod.UID != pod.UID {
		// The provider still runs an older pod of the same name: stop it
		// first; the new one is created once it is gone.
		if err := p.DeletePod(ctx, immediate(provPod)); err != nil {
			return fmt.Errorf("stop replaced pod %s: %w", provPod.UID, err)
		}
		return fmt.Errorf("waiting for replaced pod %s to stop", provPod.UID)
	}

	if provPod == nil {
		return c.syncLost(ctx, rec, p, pod)
	}
	if pod.DeletionTimestamp != nil {
		// Idempotent: a second delete may only shorten the grace period.
		if err := p.DeletePod(ctx, handOver(p, pod)); err != nil {
			c.recorder.Eventf(pod, corev1.EventTypeWarning, "FailedKillPod", "error killing pod: %v", err)
			return fmt.Errorf("stop pod in provider: %w", err)
		}
	} else if podChanged(provPod, pod) || newerToShare(p, provPod, pod) {
		if err := p.UpdatePod(ctx, handOver(p, pod)); err != nil {
			c.recorder.Eventf(pod, corev1.EventTypeWarning, "FailedUpdate", "error updating pod in provider: %v", err)
			return fmt.Errorf("update pod in provider: %w", err)
		}
	}
	c.observed(key, p, provPod)
	return nil
}

// handOver is the cache's pod as a provider call gets it: a copy of its
// own, which the provider may keep and change, unless the provider shares
// the cache's pods (provider.PodSharer).
func handOver(p provider.PodLifecycleHandler, pod *corev1.Pod) *corev1.Pod {
	if _, shares := p.(provider.PodSharer); shares {
		return pod
	}
	return pod.DeepCopy()
}

// newerToShare tells whether a provider that shares the cache's pods keeps
// an older object of the pod than the cache now has: it is handed the
// newer one, so that the cache's replaced object is not kept alive by it.
func newerToShare(p provider.PodLifecycleHandler, provPod, pod *corev1.Pod) bool {
	_, shares := p.(provider.PodSharer)
	return shares && provPod.ResourceVersion != pod.ResourceVersion
}

// podChanged says whether the provider's copy of a pod is behind the API's
// in what a provider reads: the spec, and the labels and annotations that
// downward API volumes and env expose.
func podChanged(provPod, pod *corev1.Pod) bool {
	return !equality.Semantic.DeepEqual(provPod.Spec, pod.Spec) ||
		!maps.Equal(provPod.Labels, pod.Labels) || !maps.Equal(provPod.Annotations, pod.Annotations)
}

// syncGone handles a pod the API no longer has: if the provider still runs
// it, stop it at once.
func (c *Controller) syncGone(ctx context.Context, key, namespace, name string) error {
	rec, ok := c.records.find(key)
	if !ok {
		return nil
	}
	p, ok := c.provider(rec.node)
	if !ok {
		// The node was let go: its pods are not ours to stop.
		c.records.forget(key)
		return nil
	}
	provPod, err := p.GetPod(ctx, namespace, name)
	if errors.Is(err, provider.ErrNotFound) {
		c.records.forget(key)
		c.reports.forget(key)
		return nil
	}
	if err != nil {
		return fmt.Errorf("get pod from provider: %w", err)
	}
	if podrules.IsStaticPod(provPod) {
		// Its mirror pod went; the static pod source owns the pod itself.
		c.records.forget(key)
		return nil
	}
	klog.FromContext(ctx).V(2).Info("Pod is gone from the API; stopping it", "pod", klog.KObj(provPod))
	if err := p.DeletePod(ctx, immediate(provPod)); err != nil {
		return fmt.Errorf("stop pod deleted from the API: %w", err)
	}
	return nil
}

// syncLost handles a pod bound to our node that the provider does not run.
func (c *Controller) syncLost(ctx context.Context, rec *podRecord, p provider.PodLifecycleHandler, pod *corev1.Pod) error {
	restorer, canRestore := p.(provider.PodRestorer)
	switch decideLostPod(pod, canRestore) {
	case nothing:
		return nil
	case finishDel:
		return c.finishDeletion(ctx, rec, pod)
	case restorePod:
		if err := restorer.RestorePod(ctx, handOver(p, pod)); err != nil {
			c.recorder.Eventf(pod, corev1.EventTypeWarning, "FailedRestore", "error restoring pod in provider: %v", err)
			return fmt.Errorf("restore pod in provider: %w", err)
		}
		return nil
	case failPod:
		msg := "The provider lost the pod's containers and its restart policy is Never"
		c.recorder.Event(pod, corev1.EventTypeWarning, "PodLost", msg)
		c.report(keyOf(pod), failed(pod, "PodLost", msg))
		return nil
	}
	return c.createInProvider(ctx, p, pod)
}

// createInProvider asks the provider to run pod; a rejection fails the pod
// with the provider's reason. The status of a provider that pushes comes
// with its push; that of a polled one is read at once.
func (c *Controller) createInProvider(ctx context.Context, p provider.PodLifecycleHandler, pod *corev1.Pod) error {
	err := p.CreatePod(ctx, handOver(p, pod))
	var rej *provider.Rejection
	if errors.As(err, &rej) {
		klog.FromContext(ctx).Info("Provider rejected pod", "reason", rej.Reason, "message", rej.Message)
		c.recorder.Event(pod, corev1.EventTypeWarning, rej.Reason, rej.Message)
		c.report(keyOf(pod), failed(pod, rej.Reason, "Pod was rejected: "+rej.Message))
		return nil
	}
	if err != nil {
		c.recorder.Eventf(pod, corev1.EventTypeWarning, "FailedCreate", "error creating pod in provider: %v", err)
		return fmt.Errorf("create pod in provider: %w", err)
	}
	klog.FromContext(ctx).V(2).Info("Created pod in provider")
	if _, pushes := p.(provider.PodNotifier); pushes {
		return nil
	}
	provPod, err := p.GetPod(ctx, pod.Namespace, pod.Name)
	if err != nil {
		return nil // the poll reads it again
	}
	c.observed(keyOf(pod), p, provPod)
	return nil
}

// failed returns pod with its status as the API has it, but Failed for
// reason: the status the controller decides for a pod that cannot run.
func failed(pod *corev1.Pod, reason, message string) *corev1.Pod {
	out := &corev1.Pod{ObjectMeta: pod.ObjectMeta, Status: *pod.Status.DeepCopy()}
	out.Status.Phase = corev1.PodFailed
	out.Status.Reason = reason
	out.Status.Message = message
	return out
}

// finishDeletion removes a pod whose containers have all stopped from the
// API, as the kubelet does once termination is complete, unless it was
// deleted with no grace already. The final status its provider reported
// goes first, unless the status worker has written it already: a pod kept
// by a finalizer shows how its containers ended.
// Once the API has answered, the record says so: the pod is not deleted
// again.
func (c *Controller) finishDeletion(ctx context.Context, rec *podRecord, pod *corev1.Pod) error {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.deleted {
		// Sent already. The cache still holds the pod: it has not seen
		// the delete yet, or its update (the grace period set to 0) or
		// that of the final status came first.
		return nil
	}
	key := keyOf(pod)
	if rep, ok := c.reports.newest(key); ok && rep.seq != rec.reported && podrules.IsFinal(rep.status.Phase) {
		if err := c.writeReport(ctx, key, rec, pod); err != nil {
			return err
		}
	}
	if g := pod.DeletionGracePeriodSeconds; g != nil && *g == 0 {
		// Deleted with no grace already (by a kwok stage, or forced): the
		// API removes it by itself at once, unless a finalizer holds it,
		// and another delete would only be answered 404. But the API
		// server deletes in two steps, the grace period set to 0, then
		// the removal; a delete cut short between them (its client
		// killed, say) leaves the pod with no grace for good, until
		// another delete removes it. A pod still there a while later is
		// deleted again.
		now := c.opts.Clock.Now()
		if rec.zeroGraceSince.IsZero() {
			rec.zeroGraceSince = now
		}
		if wait := zeroGraceWait - now.Sub(rec.zeroGraceSince); wait > 0 {
			c.queue.AddAfter(key, wait)
			return nil
		}
	}
	var zero int64
	err := c.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &zero,
		Preconditions:      metav1.NewUIDPreconditions(string(pod.UID)),
	})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		// Already gone, or replaced by a new pod of the same name.
		rec.deleted = true
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete terminated pod: %w", err)
	}
	rec.deleted = true
	klog.FromContext(ctx).V(2).Info("Pod terminated; deleted from the API")
	return nil
}

// zeroGraceWait is how long a pod deleted with no grace may stay in the
// API before the controller deletes it again (finishDeletion): far longer
// than the API server takes between the two steps of one delete.
const zeroGraceWait = 10 * time.Second

// keyOf returns a pod's queue key.
func keyOf(pod *corev1.Pod) string {
	return pod.Namespace + "/" + pod.Name
}
