package sandbox

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cgroupRoot is where the cgroup hierarchies are mounted, and
// procSelfCgroup where this process's own cgroups are listed. They are
// variables only so that tests can point them at a fake cgroupfs.
var (
	cgroupRoot     = "/sys/fs/cgroup"
	procSelfCgroup = "/proc/self/cgroup"
)

// v1Controllers are the cgroup v1 hierarchies a pod gets a cgroup in.
var v1Controllers = []string{"memory", "cpu", "cpuacct", "pids"}

// cgroupParents finds, for each hierarchy, the directory under which pods'
// cgroups are made: <root>/<name> when the hierarchy root is writable, else
// <our own cgroup>/<name>. It creates those directories.
func cgroupParents(name string) (dirs []string, v2 bool, err error) {
	if exists(filepath.Join(cgroupRoot, "cgroup.controllers")) {
		own := ownCgroup("")
		for _, base := range []string{cgroupRoot, filepath.Join(cgroupRoot, own)} {
			dir := filepath.Join(base, name)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				continue
			}
			enableControllers(base)
			enableControllers(dir)
			return []string{dir}, true, nil
		}
		return nil, true, fmt.Errorf("no writable cgroup v2 directory for %q", name)
	}
	seen := map[string]bool{}
	for _, c := range v1Controllers {
		root, err := filepath.EvalSymlinks(filepath.Join(cgroupRoot, c))
		if err != nil || seen[root] || !exists(filepath.Join(root, "cgroup.procs")) {
			continue
		}
		seen[root] = true
		for _, base := range []string{root, filepath.Join(root, ownCgroup(c))} {
			dir := filepath.Join(base, name)
			if err := os.MkdirAll(dir, 0o755); err == nil {
				dirs = append(dirs, dir)
				break
			}
		}
	}
	if len(dirs) == 0 {
		return nil, false, errors.New("no writable cgroup v1 hierarchy")
	}
	return dirs, false, nil
}

// RemoveCgroupParents removes, in each hierarchy, the directory under
// which the pods' cgroups named name are made (cgroupParents) and the
// supervisors' cgroup in it, where no pod's cgroup and no process is left
// in them: what a test or a teardown leaves once every sandbox is
// removed. A manager that makes a sandbox later makes them again. One
// still in use stays and is named in the error; none existing is no
// error.
func RemoveCgroupParents(name string) error {
	var dirs []string
	if exists(filepath.Join(cgroupRoot, "cgroup.controllers")) {
		dirs = []string{filepath.Join(cgroupRoot, name), filepath.Join(cgroupRoot, ownCgroup(""), name)}
	} else {
		for _, c := range v1Controllers {
			root, err := filepath.EvalSymlinks(filepath.Join(cgroupRoot, c))
			if err != nil {
				continue
			}
			dirs = append(dirs, filepath.Join(root, name), filepath.Join(root, ownCgroup(c), name))
		}
	}
	var errs []error
	seen := map[string]bool{}
	for _, dir := range dirs {
		if seen[dir] {
			continue
		}
		seen[dir] = true
		for _, d := range []string{filepath.Join(dir, supervisorsCgroup), dir} {
			if err := syscall.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
				break
			}
		}
	}
	return errors.Join(errs...)
}

// ownCgroup is this process's cgroup path in the v1 hierarchy of
// controller, or in the v2 hierarchy when controller is empty.
func ownCgroup(controller string) string {
	data, err := os.ReadFile(procSelfCgroup)
	if err != nil {
		return "/"
	}
	for _, line := range strings.Split(string(data), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if controller == "" && parts[0] == "0" && parts[1] == "" {
			return parts[2]
		}
		for _, c := range strings.Split(parts[1], ",") {
			if controller != "" && c == controller {
				return parts[2]
			}
		}
	}
	return "/"
}

// enableControllers lets the children of a v2 cgroup use the controllers
// we set limits with. Controllers not available are skipped.
func enableControllers(dir string) {
	for _, c := range []string{"cpu", "memory", "pids"} {
		_ = os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+"+c), 0)
	}
}

// makeCgroups creates the cgroup directories (a pod's or a container's).
// On v2 it enables the controllers in each directory's parent, never in
// the directory itself: a v2 cgroup that hands controllers to children
// cannot hold processes, and a container's processes join its own cgroup.
func makeCgroups(dirs []string, v2 bool) error {
	for _, dir := range dirs {
		if v2 {
			enableControllers(filepath.Dir(dir))
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("create cgroup: %w", err)
		}
	}
	return nil
}

