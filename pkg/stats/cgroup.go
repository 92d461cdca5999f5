package stats

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// CgroupFS reads cgroups' figures under Root (normally /sys/fs/cgroup),
// which holds either cgroup v2's one hierarchy or cgroup v1's one per
// controller. On a cgroup v1 host in hybrid mode, Root/unified is a
// cgroup v2 hierarchy without controllers, where runc places every
// container (and systemd every unit) at the same path as in the v1
// hierarchies: the kernel tracks pressure stalls there, so a cgroup's PSI
// is read from it.
type CgroupFS struct {
	Root string
}

// CgroupPaths are one cgroup's paths below each hierarchy's root: the
// same for a cgroup named by the agent or the runtime, possibly different
// per controller for a process placed by someone else.
type CgroupPaths struct {
	// CPU is the path in the hierarchy that accounts CPU time (cpuacct on
	// cgroup v1), Memory in the memory controller's, Unified in cgroup
	// v2's (the only one on a cgroup v2 host; PSI only on a hybrid one).
	CPU, Memory, Unified string
}

// Named is a cgroup at the same path in every hierarchy.
func Named(path string) CgroupPaths {
	return CgroupPaths{CPU: path, Memory: path, Unified: path}
}

// v2 tells whether Root is a cgroup v2 hierarchy.
func (c CgroupFS) v2() bool {
	_, err := os.Stat(filepath.Join(c.Root, "cgroup.controllers"))
	return err == nil
}

// unifiedRoot is where cgroup v2's hierarchy is mounted: Root itself, or
// Root/unified on a hybrid host; "" when there is none.
func (c CgroupFS) unifiedRoot() string {
	if c.v2() {
		return c.Root
	}
	hybrid := filepath.Join(c.Root, "unified")
	if _, err := os.Stat(filepath.Join(hybrid, "cgroup.procs")); err == nil {
		return hybrid
	}
	return ""
}

// ProcessCgroups reads the cgroups of a process from its cgroup file
// (/proc/<pid>/cgroup): "id:controllers:path" lines, the unified
// hierarchy's with id 0 and no controllers.
func ProcessCgroups(path string) (CgroupPaths, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return CgroupPaths{}, err
	}
	var p CgroupPaths
	for line := range strings.Lines(string(data)) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			p.Unified = parts[2]
			continue
		}
		for _, controller := range strings.Split(parts[1], ",") {
			switch controller {
			case "cpuacct":
				p.CPU = parts[2]
			case "memory":
				p.Memory = parts[2]
			}
		}
	}
	if p.CPU == "" && p.Memory == "" {
		// cgroup v2 alone: one path for everything.
		p.CPU, p.Memory = p.Unified, p.Unified
	}
	if p.CPU == "" || p.Memory == "" {
		return CgroupPaths{}, fmt.Errorf("%s: no cpuacct or memory cgroup", path)
	}
	return p, nil
}

// cgroupSample is what one read of a cgroup gives.
type cgroupSample struct {
	created  time.Time
	cpuUsage uint64 // cumulative core-nanoseconds
	memory   *statsv1alpha1.MemoryStats
	cpuPSI   *statsv1alpha1.PSIStats
	io       *statsv1alpha1.IOStats
}

// read samples a cgroup: its CPU time, memory (with the available memory
// only below a limit, as the kubelet reports it) and, where the kernel
// tracks them, its pressure stalls.
func (c CgroupFS) read(p CgroupPaths, ts metav1.Time) (cgroupSample, error) {
	var s cgroupSample
	var err error
	if c.v2() {
		dir := filepath.Join(c.Root, p.Unified)
		if s.created, err = changeTime(dir); err != nil {
			return s, err
		}
		cpu, err := readKeyValues(filepath.Join(dir, "cpu.stat"))
		if err != nil {
			return s, err
		}
		s.cpuUsage = cpu["usage_usec"] * uint64(time.Microsecond)
		if s.memory, err = memoryV2(dir, ts); err != nil {
			return s, err
		}
	} else {
		memDir := filepath.Join(c.Root, "memory", p.Memory)
		if s.created, err = changeTime(memDir); err != nil {
			return s, err
		}
		if s.cpuUsage, err = readUint(filepath.Join(c.Root, "cpuacct", p.CPU, "cpuacct.usage")); err != nil {
			return s, err
		}
		if s.memory, err = memoryV1(memDir, ts); err != nil {
			return s, err
		}
	}
	cpuPSI, memPSI, ioPSI := c.Pressure(p.Unified)
	s.cpuPSI, s.memory.PSI = cpuPSI, memPSI
	if ioPSI != nil {
		s.io = &statsv1alpha1.IOStats{Time: ts, PSI: ioPSI}
	}
	return s, nil
}

