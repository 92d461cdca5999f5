package cri

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/mountinfo"
	"github.com/nodelet/nodelet/pkg/podrules"
)

// podsCgroup holds the pods' cgroups, as the kubelet's kubepods (below its
// cgroupRoot "/"): Guaranteed pods directly, Burstable and BestEffort pods
// in a cgroup of their QoS class. Tools that read a node's cgroups by the
// kubelet's names (cAdvisor, the node e2e suite) find the pods there.
const podsCgroup = "/kubepods"

// PodsCgroup is the cgroup that holds every pod's: the node's system
// container "pods".
const PodsCgroup = podsCgroup

// cgroupFS is where the cgroup hierarchies are mounted.
const cgroupFS = "/sys/fs/cgroup"

// qosCgroup is the cgroup of a QoS class's pods.
func qosCgroup(qos corev1.PodQOSClass) string {
	switch qos {
	case corev1.PodQOSBurstable:
		return podsCgroup + "/burstable"
	case corev1.PodQOSBestEffort:
		return podsCgroup + "/besteffort"
	}
	return podsCgroup
}

// EnsureQOSCgroups creates the pods' cgroup and those of the Burstable and
// BestEffort classes in every cgroup hierarchy, as the kubelet does at
// start, before any pod of the class runs. They stay when the agent stops,
// as the kubelet's do.
func EnsureQOSCgroups() error {
	hierarchies, err := mountinfo.CgroupHierarchies()
	if err != nil {
		return err
	}
	var errs []error
	for _, h := range hierarchies {
		for _, dir := range []string{podsCgroup, qosCgroup(corev1.PodQOSBurstable), qosCgroup(corev1.PodQOSBestEffort)} {
			if err := ensureCgroup(h, dir); err != nil {
				errs = append(errs, fmt.Errorf("QoS cgroup %s in %s: %w", dir, h, err))
			}
		}
	}
	return errors.Join(errs...)
}

// LimitPodsMemory bounds the memory of all pods together to the node's
// allocatable memory, as the kubelet enforces node allocatable on its
// kubepods cgroup (enforceNodeAllocatable "pods", its default): the
// pods can then never take what is reserved for the system, and the
// cgroup's memory left is what the node has left to give them.
func LimitPodsMemory(cgroupRoot string, allocatable int64) error {
	if allocatable <= 0 {
		return nil
	}
	value := []byte(strconv.FormatInt(allocatable, 10))
	if _, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers")); err == nil {
		return os.WriteFile(filepath.Join(cgroupRoot, podsCgroup, "memory.max"), value, 0o644)
	}
	return os.WriteFile(filepath.Join(cgroupRoot, "memory", podsCgroup, "memory.limit_in_bytes"), value, 0o644)
}

// ensureCgroup creates the cgroup dir of the hierarchy mounted at root. In
// a cpuset hierarchy it takes its parent's CPUs and memory nodes, which a
// new cpuset lacks (no process could join it otherwise).
func ensureCgroup(root, dir string) error {
	path := filepath.Join(root, dir)
	if err := os.Mkdir(path, 0o755); err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil
		}
		return err
	}
	for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
		own, err := os.ReadFile(filepath.Join(path, f))
		if err != nil || len(own) > 1 {
			continue // not a cpuset hierarchy, or already set
		}
		parent, err := os.ReadFile(filepath.Join(filepath.Dir(path), f))
		if err != nil || len(parent) <= 1 {
			continue // cgroup v2, whose empty cpuset takes its parent's
		}
		if err := os.WriteFile(filepath.Join(path, f), parent, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// podCgroupLimits are the limits of a pod's own cgroup, which the kubelet
// sets before the runtime makes the pod's sandbox (its
// ResourceConfigForPod): CPU shares from the pod's CPU requests, a CFS
// quota only when every container has a CPU limit, and a memory limit only
// when every container has one, each with the pod's overhead, or the
// pod-level resources where set. A BestEffort pod gets the least shares.
type podCgroupLimits struct {
	CPUShares   int64
	CPUPeriod   int64 // microseconds
	CPUQuota    int64 // microseconds per period; 0: none
	MemoryLimit int64 // bytes; 0: none
}

func podLimitsOf(pod *corev1.Pod, node nodeSettings) podCgroupLimits {
	req, lim := podRequests(pod), podLimits(pod)
	cpuLimited, memLimited := podLevelLimitSet(pod, corev1.ResourceCPU), podLevelLimitSet(pod, corev1.ResourceMemory)
	if !cpuLimited || !memLimited {
		allCPU, allMem := true, true
		for _, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
			_, cpu := c.Resources.Limits[corev1.ResourceCPU]
			_, mem := c.Resources.Limits[corev1.ResourceMemory]
			allCPU, allMem = allCPU && cpu, allMem && mem
		}
		cpuLimited, memLimited = cpuLimited || allCPU, memLimited || allMem
	}
	cpuRequest, cpuLimit, memLimit := req.Cpu().MilliValue(), lim.Cpu().MilliValue(), lim.Memory().Value()
	if o := pod.Spec.Overhead; o != nil {
		cpuRequest += o.Cpu().MilliValue()
		cpuLimit += o.Cpu().MilliValue()
		memLimit += o.Memory().Value()
	}
	l := podCgroupLimits{CPUShares: milliCPUToShares(cpuRequest), CPUPeriod: int64(node.CPUCFSQuotaPeriod / time.Microsecond)}
	if podrules.QOSClass(pod) == corev1.PodQOSBestEffort {
		l.CPUShares = minCPUShares
		return l
	}
	if cpuLimited && !node.DisableCPUCFSQuota {
		l.CPUQuota = milliCPUToQuota(cpuLimit, l.CPUPeriod)
	}
	if memLimited {
		l.MemoryLimit = memLimit
	}
	return l
}

