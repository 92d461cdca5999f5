package pod

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/podrules"
	"github.com/nodelet/nodelet/pkg/provider"
)

var metav1GetOptions = metav1.GetOptions{}

// danglingDecision says what to do with a pod the provider runs, given what
// the API holds under its name (nil when the API has no such pod).
type danglingDecision int

const (
	keepPod      danglingDecision = iota // the API knows it: sync it
	deleteInProv                         // the API does not know it: stop it
)

func decideProviderPod(provPod, apiPod *corev1.Pod) danglingDecision {
	if apiPod == nil {
		return deleteInProv
	}
	if provPod.UID != "" && apiPod.UID != provPod.UID {
		// Same name, another pod: the one the provider runs was deleted.
		return deleteInProv
	}
	if apiPod.Spec.NodeName != provPod.Spec.NodeName {
		return deleteInProv
	}
	return keepPod
}

// lostAction says what to do with a pod the API binds to our node but the
// provider does not run.
type lostAction int

const (
	nothing    lostAction = iota // finished pods stay finished
	createPod                    // never started, or its policy restarts it
	restorePod                   // started, and the provider can take it over
	failPod                      // started, lost, and restartPolicy Never
	finishDel                    // being deleted: nothing runs, finish the deletion
)

func decideLostPod(pod *corev1.Pod, canRestore bool) lostAction {
	switch {
	case pod.DeletionTimestamp != nil:
		return finishDel
	case pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed:
		return nothing
	case !podrules.PodStarted(pod):
		return createPod
	case canRestore:
		return restorePod
	case pod.Spec.RestartPolicy == corev1.RestartPolicyNever:
		return failPod
	default:
		return createPod
	}
}

// reconcileStartup runs once the cache has synced, over the nodes Run
// starts with: see reconcileNode.
func (c *Controller) reconcileStartup(ctx context.Context, nodes map[string]provider.PodLifecycleHandler) error {
	dangling := 0
	for node, p := range nodes {
		n, err := c.reconcileNode(ctx, node, p)
		if err != nil {
			return err
		}
		dangling += n
	}
	klog.FromContext(ctx).Info("Start-up reconcile done", "dangling", dangling)
	return nil
}

// reconcileNode makes one node's provider and the API agree: pods the
// provider runs that the API does not know are stopped; every API pod on
// the node is queued, so the sync creates, restores or fails what the
// provider lost. It returns how many dangling pods it stopped.
func (c *Controller) reconcileNode(ctx context.Context, node string, p provider.PodLifecycleHandler) (int, error) {
	logger := klog.FromContext(ctx)
	dangling := 0
	pods, err := listProviderPods(ctx, node, p)
	if err != nil {
		return 0, fmt.Errorf("list pods of node %s: %w", node, err)
	}
	for _, provPod := range pods {
		key := provPod.Namespace + "/" + provPod.Name
		if podrules.IsStaticPod(provPod) {
			// Not the API's: only its mirror pod's status is ours.
			c.queue.Add(key)
			continue
		}
		c.records.get(key, node, provPod.UID)
		apiPod, err := c.apiPod(ctx, provPod.Namespace, provPod.Name)
		switch {
		case apierrors.IsNotFound(err):
			apiPod = nil
		case err != nil:
			// Unsure: keep it and let the sync retry.
			c.queue.Add(key)
			continue
		}
		if decideProviderPod(provPod, apiPod) == deleteInProv {
			dangling++
			logger.Info("Stopping dangling pod the API does not know", "pod", klog.KObj(provPod), "node", node)
			if err := p.DeletePod(ctx, immediate(provPod)); err != nil {
				logger.Error(err, "Stopping dangling pod failed", "pod", klog.KObj(provPod))
			}
		}
		c.queue.Add(key)
	}
	objs, err := c.informer.GetIndexer().ByIndex(NodeNameIndex, node)
	if err != nil {
		return dangling, fmt.Errorf("index pods of node %s: %w", node, err)
	}
	for _, obj := range objs {
		c.enqueue(obj)
	}
	return dangling, nil
}

// immediate returns a copy of pod to be stopped without a grace period.
func immediate(pod *corev1.Pod) *corev1.Pod {
	p := pod.DeepCopy()
	var zero int64
	p.DeletionGracePeriodSeconds = &zero
	if p.DeletionTimestamp == nil {
		now := metav1.Now()
		p.DeletionTimestamp = &now
	}
	return p
}
