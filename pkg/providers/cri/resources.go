package cri

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/pkg/podrules"
)

// CFS shares and quota bounds, as the kernel and the kubelet use them.
const (
	minCPUShares     = 2
	maxCPUShares     = 262144
	cpuSharesPerCore = 1024
	minCPUQuota      = 1000 // microseconds
)

// OOM score adjustments by quality of service class, as the kubelet's.
const (
	guaranteedOOMScoreAdj = -997
	bestEffortOOMScoreAdj = 1000
)

// Priority of pods critical to the node, and their class name.
const (
	systemCriticalPriority = 2000000000
	systemNodeCritical     = "system-node-critical"
)

// containerResources are the Linux resources of a container, as the kubelet
// computes them: CPU shares from the CPU request (the limit when there is
// no request, at least 2), a CFS quota from the CPU limit, the memory limit,
// the OOM score adjustment of its QoS class, a limit for every huge page
// size and, with GroupOOMKill, memory.oom.group. A container without a CPU
// or memory limit of its own inherits the pod-level limit.
func containerResources(pod *corev1.Pod, c *corev1.Container, node nodeSettings) (*runtimeapi.LinuxContainerResources, error) {
	var cpuRequest *resource.Quantity
	if q, ok := c.Resources.Requests[corev1.ResourceCPU]; ok {
		cpuRequest = &q
	}
	cpuLimit, memLimit := c.Resources.Limits.Cpu(), c.Resources.Limits.Memory()
	if podLevelResourcesSet(pod) {
		if cpuLimit.IsZero() {
			cpuLimit = pod.Spec.Resources.Limits.Cpu()
		}
		if memLimit.IsZero() {
			memLimit = pod.Spec.Resources.Limits.Memory()
		}
	}
	r := linuxResources(cpuRequest, cpuLimit, memLimit, node)
	r.OomScoreAdj = oomScoreAdj(pod, c, node.MemoryCapacity)
	hp, err := hugepageLimits(pod, c, node.HugePageSizes)
	if err != nil {
		return nil, err
	}
	r.HugepageLimits = hp
	return r, nil
}

// sandboxResources are the resources of the whole pod, which runtimes may
// pass to the sandbox (the kubelet does, to help them size the pod): the
// CPU request and the CPU and memory limits of all its containers, without
// the overhead; and the pod's overhead itself, as requests equal to limits.
func sandboxResources(pod *corev1.Pod, node nodeSettings) (resources, overhead *runtimeapi.LinuxContainerResources) {
	req, lim := podRequests(pod), podLimits(pod)
	var cpuRequest *resource.Quantity
	if q, ok := req[corev1.ResourceCPU]; ok {
		cpuRequest = &q
	}
	resources = linuxResources(cpuRequest, lim.Cpu(), lim.Memory(), node)
	overhead = &runtimeapi.LinuxContainerResources{}
	if pod.Spec.Overhead != nil {
		cpu := pod.Spec.Overhead.Cpu()
		overhead = linuxResources(cpu, cpu, pod.Spec.Overhead.Memory(), node)
	}
	return resources, overhead
}

// linuxResources converts a CPU request (nil when unset), CPU limit and
// memory limit (zero when unset) to CFS and memory cgroup settings.
func linuxResources(cpuRequest, cpuLimit, memLimit *resource.Quantity, node nodeSettings) *runtimeapi.LinuxContainerResources {
	r := &runtimeapi.LinuxContainerResources{}
	if cpuRequest == nil {
		r.CpuShares = milliCPUToShares(cpuLimit.MilliValue())
	} else {
		r.CpuShares = milliCPUToShares(cpuRequest.MilliValue())
	}
	r.MemoryLimitInBytes = memLimit.Value()
	if !node.DisableCPUCFSQuota {
		r.CpuPeriod = int64(node.CPUCFSQuotaPeriod / time.Microsecond)
		r.CpuQuota = milliCPUToQuota(cpuLimit.MilliValue(), r.CpuPeriod)
	}
	if node.GroupOOMKill {
		r.Unified = map[string]string{"memory.oom.group": "1"}
	}
	return r
}

