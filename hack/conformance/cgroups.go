package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nodelet/nodelet/pkg/mountinfo"
)

// hostCgroups places the node suite's processes the way a kubelet host
// has them (the upstream node e2e harness gives the kubelet
// kubeletCgroups and systemCgroups): the agent, its container runtime and
// the rest of the run (control plane, registry, the suite itself) each in
// a cgroup of its own, in every hierarchy. The node reports them as its
// system containers kubelet, runtime and misc, which the summary spec
// requires; in the cgroups the runner was started in, the agent and the
// runtime would share one (or the root's, on a host that does not give
// every service its own).
//
// The runner moves itself into the system cgroup first, so that what it
// starts inherits it, and into the agent's or runtime's around starting
// those: a process moved after it started would leave behind the
// children it made before, and on cgroup v1 the memory it charged.
type hostCgroups struct {
	base        string   // below each hierarchy's root: /nodelet-conformance-<pid>
	hierarchies []string // mount points
	original    map[string]string
}

// System, runtime and agent cgroups, below base.
const (
	systemCgroup  = "system"
	runtimeCgroup = "runtime"
	agentCgroup   = "kubelet"
)

// placeInCgroups makes the cgroups and moves the runner into the system
// one; remove undoes it.
func placeInCgroups() (*hostCgroups, error) {
	hierarchies, err := mountinfo.CgroupHierarchies()
	if err != nil {
		return nil, err
	}
	h := &hostCgroups{base: fmt.Sprintf("/nodelet-conformance-%d", os.Getpid()), hierarchies: hierarchies, original: map[string]string{}}
	for _, root := range hierarchies {
		cg, err := ownCgroup(root)
		if err != nil {
			return nil, err
		}
		h.original[root] = cg
	}
	for _, root := range hierarchies {
		for _, dir := range []string{h.base, h.path(systemCgroup), h.path(runtimeCgroup), h.path(agentCgroup)} {
			if err := makeCgroup(root, dir); err != nil {
				return nil, errors.Join(fmt.Errorf("cgroup %s in %s: %w", dir, root, err), h.remove())
			}
			if dir == h.base {
				if err := delegateControllers(filepath.Join(root, dir)); err != nil {
					return nil, errors.Join(fmt.Errorf("cgroup %s in %s: %w", dir, root, err), h.remove())
				}
			}
		}
	}
	if err := h.moveSelf(func(string) string { return h.path(systemCgroup) }); err != nil {
		return nil, errors.Join(err, h.remove())
	}
	return h, nil
}

// path is a cgroup's path below each hierarchy's root.
func (h *hostCgroups) path(name string) string { return h.base + "/" + name }

// startIn runs start with the runner in the named cgroup, so that what it
// starts is there from its first instruction.
func (h *hostCgroups) startIn(name string, start func() error) error {
	if err := h.moveSelf(func(string) string { return h.path(name) }); err != nil {
		return err
	}
	err := start()
	return errors.Join(err, h.moveSelf(func(string) string { return h.path(systemCgroup) }))
}

// remove moves the runner back where it was and removes the cgroups, once
// what ran in them has exited (the cluster's stop waited for it; a few
// seconds more for the kernel to let go of exited tasks).
func (h *hostCgroups) remove() error {
	var errs []error
	if err := h.moveSelf(func(root string) string { return h.original[root] }); err != nil {
		errs = append(errs, err)
	}
	for _, root := range h.hierarchies {
		for _, dir := range []string{h.path(systemCgroup), h.path(runtimeCgroup), h.path(agentCgroup), h.base} {
			path := filepath.Join(root, dir)
			var err error
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
				err = syscall.Rmdir(path)
				if err == nil || errors.Is(err, os.ErrNotExist) || !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
					break
				}
			}
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", path, err))
			}
		}
	}
	return errors.Join(errs...)
}

// moveSelf moves the runner (all its threads) into the cgroup where gives
// for each hierarchy.
func (h *hostCgroups) moveSelf(where func(root string) string) error {
	pid := []byte(strconv.Itoa(os.Getpid()))
	var errs []error
	for _, root := range h.hierarchies {
		if err := os.WriteFile(filepath.Join(root, where(root), "cgroup.procs"), pid, 0o644); err != nil {
			errs = append(errs, fmt.Errorf("move the runner into %s of %s: %w", where(root), root, err))
		}
	}
	return errors.Join(errs...)
}

// ownCgroup finds the runner's cgroup in the hierarchy mounted at root:
// the one, of the paths /proc/self/cgroup names, that lists it.
func ownCgroup(root string) (string, error) {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	pid := []byte(strconv.Itoa(os.Getpid()))
	for line := range strings.Lines(string(data)) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		procs, err := os.ReadFile(filepath.Join(root, parts[2], "cgroup.procs"))
		if err != nil {
			continue
		}
		for _, p := range bytes.Fields(procs) {
			if bytes.Equal(p, pid) {
				return parts[2], nil
			}
		}
	}
	return "", fmt.Errorf("the runner's cgroup in %s not found", root)
}

// delegateControllers enables, in a cgroup v2 cgroup, every controller
// it has for its children: without, the three cgroups below the base
// would have no CPU or memory figures. A cgroup v1 hierarchy, or a v2 one
// without controllers (hybrid mode's), has none to enable.
func delegateControllers(path string) error {
	data, err := os.ReadFile(filepath.Join(path, "cgroup.controllers"))
	if err != nil {
		return nil
	}
	var enable []string
	for _, c := range strings.Fields(string(data)) {
		enable = append(enable, "+"+c)
	}
	if len(enable) == 0 {
		return nil
	}
	return os.WriteFile(filepath.Join(path, "cgroup.subtree_control"), []byte(strings.Join(enable, " ")), 0o644)
}

// makeCgroup creates dir in the hierarchy at root; in a cpuset hierarchy
// it takes its parent's CPUs and memory nodes, without which no process
// could join it.
func makeCgroup(root, dir string) error {
	path := filepath.Join(root, dir)
	if err := os.Mkdir(path, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
		own, err := os.ReadFile(filepath.Join(path, f))
		if err != nil || len(bytes.TrimSpace(own)) > 0 {
			continue
		}
		parent, err := os.ReadFile(filepath.Join(filepath.Dir(path), f))
		if err != nil || len(bytes.TrimSpace(parent)) == 0 {
			continue
		}
		if err := os.WriteFile(filepath.Join(path, f), parent, 0o644); err != nil {
			return err
		}
	}
	return nil
}
