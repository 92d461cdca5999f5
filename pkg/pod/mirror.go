package pod

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/podrules"
	"github.com/nodelet/nodelet/pkg/provider"
)

// syncMirror handles a mirror pod, the API's view of a static pod that the
// node runs from a manifest: it is never run, updated or stopped here (the
// static pod source creates, replaces and deletes mirror pods), but the
// static pod's status is written to it (by the status worker), as the
// kubelet's status manager does. A mirror pod of another version of the
// static pod, or one being deleted, gets no status: it is about to be
// replaced.
func (c *Controller) syncMirror(ctx context.Context, key string, p provider.PodLifecycleHandler, mirror *corev1.Pod) error {
	static, err := p.GetPod(ctx, mirror.Namespace, mirror.Name)
	switch {
	case errors.Is(err, provider.ErrNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("get static pod from provider: %w", err)
	}
	if mirrorStatusWanted(mirror, static) {
		c.observed(key, p, static)
	}
	return nil
}

// mirrorStatusWanted tells whether the status of the provider's pod static
// is to be written to the API's mirror pod.
func mirrorStatusWanted(mirror, static *corev1.Pod) bool {
	return mirrorWanted(mirror, podrules.IsStaticPod(static), static.Annotations[podrules.ConfigHashAnnotation])
}

// mirrorWanted tells whether the status of a pod is to be written to the
// API's mirror pod: the pod is a static pod (static) whose config hash
// the mirror carries, and the mirror is not being deleted.
func mirrorWanted(mirror *corev1.Pod, static bool, hash string) bool {
	return mirror.DeletionTimestamp == nil && static && podrules.MirrorsHash(mirror, hash)
}