// milliCPUToShares converts millicores to CFS shares; no CPU gets the
// least weight there is, not the kernel's default of one core.
func milliCPUToShares(milli int64) int64 {
	shares := milli * cpuSharesPerCore / 1000
	return min(max(shares, minCPUShares), maxCPUShares)
}

// milliCPUToQuota converts a CPU limit in millicores to a CFS quota over
// period (both in microseconds): 0, no quota, for no limit, and at least
// 1ms otherwise.
func milliCPUToQuota(milli, period int64) int64 {
	if milli == 0 {
		return 0
	}
	return max(milli*period/1000, minCPUQuota)
}

// oomScoreAdj is the OOM score adjustment of a container, as the kubelet
// computes it: -997 for node-critical pods and Guaranteed ones, 1000 for
// BestEffort ones, and for Burstable ones 1000 less the container's share
// of the node's memory in thousandths (a sidecar never above the regular
// container with the smallest request), kept within [3, 999] so that they
// always rank between the other two classes.
func oomScoreAdj(pod *corev1.Pod, c *corev1.Container, memoryCapacity int64) int64 {
	if nodeCritical(pod) {
		return guaranteedOOMScoreAdj
	}
	switch podrules.QOSClass(pod) {
	case corev1.PodQOSGuaranteed:
		return guaranteedOOMScoreAdj
	case corev1.PodQOSBestEffort:
		return bestEffortOOMScoreAdj
	}
	var spare int64 // each container's share of pod-level requests no container claims
	if podLevelRequestsSet(pod) {
		if podMem := pod.Spec.Resources.Requests.Memory().Value(); podMem > 0 {
			n := int64(len(pod.Spec.Containers) + len(pod.Spec.InitContainers))
			containers := aggregateRequests(pod)
			spare = (podMem - containers.Memory().Value()) / n
		}
	}
	adj := 1000 - 1000*(c.Resources.Requests.Memory().Value()+spare)/memoryCapacity
	if podrules.IsPodSidecar(pod, c) && len(pod.Spec.Containers) > 0 {
		least := pod.Spec.Containers[0].Resources.Requests.Memory().Value()
		for _, rc := range pod.Spec.Containers[1:] {
			least = min(least, rc.Resources.Requests.Memory().Value())
		}
		adj = min(adj, 1000-1000*(least+spare)/memoryCapacity)
	}
	if adj < 1000+guaranteedOOMScoreAdj {
		return 1000 + guaranteedOOMScoreAdj
	}
	if adj == bestEffortOOMScoreAdj {
		return adj - 1
	}
	return adj
}

// nodeCritical says whether the pod is critical to the node itself: a
// system-critical priority with the system-node-critical class.
func nodeCritical(pod *corev1.Pod) bool {
	critical := pod.Spec.Priority != nil && *pod.Spec.Priority >= systemCriticalPriority
	_, mirror := pod.Annotations[corev1.MirrorPodAnnotationKey]
	return (critical || mirror) && pod.Spec.PriorityClassName == systemNodeCritical
}

// podLevelResourcesSet says whether the pod has pod-level requests or
// limits of a resource the kubelet manages at pod level.
func podLevelResourcesSet(pod *corev1.Pod) bool {
	return podLevelRequestsSet(pod) || pod.Spec.Resources != nil && podrules.HasPodLevelResources(pod.Spec.Resources.Limits)
}

// podLevelRequestsSet says whether the pod has pod-level requests of a
// resource the kubelet manages at pod level.
func podLevelRequestsSet(pod *corev1.Pod) bool {
	return pod.Spec.Resources != nil && podrules.HasPodLevelResources(pod.Spec.Resources.Requests)
}

// podRequests are the pod's effective requests without overhead: its
// pod-level requests where set, else those of its containers.
func podRequests(pod *corev1.Pod) corev1.ResourceList {
	reqs := aggregateRequests(pod)
	if pod.Spec.Resources != nil {
		overrideWithPodLevel(reqs, pod.Spec.Resources.Requests)
	}
	return reqs
}

// podLimits are the pod's effective limits without overhead: its pod-level
// limits where set, else those of its containers.
func podLimits(pod *corev1.Pod) corev1.ResourceList {
	lims := aggregate(pod, func(c *corev1.Container) corev1.ResourceList { return c.Resources.Limits })
	if pod.Spec.Resources != nil {
		overrideWithPodLevel(lims, pod.Spec.Resources.Limits)
	}
	return lims
}

