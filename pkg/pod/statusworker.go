package pod

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/podrules"
	"github.com/nodelet/nodelet/pkg/provider"
)

// pushed is the callback a provider.PodNotifier calls with a pod whose
// status changed: the status is kept as the pod's newest report and queued
// for writing. A finished pod is queued for the spec worker too, which
// finishes its deletion or creates the pod replacing it once the provider
// has let it go. It never blocks.
func (c *Controller) pushed(ctx context.Context, pod *corev1.Pod) {
	klog.FromContext(ctx).V(4).Info("Provider reported a status", "pod", klog.KObj(pod), "phase", pod.Status.Phase)
	key := pod.Namespace + "/" + pod.Name
	c.report(key, pod)
	if podrules.IsFinal(pod.Status.Phase) && !podrules.IsStaticPod(pod) {
		c.queue.Add(key)
	}
}

// report keeps pod's status as the newest report of the pod under key and
// queues it for writing.
func (c *Controller) report(key string, pod *corev1.Pod) {
	c.reports.put(key, pod)
	c.statusQueue.Add(key)
}

// observed takes what the spec worker read of a pod from its provider as a
// report and queues the pod's status. For a provider that pushes, it is
// kept only if nothing was pushed yet (after an agent restart, say); for a
// polled one, it is the newest report.
func (c *Controller) observed(key string, p provider.PodLifecycleHandler, provPod *corev1.Pod) {
	if _, pushes := p.(provider.PodNotifier); pushes {
		c.reports.seed(key, provPod)
	} else {
		c.reports.put(key, provPod)
	}
	c.statusQueue.Add(key)
}

// syncStatus is the status queue's sync: it writes the newest report of
// one pod when the API's status differs from it. It never calls the
// provider. A pod gone from the API takes its report with it; a pod the
// spec worker has not seen yet waits for it (it queues the pod's status
// once it has).
func (c *Controller) syncStatus(ctx context.Context, key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil // not a key we made; nothing to retry
	}
	// Read before the pod: a report that comes after it may be of a new
	// pod of the same name, and must not be dropped.
	rep, reported := c.reports.newest(key)
	if !reported {
		return nil // nothing reported yet
	}
	pod, err := c.lister.Pods(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		c.reports.drop(key, rep.seq)
		return nil
	}
	if err != nil {
		return err
	}
	if _, ok := c.provider(pod.Spec.NodeName); !ok {
		c.reports.drop(key, rep.seq)
		return nil
	}
	rec, ok := c.records.matching(key, pod.Spec.NodeName, pod.UID)
	if !ok {
		return nil
	}
	// The cache's pod is passed as it is: writeReport and updateStatus
	// only read it, and a copy of every pod at every event was most of
	// the status worker's garbage.
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rep, ok := c.reports.newest(key); ok && rec.echoes(pod, rep.seq) {
		return nil
	}
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("pod", klog.KObj(pod), "node", pod.Spec.NodeName))
	return c.writeReport(ctx, key, rec, pod)
}

// writeReport writes the newest report of the pod under key when it is
// about pod (else it is dropped) and the API's status differs. After a
// conflict the pod is read from the API, not the cache, which was behind.
// The caller holds rec.mu; a conflict is returned for the caller to retry.
func (c *Controller) writeReport(ctx context.Context, key string, rec *podRecord, pod *corev1.Pod) error {
	rep, ok := c.reports.newest(key)
	if !ok || rec.deleted {
		return nil
	}
	if rec.stale {
		live, err := c.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1GetOptions)
		switch {
		case apierrors.IsNotFound(err):
			return nil // deleted; the informer brings the rest
		case err != nil:
			return fmt.Errorf("get pod: %w", err)
		case live.UID != pod.UID:
			return nil // replaced; the new pod has a record of its own
		}
		pod = live
	}
	if !rep.fits(pod) {
		c.reports.drop(key, rep.seq)
		return nil
	}
	err := c.updateStatus(ctx, rec, pod, &rep.status)
	rec.stale = apierrors.IsConflict(err)
	if err != nil {
		return err
	}
	rec.reported = rep.seq
	return nil
}