func podLevelLimitSet(pod *corev1.Pod, name corev1.ResourceName) bool {
	if pod.Spec.Resources == nil {
		return false
	}
	_, ok := pod.Spec.Resources.Limits[name]
	return ok
}

// ensurePodCgroup creates the pod's cgroup with its limits, in the cpu and
// memory hierarchies of cgroup v1 or in cgroup v2's, before the runtime
// puts the pod's sandbox and containers below it.
func ensurePodCgroup(pod *corev1.Pod, node nodeSettings, cgroupRoot string) error {
	l := podLimitsOf(pod, node)
	dir := cgroupParent(pod)
	type setting struct{ file, value string }
	write := func(root string, settings []setting) error {
		// No cpuset here: the cpu and memory hierarchies, or cgroup v2's,
		// whose empty cpuset takes its parent's.
		path := filepath.Join(root, dir)
		if err := os.MkdirAll(path, 0o755); err != nil {
			return fmt.Errorf("pod cgroup: %w", err)
		}
		for _, s := range settings {
			if err := os.WriteFile(filepath.Join(path, s.file), []byte(s.value), 0o644); err != nil {
				return fmt.Errorf("pod cgroup %s: %w", filepath.Join(path, s.file), err)
			}
		}
		return nil
	}
	if _, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers")); err == nil {
		quota := "max"
		if l.CPUQuota > 0 {
			quota = strconv.FormatInt(l.CPUQuota, 10)
		}
		memory := "max"
		if l.MemoryLimit > 0 {
			memory = strconv.FormatInt(l.MemoryLimit, 10)
		}
		return write(cgroupRoot, []setting{
			{"cpu.weight", strconv.FormatInt(sharesToWeight(l.CPUShares), 10)},
			{"cpu.max", quota + " " + strconv.FormatInt(l.CPUPeriod, 10)},
			{"memory.max", memory},
		})
	}
	cpu := []setting{{"cpu.shares", strconv.FormatInt(l.CPUShares, 10)}, {"cpu.cfs_period_us", strconv.FormatInt(l.CPUPeriod, 10)}}
	quota := int64(-1)
	if l.CPUQuota > 0 {
		quota = l.CPUQuota
	}
	cpu = append(cpu, setting{"cpu.cfs_quota_us", strconv.FormatInt(quota, 10)})
	if err := write(filepath.Join(cgroupRoot, "cpu"), cpu); err != nil {
		return err
	}
	memory := int64(-1)
	if l.MemoryLimit > 0 {
		memory = l.MemoryLimit
	}
	return write(filepath.Join(cgroupRoot, "memory"), []setting{{"memory.limit_in_bytes", strconv.FormatInt(memory, 10)}})
}

// sharesToWeight converts CFS shares to cgroup v2's cpu.weight, as the
// runtimes do.
func sharesToWeight(shares int64) int64 {
	return 1 + ((shares-2)*9999)/262142
}