func overrideWithPodLevel(list, podLevel corev1.ResourceList) {
	for name, q := range podLevel {
		if name == corev1.ResourceCPU || name == corev1.ResourceMemory || strings.HasPrefix(string(name), corev1.ResourceHugePagesPrefix) {
			list[name] = q.DeepCopy()
		}
	}
}

// aggregateRequests are the requests of all the pod's containers.
func aggregateRequests(pod *corev1.Pod) corev1.ResourceList {
	return aggregate(pod, func(c *corev1.Container) corev1.ResourceList { return c.Resources.Requests })
}

// aggregate sums a resource list over the pod's containers as the API
// defines it for sidecars: the regular containers and sidecars all run
// together, and each other init container runs with the sidecars started
// before it; the pod needs the larger of the two.
func aggregate(pod *corev1.Pod, of func(*corev1.Container) corev1.ResourceList) corev1.ResourceList {
	total := corev1.ResourceList{}
	for i := range pod.Spec.Containers {
		addResources(total, of(&pod.Spec.Containers[i]))
	}
	sidecars, inits := corev1.ResourceList{}, corev1.ResourceList{}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if podrules.IsPodSidecar(pod, c) {
			addResources(total, of(c))
			addResources(sidecars, of(c))
			maxResources(inits, sidecars)
			continue
		}
		running := corev1.ResourceList{}
		addResources(running, of(c))
		addResources(running, sidecars)
		maxResources(inits, running)
	}
	maxResources(total, inits)
	return total
}

func addResources(dst, src corev1.ResourceList) {
	for name, q := range src {
		sum := dst[name]
		sum.Add(q)
		dst[name] = sum
	}
}

func maxResources(dst, src corev1.ResourceList) {
	for name, q := range src {
		if cur, ok := dst[name]; !ok || q.Cmp(cur) > 0 {
			dst[name] = q.DeepCopy()
		}
	}
}

// hugepageLimits limits the container's use of every huge page size of the
// node: to what it (or, without any of its own, its pod) requests, and to
// nothing otherwise. An error names a huge page resource that has no valid
// page size.
func hugepageLimits(pod *corev1.Pod, c *corev1.Container, sizes []string) ([]*runtimeapi.HugepageLimit, error) {
	if len(sizes) == 0 {
		return nil, nil
	}
	wanted := map[string]uint64{}
	collect := func(list corev1.ResourceList) error {
		for name, q := range list {
			if !strings.HasPrefix(string(name), corev1.ResourceHugePagesPrefix) {
				continue
			}
			size, err := hugePageSize(name)
			if err != nil {
				return err
			}
			wanted[size] = uint64(q.Value())
		}
		return nil
	}
	if podLevelResourcesSet(pod) {
		if err := collect(pod.Spec.Resources.Limits); err != nil {
			return nil, err
		}
	}
	if err := collect(c.Resources.Limits); err != nil {
		return nil, err
	}
	limits := make([]*runtimeapi.HugepageLimit, 0, len(sizes))
	for _, size := range sizes {
		limits = append(limits, &runtimeapi.HugepageLimit{PageSize: size, Limit: wanted[size]})
	}
	return limits, nil
}

// hugePageSize is the page size of a huge page resource (hugepages-2Mi) in
// the runtime's units (2MB): the largest binary unit that divides it.
func hugePageSize(name corev1.ResourceName) (string, error) {
	q, err := resource.ParseQuantity(strings.TrimPrefix(string(name), corev1.ResourceHugePagesPrefix))
	if err != nil || q.Sign() <= 0 {
		return "", fmt.Errorf("resource %s: not a valid huge page size", name)
	}
	size := q.Value()
	units := []string{"B", "KB", "MB", "GB", "TB", "PB"}
	i := 0
	for size%1024 == 0 && i < len(units)-1 {
		size /= 1024
		i++
	}
	if size > 1024 && i < len(units)-1 {
		return "", fmt.Errorf("resource %s: page size not a power-of-1024 multiple of a unit", name)
	}
	return fmt.Sprintf("%d%s", size, units[i]), nil
}