// Pressure returns the CPU, memory and I/O pressure stalls of the cgroup
// at path in the unified hierarchy, each nil where the kernel does not
// track it (no unified hierarchy, a kernel without PSI, a cgroup the
// runtime did not place there).
func (c CgroupFS) Pressure(path string) (cpu, memory, io *statsv1alpha1.PSIStats) {
	root := c.unifiedRoot()
	if root == "" || path == "" {
		return nil, nil, nil
	}
	dir := filepath.Join(root, path)
	read := func(file string) *statsv1alpha1.PSIStats {
		psi, err := ReadPSI(filepath.Join(dir, file))
		if err != nil {
			return nil
		}
		return psi
	}
	return read("cpu.pressure"), read("memory.pressure"), read("io.pressure")
}

// memoryV1 reads a cgroup v1 memory cgroup as cAdvisor reports it for
// the kubelet: the usage, RSS and working set of the whole hierarchy
// (total_*), the page faults of the cgroup's own tasks (cgroup v1 keeps a
// parent's total since it was made, its gone children's included: the
// kubelet reports the cgroup's own, which the node e2e suite bounds).
func memoryV1(dir string, ts metav1.Time) (*statsv1alpha1.MemoryStats, error) {
	usage, err := readUint(filepath.Join(dir, "memory.usage_in_bytes"))
	if err != nil {
		return nil, err
	}
	stat, err := readKeyValues(filepath.Join(dir, "memory.stat"))
	if err != nil {
		return nil, err
	}
	m := &statsv1alpha1.MemoryStats{Time: ts, UsageBytes: &usage}
	workingSet, rss := sub(usage, stat["total_inactive_file"]), stat["total_rss"]
	m.WorkingSetBytes, m.RSSBytes = &workingSet, &rss
	m.PageFaults, m.MajorPageFaults = optional(stat, "pgfault"), optional(stat, "pgmajfault")
	if limit, err := readUint(filepath.Join(dir, "memory.limit_in_bytes")); err == nil && limit < unlimited {
		available := sub(limit, workingSet)
		m.AvailableBytes = &available
	}
	return m, nil
}

// memoryV2 reads a cgroup v2 cgroup's memory.
func memoryV2(dir string, ts metav1.Time) (*statsv1alpha1.MemoryStats, error) {
	usage, err := readUint(filepath.Join(dir, "memory.current"))
	if err != nil {
		return nil, err
	}
	stat, err := readKeyValues(filepath.Join(dir, "memory.stat"))
	if err != nil {
		return nil, err
	}
	m := &statsv1alpha1.MemoryStats{Time: ts, UsageBytes: &usage}
	workingSet, rss := sub(usage, stat["inactive_file"]), stat["anon"]
	m.WorkingSetBytes, m.RSSBytes = &workingSet, &rss
	m.PageFaults, m.MajorPageFaults = optional(stat, "pgfault"), optional(stat, "pgmajfault")
	// memory.max is "max" without a limit, which readUint refuses.
	if limit, err := readUint(filepath.Join(dir, "memory.max")); err == nil {
		available := sub(limit, workingSet)
		m.AvailableBytes = &available
	}
	return m, nil
}

// changeTime is when a cgroup was made: the kernel never changes a cgroup
// directory's inode after, as cAdvisor takes its creation time.
func changeTime(dir string) (time.Time, error) {
	info, err := os.Stat(dir)
	if err != nil {
		return time.Time{}, err
	}
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return info.ModTime(), nil
	}
	return time.Unix(st.Ctim.Sec, st.Ctim.Nsec), nil
}

// notExist tells an error that means the cgroup is not there.
func notExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }
