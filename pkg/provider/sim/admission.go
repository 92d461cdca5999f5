package sim

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/provider"
)

// requests is what one pod asks of the node, in the units of the kubelet's
// admission messages.
type requests struct {
	milliCPU    int64
	memoryBytes int64
}

func (r *requests) add(o requests) {
	r.milliCPU += o.milliCPU
	r.memoryBytes += o.memoryBytes
}

func (r *requests) sub(o requests) {
	r.milliCPU -= o.milliCPU
	r.memoryBytes -= o.memoryBytes
}

func (r *requests) atLeast(o requests) {
	r.milliCPU = max(r.milliCPU, o.milliCPU)
	r.memoryBytes = max(r.memoryBytes, o.memoryBytes)
}

func containerRequests(c *corev1.Container) requests {
	return listRequests(c.Resources.Requests)
}

func listRequests(l corev1.ResourceList) requests {
	var r requests
	if q, ok := l[corev1.ResourceCPU]; ok {
		r.milliCPU = q.MilliValue()
	}
	if q, ok := l[corev1.ResourceMemory]; ok {
		r.memoryBytes = q.Value()
	}
	return r
}

// podRequests computes a pod's effective requests as the kubelet does
// (k8s.io/component-helpers/resource.PodRequests): the sum of its containers
// and restartable (sidecar) init containers, or the largest init container
// plus the sidecars started before it if that is more; pod-level requests
// replace the containers' where set; the pod overhead comes on top.
func podRequests(pod *corev1.Pod) requests {
	var sum, sidecars, initMax requests
	for i := range pod.Spec.Containers {
		sum.add(containerRequests(&pod.Spec.Containers[i]))
	}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		r := containerRequests(c)
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			sum.add(r)
			sidecars.add(r)
			initMax.atLeast(sidecars)
			continue
		}
		r.add(sidecars)
		initMax.atLeast(r)
	}
	sum.atLeast(initMax)
	if pr := pod.Spec.Resources; pr != nil {
		if q, ok := pr.Requests[corev1.ResourceCPU]; ok {
			sum.milliCPU = q.MilliValue()
		}
		if q, ok := pr.Requests[corev1.ResourceMemory]; ok {
			sum.memoryBytes = q.Value()
		}
	}
	sum.add(listRequests(pod.Spec.Overhead))
	return sum
}

// admit decides, like the kubelet's resource admission, whether a pod asking
// for req fits beside the pods already admitted (count pods using used). A
// resource missing from capacity is not limited; a resource the pod does not
// request is not checked. The caller holds the lock.
func (p *Provider) admit(req requests, used requests, count int) error {
	const msg = "Node didn't have enough resource: %s, requested: %d, used: %d, capacity: %d"
	if q, ok := p.opts.Capacity[corev1.ResourcePods]; ok && int64(count)+1 > q.Value() {
		return provider.Reject("OutOfpods", msg, corev1.ResourcePods, 1, count, q.Value())
	}
	if q, ok := p.opts.Capacity[corev1.ResourceCPU]; ok && req.milliCPU > 0 && req.milliCPU+used.milliCPU > q.MilliValue() {
		return provider.Reject("OutOfcpu", msg, corev1.ResourceCPU, req.milliCPU, used.milliCPU, q.MilliValue())
	}
	if q, ok := p.opts.Capacity[corev1.ResourceMemory]; ok && req.memoryBytes > 0 && req.memoryBytes+used.memoryBytes > q.Value() {
		return provider.Reject("OutOfmemory", msg, corev1.ResourceMemory, req.memoryBytes, used.memoryBytes, q.Value())
	}
	return nil
}
