package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Usage is one sample of a cgroup's CPU and memory.
type Usage struct {
	At time.Time
	// CPU is false when the cgroup has no CPU accounting.
	CPU bool
	// CPUUsageNanoSeconds is the cumulative CPU time.
	CPUUsageNanoSeconds uint64
	// CPUNanoCores is the rate since the previous sample of the same
	// cgroup; nil for the first one.
	CPUNanoCores *uint64
	// Memory is false when the cgroup has no memory accounting.
	Memory bool
	// MemoryUsage is all the memory charged to the cgroup, MemoryWorkingSet
	// that less the inactive file cache (what the kubelet evicts on), and
	// MemoryRSS the anonymous memory.
	MemoryUsage, MemoryWorkingSet, MemoryRSS uint64
	PageFaults, MajorPageFaults              uint64
}

// PodUsage is one sample of a pod: its own cgroup's and its running
// containers', by name.
type PodUsage struct {
	Pod        Usage
	Containers map[string]Usage
}

// Usage samples the pod's cgroups and those of its running containers.
func (s *Sandbox) Usage() (PodUsage, error) {
	if len(s.rec.Cgroups) == 0 {
		return PodUsage{}, errors.New("pod has no cgroups")
	}
	now := s.m.opts.Clock.Now()
	out := PodUsage{Pod: s.sample("", s.rec.Cgroups, now), Containers: map[string]Usage{}}
	if !out.Pod.CPU && !out.Pod.Memory {
		return PodUsage{}, errors.New("no cpu or memory accounting in the pod's cgroups")
	}
	for _, st := range s.Containers() {
		if st.State != StateRunning {
			continue
		}
		dirs := make([]string, 0, len(s.rec.Cgroups))
		for _, cg := range s.rec.Cgroups {
			dirs = append(dirs, filepath.Join(cg, st.Name))
		}
		out.Containers[st.Name] = s.sample(st.Name, dirs, now)
	}
	return out, nil
}

// sample reads one cgroup and works out its CPU rate from the previous
// sample under the same key.
func (s *Sandbox) sample(key string, dirs []string, now time.Time) Usage {
	u := Usage{At: now}
	u.CPUUsageNanoSeconds, u.CPU = cgroupCPUUsage(dirs)
	readCgroupMemory(dirs, &u)
	if !u.CPU {
		return u
	}
	s.mu.Lock()
	if s.lastCPU == nil {
		s.lastCPU = map[string]cpuSample{}
	}
	prev, seen := s.lastCPU[key]
	s.lastCPU[key] = cpuSample{at: now, usage: u.CPUUsageNanoSeconds}
	s.mu.Unlock()
	// A container's cgroup made anew for the next attempt starts from zero:
	// no rate across that.
	if seen && u.CPUUsageNanoSeconds >= prev.usage && now.After(prev.at) {
		rate := uint64(float64(u.CPUUsageNanoSeconds-prev.usage) / now.Sub(prev.at).Seconds())
		u.CPUNanoCores = &rate
	}
	return u
}

// cgroupCPUUsage is the cumulative CPU time in nanoseconds.
func cgroupCPUUsage(dirs []string) (uint64, bool) {
	for _, dir := range dirs {
		if data, err := os.ReadFile(filepath.Join(dir, "cpuacct.usage")); err == nil {
			v, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
			return v, err == nil
		}
		if data, err := os.ReadFile(filepath.Join(dir, "cpu.stat")); err == nil {
			if v, ok := statValue(data, "usage_usec"); ok {
				return v * 1000, true
			}
		}
	}
	return 0, false
}

// readCgroupMemory fills in the memory figures from the first directory
// with memory accounting, v1 or v2.
func readCgroupMemory(dirs []string, u *Usage) {
	for _, dir := range dirs {
		usageFile, inactiveKey, rssKey := "memory.usage_in_bytes", "total_inactive_file", "total_rss"
		faultKey, majorKey := "total_pgfault", "total_pgmajfault"
		if !exists(filepath.Join(dir, usageFile)) {
			usageFile, inactiveKey, rssKey = "memory.current", "inactive_file", "anon"
			faultKey, majorKey = "pgfault", "pgmajfault"
		}
		data, err := os.ReadFile(filepath.Join(dir, usageFile))
		if err != nil {
			continue
		}
		usage, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
		if err != nil {
			continue
		}
		u.Memory, u.MemoryUsage, u.MemoryWorkingSet = true, usage, usage
		stat, _ := os.ReadFile(filepath.Join(dir, "memory.stat"))
		if inactive, ok := statValue(stat, inactiveKey); ok && inactive < usage {
			u.MemoryWorkingSet = usage - inactive
		}
		u.MemoryRSS, _ = statValue(stat, rssKey)
		u.PageFaults, _ = statValue(stat, faultKey)
		u.MajorPageFaults, _ = statValue(stat, majorKey)
		return
	}
}
