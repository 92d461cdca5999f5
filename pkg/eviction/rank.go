package eviction

import (
	"cmp"
	"slices"

	corev1 "k8s.io/api/core/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodelet/nodelet/pkg/podrules"
)

// Priorities and annotations that make a pod critical, as the kubelet reads
// them.
const (
	systemCriticalPriority = 2000000000
	configSourceAnnotation = "kubernetes.io/config.source"
	configMirrorAnnotation = "kubernetes.io/config.mirror"
)

// critical tells whether the kubelet would never evict the pod and always
// admit it: a static or mirror pod, or one of system-cluster-critical or
// system-node-critical priority.
func critical(pod *corev1.Pod) bool {
	if src, ok := pod.Annotations[configSourceAnnotation]; ok && src != "api" {
		return true
	}
	if _, ok := pod.Annotations[configMirrorAnnotation]; ok {
		return true
	}
	return pod.Spec.Priority != nil && *pod.Spec.Priority >= systemCriticalPriority
}

// candidate is a pod with what its ranking needs.
type candidate struct {
	pod          *corev1.Pod
	hasStats     bool
	usage        int64 // of the starved resource
	request      int64 // of the starved resource
	priority     int32
	stats        *statsv1alpha1.PodStats
	processCount int64
}

// rank orders pods for eviction under pressure on s, first to go first,
// as the kubelet does: pods without stats; then, for memory and disk, the
// pods using more than they request; then lower priority; then, for memory
// and disk, larger usage above the request, for PIDs more processes. Pods
// that compare equal keep their order.
func rank(s Signal, pods []*corev1.Pod, stats map[string]*statsv1alpha1.PodStats) []candidate {
	cs := make([]candidate, 0, len(pods))
	for _, pod := range pods {
		c := candidate{pod: pod}
		if pod.Spec.Priority != nil {
			c.priority = *pod.Spec.Priority
		}
		ps, ok := stats[string(pod.UID)]
		if ok {
			c.hasStats, c.stats = true, ps
			c.usage, c.request = usage(s, pod, ps)
			c.processCount = processCount(ps)
		}
		cs = append(cs, c)
	}
	byStats := func(a, b candidate) int { return cmpTrueFirst(!a.hasStats, !b.hasStats) }
	byPriority := func(a, b candidate) int { return cmp.Compare(a.priority, b.priority) }
	var order []func(a, b candidate) int
	if s == SignalPIDAvailable {
		order = []func(a, b candidate) int{byStats, byPriority, func(a, b candidate) int {
			return cmp.Compare(b.processCount, a.processCount)
		}}
	} else {
		order = []func(a, b candidate) int{byStats, func(a, b candidate) int {
			return cmpTrueFirst(a.usage > a.request, b.usage > b.request)
		}, byPriority, func(a, b candidate) int {
			return cmp.Compare(b.usage-b.request, a.usage-a.request)
		}}
	}
	slices.SortStableFunc(cs, func(a, b candidate) int {
		for _, f := range order {
			if d := f(a, b); d != 0 {
				return d
			}
		}
		return 0
	})
	return cs
}

func cmpTrueFirst(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return -1
	}
	return 1
}

// usage is what the pod uses and requests of the resource s starves.
// Nothing requests inodes or PIDs.
func usage(s Signal, pod *corev1.Pod, ps *statsv1alpha1.PodStats) (used, requested int64) {
	switch signalInfo[s].resource {
	case corev1.ResourceMemory:
		return memoryUsage(ps), podrules.PodRequests(pod).MemoryBytes
	case corev1.ResourceEphemeralStorage:
		return diskUsage(pod, ps, false), ephemeralStorageRequest(pod)
	case resourceInodes:
		return diskUsage(pod, ps, true), 0
	}
	return processCount(ps), 0
}

// ephemeralStorageRequest is the pod's effective ephemeral-storage request
// as the kubelet computes requests: its containers' and sidecars' together,
// or the largest init container with the sidecars started before it if
// that is more, plus the overhead.
func ephemeralStorageRequest(pod *corev1.Pod) int64 {
	get := func(l corev1.ResourceList) int64 {
		if q, ok := l[corev1.ResourceEphemeralStorage]; ok {
			return q.Value()
		}
		return 0
	}
	var sum, sidecars, initMax int64
	for _, c := range pod.Spec.Containers {
		sum += get(c.Resources.Requests)
	}
	for _, c := range pod.Spec.InitContainers {
		r := get(c.Resources.Requests)
		if podrules.IsSidecar(&c) {
			sum += r
			sidecars += r
			initMax = max(initMax, sidecars)
			continue
		}
		initMax = max(initMax, r+sidecars)
	}
	return max(sum, initMax) + get(pod.Spec.Overhead)
}
