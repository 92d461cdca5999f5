package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Usage reports the pod's CPU use in nanocores, averaged since the previous
// call (0 on the first), and its memory working set in bytes (usage less
// inactive file cache), read from the pod's cgroups.
func (s *Sandbox) Usage() (cpuNanoCores uint64, memoryWorkingSet uint64, err error) {
	if len(s.rec.Cgroups) == 0 {
		return 0, 0, errors.New("pod has no cgroups")
	}
	cpu, cpuOK := cgroupCPUUsage(s.rec.Cgroups)
	mem, memOK := cgroupWorkingSet(s.rec.Cgroups)
	if !cpuOK && !memOK {
		return 0, 0, errors.New("no cpu or memory accounting in the pod's cgroups")
	}
	now := s.m.opts.Clock.Now()
	s.mu.Lock()
	prev := s.lastCPU
	s.lastCPU = cpuSample{at: now, usage: cpu}
	s.mu.Unlock()
	if cpuOK && !prev.at.IsZero() && cpu >= prev.usage && now.After(prev.at) {
		cpuNanoCores = uint64(float64(cpu-prev.usage) / now.Sub(prev.at).Seconds())
	}
	return cpuNanoCores, mem, nil
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

func cgroupWorkingSet(dirs []string) (uint64, bool) {
	for _, dir := range dirs {
		usageFile, inactiveKey := "memory.usage_in_bytes", "total_inactive_file"
		if !exists(filepath.Join(dir, usageFile)) {
			usageFile, inactiveKey = "memory.current", "inactive_file"
		}
		data, err := os.ReadFile(filepath.Join(dir, usageFile))
		if err != nil {
			continue
		}
		usage, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
		if err != nil {
			continue
		}
		stat, _ := os.ReadFile(filepath.Join(dir, "memory.stat"))
		if inactive, ok := statValue(stat, inactiveKey); ok && inactive < usage {
			usage -= inactive
		}
		return usage, true
	}
	return 0, false
}
