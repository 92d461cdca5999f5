package virtualkubelet

import (
	"context"
	"errors"
	"fmt"

	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/provider"
)

// The pods handed to CreatePod, UpdatePod and DeletePod are copies, as
// virtual-kubelet hands them: its providers may change the pods they get
// (its mock writes the final status into the pod DeletePod gets), where
// nodelet goes on reading its own.

// CreatePod hands the pod to the provider; its errors pass through.
func (c *core) CreatePod(ctx context.Context, pod *corev1.Pod) error {
	return c.pods.CreatePod(ctx, pod.DeepCopy())
}

// UpdatePod hands the pod to the provider.
func (c *core) UpdatePod(ctx context.Context, pod *corev1.Pod) error {
	return mapError(c.pods.UpdatePod(ctx, pod.DeepCopy()))
}

// DeletePod asks the provider to stop the pod. A provider that does not know
// the pod has nothing left to stop: that is no error. The pod is remembered
// until the provider stops reporting it (see finished).
func (c *core) DeletePod(ctx context.Context, pod *corev1.Pod) error {
	err := c.pods.DeletePod(ctx, pod.DeepCopy())
	if isNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.deleting[podKey(pod.Namespace, pod.Name)] = pod.UID
	c.mu.Unlock()
	return nil
}

// GetPod returns the provider's pod with the status GetPodStatus reports.
func (c *core) GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	key := podKey(namespace, name)
	vkPod, err := c.pods.GetPod(ctx, namespace, name)
	if isNotFound(err) || (err == nil && vkPod == nil) {
		c.forget(key)
		return nil, notFoundError(err)
	}
	if err != nil {
		return nil, err
	}
	status, err := c.pods.GetPodStatus(ctx, namespace, name)
	if isNotFound(err) {
		c.forget(key)
		return nil, notFoundError(err)
	}
	if err != nil {
		return nil, fmt.Errorf("pod status: %w", err)
	}
	// Metadata and spec stay shared, as nodelet's contract allows; the
	// status is the caller's own.
	pod := *vkPod
	if status != nil {
		status.DeepCopyInto(&pod.Status)
	} else {
		vkPod.Status.DeepCopyInto(&pod.Status)
	}
	if c.finished(key, &pod) {
		klog.FromContext(ctx).V(4).Info("Deleted pod has terminated; reporting it gone", "pod", klog.KRef(namespace, name), "phase", pod.Status.Phase)
		return nil, fmt.Errorf("pod %s terminated after its deletion: %w", key, provider.ErrNotFound)
	}
	return &pod, nil
}

// GetPods returns the provider's pods, leaving out those finished.
func (c *core) GetPods(ctx context.Context) ([]*corev1.Pod, error) {
	pods, err := c.pods.GetPods(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*corev1.Pod, 0, len(pods))
	for _, pod := range pods {
		if pod == nil || c.finished(podKey(pod.Namespace, pod.Name), pod) {
			continue
		}
		out = append(out, pod)
	}
	return out, nil
}

// finished says whether pod, which the provider reports under key, is one
// DeletePod was asked to stop and has terminated: nodelet's contract has
// such a pod reported gone. A pod of another UID under the same name ends
// the record.
func (c *core) finished(key string, pod *corev1.Pod) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	uid, ok := c.deleting[key]
	if !ok {
		return false
	}
	if uid != pod.UID {
		delete(c.deleting, key)
		return false
	}
	return terminated(&pod.Status)
}

// terminated says whether a status is the final one virtual-kubelet's
// contract asks of a deleted pod: a terminal phase, or every container
// terminated.
func terminated(status *corev1.PodStatus) bool {
	if status.Phase == corev1.PodSucceeded || status.Phase == corev1.PodFailed {
		return true
	}
	if len(status.ContainerStatuses) == 0 {
		return false
	}
	for _, cs := range status.ContainerStatuses {
		if cs.State.Terminated == nil {
			return false
		}
	}
	return true
}

// forget drops the record of a deleted pod once the provider no longer has it.
func (c *core) forget(key string) {
	c.mu.Lock()
	delete(c.deleting, key)
	c.mu.Unlock()
}

// NotifyPods registers nodelet's callback with the provider; the pods it
// pushes go to nodelet as they are.
func (n podNotifier) NotifyPods(ctx context.Context, notify func(*corev1.Pod)) {
	n.notifier.NotifyPods(ctx, notify)
}

func podKey(namespace, name string) string { return namespace + "/" + name }

// isNotFound says whether a provider's error means that it does not know the
// pod: virtual-kubelet's errdefs NotFound (through Cause chains, as errdefs
// looks, or %w wrapping), a Kubernetes NotFound status error, or nodelet's
// own provider.ErrNotFound.
func isNotFound(err error) bool {
	if err == nil {
		return false
	}
	if errdefs.IsNotFound(err) || apierrors.IsNotFound(err) || errors.Is(err, provider.ErrNotFound) {
		return true
	}
	var nf errdefs.ErrNotFound
	return errors.As(err, &nf) && nf.NotFound()
}

// notFoundError is provider.ErrNotFound carrying the provider's error, if any.
func notFoundError(err error) error {
	switch {
	case err == nil:
		return provider.ErrNotFound
	case errors.Is(err, provider.ErrNotFound):
		return err
	default:
		return fmt.Errorf("%w: %w", provider.ErrNotFound, err)
	}
}

// mapError makes a provider's not-found error one nodelet recognises, and
// passes any other through.
func mapError(err error) error {
	if isNotFound(err) {
		return notFoundError(err)
	}
	return err
}
