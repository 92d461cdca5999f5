package podrules

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// qosResources are the resources that decide a pod's QoS class.
var qosResources = []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory}

// QOSClass is the pod's quality of service class as the kubelet reads it:
// the class the API server recorded in the pod's status, which stays the
// pod's for its life even when its resources are resized in place; else
// the class the API server would record. That is BestEffort without CPU or
// memory requests or limits, Guaranteed when every container limits both
// CPU and memory and requests what it limits, Burstable otherwise. A pod
// with pod-level CPU, memory or huge page resources is classed by those
// alone. A container's missing request is its limit, as the API server's
// defaulting makes it.
func QOSClass(pod *corev1.Pod) corev1.PodQOSClass {
	if pod.Status.QOSClass != "" {
		return pod.Status.QOSClass
	}
	requests, limits := corev1.ResourceList{}, corev1.ResourceList{}
	guaranteed := true
	if r := pod.Spec.Resources; r != nil && (HasPodLevelResources(r.Requests) || HasPodLevelResources(r.Limits)) {
		addQOSResources(requests, r.Requests)
		if len(r.Limits) > 0 && addQOSResources(limits, r.Limits) < len(qosResources) {
			guaranteed = false
		}
	} else {
		for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
			for i := range list {
				res := &list[i].Resources
				addQOSResources(requests, defaultedRequests(res))
				if addQOSResources(limits, res.Limits) < len(qosResources) {
					guaranteed = false
				}
			}
		}
	}
	if len(requests) == 0 && len(limits) == 0 {
		return corev1.PodQOSBestEffort
	}
	for name, req := range requests {
		if lim, ok := limits[name]; !ok || lim.Cmp(req) != 0 {
			guaranteed = false
		}
	}
	if guaranteed && len(requests) == len(limits) {
		return corev1.PodQOSGuaranteed
	}
	return corev1.PodQOSBurstable
}

// addQOSResources adds the positive CPU and memory quantities of src to
// dst and says how many there were.
func addQOSResources(dst, src corev1.ResourceList) int {
	n := 0
	for _, name := range qosResources {
		if q, ok := src[name]; ok && q.Sign() > 0 {
			n++
			sum := dst[name]
			sum.Add(q)
			dst[name] = sum
		}
	}
	return n
}

// defaultedRequests are a container's CPU and memory requests as the API
// server defaults them: the limit where the request is missing.
func defaultedRequests(r *corev1.ResourceRequirements) corev1.ResourceList {
	out := corev1.ResourceList{}
	for _, name := range qosResources {
		if q, ok := r.Requests[name]; ok {
			out[name] = q
		} else if q, ok := r.Limits[name]; ok {
			out[name] = q
		}
	}
	return out
}

// HasPodLevelResources says whether list, a pod's pod-level requests or
// limits, names a resource that the kubelet manages at pod level: CPU,
// memory or huge pages.
func HasPodLevelResources(list corev1.ResourceList) bool {
	for name := range list {
		if name == corev1.ResourceCPU || name == corev1.ResourceMemory || strings.HasPrefix(string(name), corev1.ResourceHugePagesPrefix) {
			return true
		}
	}
	return false
}
