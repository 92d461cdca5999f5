//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodelet/nodelet/pkg/mountinfo"
)

// needRoot skips tests that mount.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
}

// mountTmpfs mounts a tmpfs at dir, detached again when the test ends if
// it is still there.
func mountTmpfs(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatalf("mount tmpfs at %s: %v", dir, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
}

// start runs a process that the test ends if it is still there.
func start(t *testing.T, cwd string, argv ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = cwd
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	return cmd
}

func writeScript(t *testing.T, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
}

// running tells whether the process runs and is not a zombie.
func running(pid int) bool {
	p, err := readProc(pid)
	return err == nil && p != nil
}

// waitFor polls cond until it holds or 10 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after 10s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestTeardown leaves a directory as a broken make run could: a process of
// a pid file that ignores SIGTERM, a script running from the directory with
// a child, tmpfs mounts nested below it (one held busy by a process that
// is not the directory's), a stale pid file naming an unrelated process,
// and a kube-proxy whose addonsup was killed, with the record of how to
// remove its rules. Teardown ends the directory's processes and only them,
// runs kube-proxy --cleanup once that kube-proxy has ended, unmounts
// everything and removes the directory; the mounts' files are never
// deleted through the mount (their contents survive in the busy one).
func TestTeardown(t *testing.T) {
	needRoot(t)
	base := t.TempDir()
	dir := filepath.Join(base, ".local")
	vol := filepath.Join(dir, "nodelet", "pods", "uid-1", "volumes", "token")
	mountTmpfs(t, vol)
	mountTmpfs(t, filepath.Join(vol, "inner"))
	busy := filepath.Join(dir, "busy")
	mountTmpfs(t, busy)
	for _, f := range []string{filepath.Join(vol, "token"), filepath.Join(vol, "inner", "file"), filepath.Join(busy, "kept")} {
		if err := os.WriteFile(f, []byte("data"), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	// The agent of the pid file ignores SIGTERM; the sandbox script runs a
	// child; the bystander holds the busy mount as its working directory
	// but names nothing of the directory; the stale pid file names another
	// unrelated process.
	writeScript(t, filepath.Join(dir, "agent.sh"), "trap '' TERM\nwhile true; do sleep 1; done")
	agent := start(t, base, "/bin/sh", ".local/agent.sh")
	writeScript(t, filepath.Join(dir, "nodelet", "sandbox.sh"), "sleep 3600 &\nwait")
	sandbox := start(t, "/", "/bin/sh", filepath.Join(dir, "nodelet", "sandbox.sh"))
	bystander := start(t, busy, "sleep", "3600")
	unrelated := start(t, "/", "sleep", "3601")
	for name, pid := range map[string]int{"agent": agent.Process.Pid, "stale": unrelated.Process.Pid} {
		if err := os.WriteFile(filepath.Join(dir, name+".pid"), []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The kube-proxy left running names the directory on its command line;
	// the kube-proxy binary (outside the directory, as bin/ is) tells on
	// --cleanup whether that one still ran.
	addons := filepath.Join(dir, "addons")
	writeScript(t, filepath.Join(addons, "kube-proxy.sh"), "while true; do sleep 1; done")
	proxy := start(t, base, "/bin/sh", ".local/addons/kube-proxy.sh")
	cleaned := filepath.Join(base, "cleaned")
	fakeProxy := filepath.Join(base, "bin", "kube-proxy")
	writeScript(t, fakeProxy, fmt.Sprintf(`[ "$1" = --cleanup ] || exit 2
if kill -0 %d 2>/dev/null; then echo running > %s; else echo ended > %s; fi`, proxy.Process.Pid, cleaned, cleaned))
	record := fmt.Sprintf(`{"kubeProxy": %q, "hadFirewall": true}`, fakeProxy)
	if err := os.WriteFile(filepath.Join(addons, "kube-proxy-cleanup.json"), []byte(record), 0o644); err != nil {
		t.Fatal(err)
	}
	var child int
	waitFor(t, "the sandbox's child", func() bool {
		procs, _ := readProcs()
		for _, p := range procs {
			if p.ppid == sandbox.Process.Pid {
				child = p.pid
				return true
			}
		}
		return false
	})

	td, err := newTeardown(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	td.grace = time.Second
	td.addonsDir = addons
	var logged strings.Builder
	td.log = func(format string, args ...any) { fmt.Fprintf(&logged, format+"\n", args...) }
	if err := td.run(context.Background(), []string{filepath.Join(dir, "stale.pid"), filepath.Join(dir, "agent.pid")}, ""); err != nil {
		t.Fatalf("teardown: %v\n%s", err, logged.String())
	}
	t.Logf("teardown said:\n%s", logged.String())

	if data, err := os.ReadFile(cleaned); err != nil || strings.TrimSpace(string(data)) != "ended" {
		t.Errorf("kube-proxy --cleanup: %q %v; want it run once kube-proxy had ended", data, err)
	}
	for name, pid := range map[string]int{"agent": agent.Process.Pid, "sandbox": sandbox.Process.Pid, "sandbox's child": child, "kube-proxy": proxy.Process.Pid} {
		if running(pid) {
			t.Errorf("the %s (%d) still runs", name, pid)
		}
	}
	for name, pid := range map[string]int{"bystander": bystander.Process.Pid, "unrelated": unrelated.Process.Pid} {
		if !running(pid) {
			t.Errorf("the %s (%d), not the directory's, was ended", name, pid)
		}
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Errorf("%s still there: %v", dir, err)
	}
	if left, _ := mountinfo.Under(base); len(left) > 0 {
		t.Errorf("still mounted: %v", left)
	}
	// The busy mount was detached, not emptied: its holder still sees it.
	if data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(bystander.Process.Pid), "cwd", "kept")); err != nil || string(data) != "data" {
		t.Errorf("the busy mount's file, through its holder: %q %v; want it kept", data, err)
	}
}

// TestRemoveTreeNeverEntersAMount: with a mount left below the directory,
// the removal fails naming it and deletes nothing in it.
func TestRemoveTreeNeverEntersAMount(t *testing.T) {
	needRoot(t)
	dir := filepath.Join(t.TempDir(), ".local")
	vol := filepath.Join(dir, "a", "vol")
	mountTmpfs(t, vol)
	if err := os.WriteFile(filepath.Join(vol, "data"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "file"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	td, err := newTeardown(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := td.removeTree(dir); err == nil || !strings.Contains(err.Error(), vol) {
		t.Errorf("removeTree with %s mounted = %v, want an error naming it", vol, err)
	}
	// Below the mount table's notice (a mount made after the check) the
	// walk itself stops at the mount point.
	if err := removeBelow(filepath.Join(dir, "a"), mustMountID(t, dir)); err == nil || !strings.Contains(err.Error(), "mount point") {
		t.Errorf("removeBelow across %s = %v, want it refused", vol, err)
	}
	if _, err := os.Stat(filepath.Join(vol, "data")); err != nil {
		t.Errorf("the mount's file: %v; want it untouched", err)
	}
}

func mustMountID(t *testing.T, path string) uint64 {
	t.Helper()
	id, err := mountID(path)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestNames: what makes a process the directory's, and what does not.
func TestNames(t *testing.T) {
	td, err := newTeardown("/repo/.local", "")
	if err != nil {
		t.Fatal(err)
	}
	cri := filepath.Join(t.TempDir(), "nlcri-1")
	dirFile := filepath.Join(t.TempDir(), "cri-dir")
	if err := os.WriteFile(dirFile, []byte(cri+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	withCRI, err := newTeardown("/repo/.local", dirFile)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		td   *teardown
		p    proc
		want bool
	}{
		{"relative flag value", td, proc{cwd: "/repo", args: []string{"bin/controlplane", "up", "--dir", ".local/controlplane"}}, true},
		{"flag=value", td, proc{cwd: "/", args: []string{"x", "--root-dir=/repo/.local/nodelet"}}, true},
		{"sandbox", td, proc{exe: "/repo/bin/nodelet-shim", args: []string{"/repo/bin/nodelet-shim", "runtime-sandbox", "/repo/.local/nodelet/pods/u"}}, true},
		{"executable inside", td, proc{exe: "/repo/.local/nodelet-image/bin/nodelet"}, true},
		{"working directory alone", td, proc{cwd: "/repo/.local/logs", args: []string{"less", "nodelet.log"}}, false},
		{"same name elsewhere", td, proc{exe: "/other/bin/nodelet-shim", args: []string{"/other/bin/nodelet-shim", "runtime-sandbox", "/other/.local/nodelet/pods/u"}}, false},
		{"prefix is not a parent", td, proc{args: []string{"x", "/repo/.local2/y"}}, false},
		{"containerd of criup", withCRI, proc{args: []string{"containerd", "--config", cri + "/config.toml"}}, true},
		{"its shims", withCRI, proc{args: []string{"containerd-shim-runc-v2", "-address", "unix://" + cri + "/c.sock"}}, true},
		{"another containerd", withCRI, proc{args: []string{"containerd", "--config", filepath.Dir(cri) + "/nlcri-2/config.toml"}}, false},
	}
	for _, tt := range tests {
		if got := tt.td.names(&tt.p); got != tt.want {
			t.Errorf("%s: names = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestOwnedSparesItsAncestors: teardown, and what runs it (go run, make,
// the shell), are never ended, even when their command lines name the
// directory.
func TestOwnedSparesItsAncestors(t *testing.T) {
	td, err := newTeardown("/repo/.local", "")
	if err != nil {
		t.Fatal(err)
	}
	self, parent := os.Getpid(), os.Getppid()
	procs := map[int]*proc{
		parent:  {pid: parent, ppid: 1, args: []string{"go", "run", "./hack/teardown", "--dir", "/repo/.local"}},
		self:    {pid: self, ppid: parent, args: []string{"teardown", "--dir", "/repo/.local"}},
		1 << 30: {pid: 1 << 30, ppid: 1, args: []string{"nodelet", "--root-dir", "/repo/.local/nodelet"}},
	}
	got := td.owned(procs)
	if len(got) != 1 || got[0].pid != 1<<30 {
		t.Errorf("owned = %+v, want only the agent", got)
	}
}
