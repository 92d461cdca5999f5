//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/pkg/providers/cri"
	"github.com/nodelet/nodelet/pkg/providers/process/sandbox"
	"github.com/nodelet/nodelet/test/clusteraddons"
)

// teardown is one run: the directories it owns and how it reports.
type teardown struct {
	dir   string   // --dir, absolute
	roots []string // the directories whose processes and mounts are ended, as given and with links resolved
	// addonsDir is the directory of make run's cluster add-ons; empty:
	// none.
	addonsDir string
	grace     time.Duration
	log       func(format string, args ...any)
}

// newTeardown owns dir and, when criDirFile names one, criup's containerd
// directory.
func newTeardown(dir, criDirFile string) (*teardown, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	t := &teardown{dir: abs, grace: 60 * time.Second, log: func(string, ...any) {}}
	t.own(abs)
	if criDirFile != "" {
		data, err := os.ReadFile(criDirFile)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return nil, fmt.Errorf("containerd directory: %w", err)
		default:
			if cri := strings.TrimSpace(string(data)); filepath.IsAbs(cri) && filepath.Clean(cri) != "/" {
				t.own(filepath.Clean(cri))
			}
		}
	}
	return t, nil
}

// own adds a directory, in its given form and with links resolved (a
// command line may name it either way).
func (t *teardown) own(dir string) {
	t.roots = append(t.roots, dir)
	if real, err := filepath.EvalSymlinks(dir); err == nil && real != dir {
		t.roots = append(t.roots, real)
	}
}

// owns tells whether path lies at or below one of the directories.
func (t *teardown) owns(path string) bool {
	for _, r := range t.roots {
		if path == r || strings.HasPrefix(path, r+"/") {
			return true
		}
	}
	return false
}

// run does it all; every step runs even when an earlier one failed, and
// the errors are joined.
func (t *teardown) run(ctx context.Context, pidFiles []string, processRoot string) error {
	var errs []error
	for _, f := range pidFiles {
		errs = append(errs, t.stopPidFile(ctx, f))
	}
	var pods []types.UID
	if processRoot != "" {
		var err error
		pods, err = podsUnder(processRoot)
		errs = append(errs, err, t.removeSandboxes(ctx, processRoot, pods))
		// Their parent too, unless another agent's pods are in it.
		if err := sandbox.RemoveCgroupParents(sandbox.DefaultCgroupName); err != nil {
			t.log("%v; left to the agent whose pods are in it", err)
		}
	}
	errs = append(errs, t.endProcesses(ctx))
	if t.addonsDir != "" {
		// kube-proxy has ended: nothing writes its rules again.
		found, err := clusteraddons.Cleanup(t.addonsDir)
		if err != nil {
			errs = append(errs, fmt.Errorf("kube-proxy's rules: %w", err))
		} else if found {
			t.log("removed the iptables rules of a kube-proxy that was not stopped")
		}
	}
	for _, uid := range pods {
		// The cri provider's, once the runtime's containers below are gone.
		if err := cri.RemovePodCgroups(uid); err != nil {
			errs = append(errs, fmt.Errorf("pod %s: %w", uid, err))
		}
	}
	if len(pods) > 0 {
		// Their QoS parents too, unless another agent's pods are in them.
		errs = append(errs, cri.RemoveQoSCgroups())
	}
	for _, r := range t.roots {
		errs = append(errs, t.unmountUnder(r))
	}
	for _, r := range t.roots {
		errs = append(errs, t.removeTree(r))
	}
	return errors.Join(errs...)
}

// stopPidFile stops the process of a pid file if it still runs and belongs
// to the directory (a stale pid file may name a process that reused the
// PID): SIGTERM, then SIGKILL after the grace period.
func (t *teardown) stopPidFile(ctx context.Context, file string) error {
	data, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		t.log("%s: no PID in it, ignored", file)
		return nil
	}
	p, err := readProc(pid)
	if err != nil {
		return nil // gone
	}
	if !t.names(p) {
		t.log("%s: process %d is not one of %s (the PID was reused), left alone", file, pid, t.dir)
		return nil
	}
	t.log("stopping %s (%d)", filepath.Base(file), pid)
	return t.terminate(ctx, []*proc{p})
}

// podsUnder lists the pods that have a directory under the agent's root.
func podsUnder(root string) ([]types.UID, error) {
	entries, err := os.ReadDir(filepath.Join(root, "pods"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pods: %w", err)
	}
	var uids []types.UID
	for _, e := range entries {
		if e.IsDir() {
			uids = append(uids, types.UID(e.Name()))
		}
	}
	return uids, nil
}

// removeSandboxes removes the pods' sandboxes of the process provider
// under root through its own manager, which kills the pod's processes
// (those of its record, and any left in its cgroups) and removes its
// cgroups. A pod directory that still holds a mounted volume, as the pods
// of the cri provider do, is left to the unmount and removal that follow.
func (t *teardown) removeSandboxes(ctx context.Context, root string, pods []types.UID) error {
	if len(pods) == 0 {
		return nil
	}
	m, err := sandbox.NewManager(sandbox.Options{RootDir: root})
	if err != nil {
		return fmt.Errorf("pod sandboxes: %w", err)
	}
	for _, uid := range pods {
		t.log("removing pod %s", uid)
		if err := m.RemoveSandbox(ctx, uid); err != nil {
			t.log("pod %s: %v; left to what follows", uid, err)
		}
	}
	return nil
}

// endProcesses ends every process that belongs to the directories, with
// its descendants, until none is left.
func (t *teardown) endProcesses(ctx context.Context) error {
	for round := 0; round < 5; round++ {
		procs, err := readProcs()
		if err != nil {
			return err
		}
		left := t.owned(procs)
		if len(left) == 0 {
			return nil
		}
		for _, p := range left {
			t.log("ending process %d: %s", p.pid, strings.Join(p.args, " "))
		}
		if err := t.terminate(ctx, left); err != nil {
			return err
		}
	}
	return errors.New("processes of the directory keep appearing after 5 rounds")
}