// setResources writes the limits into every cgroup directory that has the
// matching file, so it works whatever controllers are mounted together.
// The CPU share is always written, as the kubelet does: a container without
// a CPU request gets the least (2 shares, weight 1), not the default.
func setResources(dirs []string, v2 bool, r Resources) error {
	type setting struct{ file, value string }
	var settings []setting
	if v2 {
		if r.MemoryLimitBytes > 0 {
			settings = append(settings, setting{"memory.max", strconv.FormatInt(r.MemoryLimitBytes, 10)})
			settings = append(settings, setting{"memory.swap.max", "0"})
		}
		if r.CPULimitMillis > 0 {
			settings = append(settings, setting{"cpu.max", fmt.Sprintf("%d 100000", cpuQuota(r.CPULimitMillis))})
		}
		shares := cpuShares(r.CPURequestMillis)
		weight := 1 + ((shares-2)*9999)/262142
		settings = append(settings, setting{"cpu.weight", strconv.FormatUint(weight, 10)})
	} else {
		if r.MemoryLimitBytes > 0 {
			limit := strconv.FormatInt(r.MemoryLimitBytes, 10)
			settings = append(settings, setting{"memory.limit_in_bytes", limit})
			settings = append(settings, setting{"memory.memsw.limit_in_bytes", limit})
		}
		if r.CPULimitMillis > 0 {
			settings = append(settings, setting{"cpu.cfs_period_us", "100000"})
			settings = append(settings, setting{"cpu.cfs_quota_us", strconv.FormatInt(cpuQuota(r.CPULimitMillis), 10)})
		}
		settings = append(settings, setting{"cpu.shares", strconv.FormatUint(cpuShares(r.CPURequestMillis), 10)})
	}
	for _, dir := range dirs {
		for _, s := range settings {
			path := filepath.Join(dir, s.file)
			if !exists(path) {
				continue
			}
			if err := os.WriteFile(path, []byte(s.value), 0); err != nil {
				// Swap accounting may be off; the memory limit still holds.
				if strings.Contains(s.file, "swap") || strings.Contains(s.file, "memsw") {
					continue
				}
				return fmt.Errorf("set %s to %s: %w", s.file, s.value, err)
			}
		}
	}
	return nil
}

// cpuQuota converts millicores to a CFS quota for a 100ms period.
func cpuQuota(millis int64) int64 {
	q := millis * 100
	if q < 1000 {
		q = 1000
	}
	return q
}

// cpuShares converts a CPU request in millicores to cgroup v1 shares; no
// request (0) gets the minimum.
func cpuShares(millis int64) uint64 {
	s := uint64(millis) * 1024 / 1000
	if s < 2 {
		s = 2
	}
	if s > 262144 {
		s = 262144
	}
	return s
}

// oomKills reads the number of OOM kills in a cgroup (v1 memory.oom_control
// or v2 memory.events), from the first directory that has it.
func oomKills(dirs []string) uint64 {
	for _, dir := range dirs {
		for _, file := range []string{"memory.events", "memory.oom_control"} {
			data, err := os.ReadFile(filepath.Join(dir, file))
			if err != nil {
				continue
			}
			if v, ok := statValue(data, "oom_kill"); ok {
				return v
			}
		}
	}
	return 0
}

// statValue finds "key value" in a flat keyed file.
func statValue(data []byte, key string) (uint64, bool) {
	s := bufio.NewScanner(bytes.NewReader(data))
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) == 2 && fields[0] == key {
			v, err := strconv.ParseUint(fields[1], 10, 64)
			return v, err == nil
		}
	}
	return 0, false
}

// cgroupPIDs lists the processes in a cgroup (in the reader's PID namespace).
func cgroupPIDs(dirs []string) []int {
	for _, dir := range dirs {
		data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if err != nil {
			continue
		}
		var pids []int
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		return pids
	}
	return nil
}

// killCgroups SIGKILLs every process in the cgroups until they are empty or
// the deadline passes.
func killCgroups(dirs []string, deadline time.Time) {
	killUntilEmpty(deadline, func() int { return killCgroupProcesses(dirs) })
}

// killCgroupProcesses SIGKILLs every process in the cgroups once and says
// how many there were.
func killCgroupProcesses(dirs []string) int {
	pids := cgroupPIDs(dirs)
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	return len(pids)
}

// killUntilEmpty repeats a round of kills (which says how many processes it
// found) until a round finds none or the deadline passes.
func killUntilEmpty(deadline time.Time, round func() int) {
	for round() > 0 && !time.Now().After(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
}

// removeCgroupTree removes a cgroup directory and its child cgroups,
// retrying while the kernel still reports them busy.
func removeCgroupTree(dir string, deadline time.Time) error {
	entries, err := os.ReadDir(dir)
	if isNotExist(err) {
		return nil
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := removeCgroupTree(filepath.Join(dir, e.Name()), deadline); err != nil {
				return err
			}
		}
	}
	for {
		err := syscall.Rmdir(dir)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("remove cgroup %s: %w", dir, err)
		}
		killCgroups([]string{dir}, deadline)
		time.Sleep(20 * time.Millisecond)
	}
}
