package process

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodelet/nodelet/pkg/podrules"
	"github.com/nodelet/nodelet/pkg/providers/process/sandbox"
)

// podResources are a pod cgroup's resources, as the kubelet sets them: the
// CPU share of the pod's effective requests, and the CPU and memory limits
// only when every container has one (the sum of the app containers' or the
// largest init container's, whichever is more).
func podResources(pod *corev1.Pod) sandbox.Resources {
	r := sandbox.Resources{CPURequestMillis: podrules.PodRequests(pod).MilliCPU}
	value := func(q resource.Quantity, name corev1.ResourceName) int64 {
		if name == corev1.ResourceCPU {
			return q.MilliValue()
		}
		return q.Value()
	}
	limit := func(name corev1.ResourceName) int64 {
		var sum, initMax int64
		for i := range pod.Spec.Containers {
			q, ok := pod.Spec.Containers[i].Resources.Limits[name]
			if !ok {
				return 0
			}
			sum += value(q, name)
		}
		for i := range pod.Spec.InitContainers {
			q, ok := pod.Spec.InitContainers[i].Resources.Limits[name]
			if !ok {
				return 0
			}
			initMax = max(initMax, value(q, name))
		}
		return max(sum, initMax)
	}
	r.CPULimitMillis = limit(corev1.ResourceCPU)
	r.MemoryLimitBytes = limit(corev1.ResourceMemory)
	return r
}
