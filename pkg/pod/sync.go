package pod

import (
	"context"
	"errors"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/podrules"
	"github.com/nodelet/nodelet/pkg/provider"
)

// sync makes the provider match the API for one pod and reports the
// provider's status back.
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
	p, ok := c.providers[pod.Spec.NodeName]
	if !ok {
		return nil
	}
	rec := c.record(key, pod.Spec.NodeName, pod.UID)
	// From here on, pod is ours to change: never modify the cache's copy.
	pod = pod.DeepCopy()
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("pod", klog.KObj(pod), "node", pod.Spec.NodeName))
	if podrules.IsMirrorPod(pod) {
		return c.syncMirror(ctx, rec, p, pod)
	}

	provPod, err := p.GetPod(ctx, namespace, name)
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
		if err := p.DeletePod(ctx, pod); err != nil {
			c.recorder.Eventf(pod, corev1.EventTypeWarning, "FailedKillPod", "error killing pod: %v", err)
			return fmt.Errorf("stop pod in provider: %w", err)
		}
	} else if podChanged(provPod, pod) {
		if err := p.UpdatePod(ctx, pod); err != nil {
			c.recorder.Eventf(pod, corev1.EventTypeWarning, "FailedUpdate", "error updating pod in provider: %v", err)
			return fmt.Errorf("update pod in provider: %w", err)
		}
	}
	return c.updateStatus(ctx, rec, pod, &provPod.Status)
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
	v, ok := c.known.Load(key)
	if !ok {
		return nil
	}
	p := c.providers[v.(*podRecord).node]
	provPod, err := p.GetPod(ctx, namespace, name)
	if errors.Is(err, provider.ErrNotFound) {
		c.known.Delete(key)
		c.finals.Delete(key)
		return nil
	}
	if err != nil {
		return fmt.Errorf("get pod from provider: %w", err)
	}
	if podrules.IsStaticPod(provPod) {
		// Its mirror pod went; the static pod source owns the pod itself.
		c.known.Delete(key)
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
		if rec.deleted {
			// Sent already. The cache still holds the pod: it has not
			// seen the delete yet, or its update (the grace period set to
			// 0) or that of the final status came first.
			return nil
		}
		// The final status first, as the kubelet writes it: a pod kept by
		// a finalizer shows how its containers ended.
		key := pod.Namespace + "/" + pod.Name
		if v, ok := c.finals.LoadAndDelete(key); ok {
			if final := v.(*corev1.Pod); final.UID == pod.UID {
				if err := c.updateStatus(ctx, rec, pod, &final.Status); err != nil {
					c.finals.Store(key, final)
					return err
				}
			}
		}
		return c.finishDeletion(ctx, rec, pod)
	case restorePod:
		if err := restorer.RestorePod(ctx, pod); err != nil {
			c.recorder.Eventf(pod, corev1.EventTypeWarning, "FailedRestore", "error restoring pod in provider: %v", err)
			return fmt.Errorf("restore pod in provider: %w", err)
		}
		return nil
	case failPod:
		status := pod.Status.DeepCopy()
		status.Phase = corev1.PodFailed
		status.Reason = "PodLost"
		status.Message = "The provider lost the pod's containers and its restart policy is Never"
		c.recorder.Event(pod, corev1.EventTypeWarning, "PodLost", status.Message)
		return c.updateStatus(ctx, rec, pod, status)
	}
	err := p.CreatePod(ctx, pod)
	var rej *provider.Rejection
	if errors.As(err, &rej) {
		klog.FromContext(ctx).Info("Provider rejected pod", "reason", rej.Reason, "message", rej.Message)
		c.recorder.Event(pod, corev1.EventTypeWarning, rej.Reason, rej.Message)
		status := pod.Status.DeepCopy()
		status.Phase = corev1.PodFailed
		status.Reason = rej.Reason
		status.Message = "Pod was rejected: " + rej.Message
		return c.updateStatus(ctx, rec, pod, status)
	}
	if err != nil {
		c.recorder.Eventf(pod, corev1.EventTypeWarning, "FailedCreate", "error creating pod in provider: %v", err)
		return fmt.Errorf("create pod in provider: %w", err)
	}
	klog.FromContext(ctx).V(2).Info("Created pod in provider")
	provPod, err := p.GetPod(ctx, pod.Namespace, pod.Name)
	if err != nil {
		// Status follows through the notification or the poll.
		return nil
	}
	return c.updateStatus(ctx, rec, pod, &provPod.Status)
}

// finishDeletion removes a pod whose containers have all stopped from the
// API, as the kubelet does once termination is complete. Once the API has
// answered, the record says so: the pod is not deleted again.
func (c *Controller) finishDeletion(ctx context.Context, rec *podRecord, pod *corev1.Pod) error {
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
