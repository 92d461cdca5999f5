package sandbox

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// defaultCapsForTest is containerd's default set of a container.
const defaultCapsForTest = 1<<unix.CAP_CHOWN | 1<<unix.CAP_DAC_OVERRIDE | 1<<unix.CAP_FSETID | 1<<unix.CAP_FOWNER |
	1<<unix.CAP_MKNOD | 1<<unix.CAP_NET_RAW | 1<<unix.CAP_SETGID | 1<<unix.CAP_SETUID | 1<<unix.CAP_SETFCAP |
	1<<unix.CAP_SETPCAP | 1<<unix.CAP_NET_BIND_SERVICE | 1<<unix.CAP_SYS_CHROOT | 1<<unix.CAP_KILL | 1<<unix.CAP_AUDIT_WRITE

// statusScript prints the identity, the capability sets, no_new_privs and
// seccomp of the shell, and whether it may unshare a mount namespace
// (denied by the default filter without CAP_SYS_ADMIN).
const statusScript = `id -u; id -G; grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status | tr -d '\t'; unshare -m true 2>/dev/null; echo unshare=$?`

// TestSecurity: the main process and an exec session run as the spec's
// user and groups with its capabilities, no_new_privs and seccomp filter;
// an init stage that fails (the user may not run the command) is a start
// error saying why.
func TestSecurity(t *testing.T) {
	e := newEnv(t, Options{})
	s := e.sandbox()
	sec := &Security{UID: 1000, GID: 2000, Groups: []uint32{3000, 4000}, Capabilities: defaultCapsForTest, NoNewPrivs: true, Seccomp: SeccompRuntimeDefault}
	e.start(s, ContainerSpec{Name: "user", Args: []string{"sh", "-c", statusScript + "; sleep 3600"}, Security: sec})
	want := fmt.Sprintf("1000\n2000 3000 4000\nCapPrm:0000000000000000\nCapEff:0000000000000000\nCapBnd:%016x\nNoNewPrivs:1\nSeccomp:2\nunshare=1\n", defaultCapsForTest)
	eventually(t, 10*time.Second, "the user container's report", func() bool {
		return strings.Contains(readLog(t, s, "user", 0, LogOptions{TailLines: -1}), "unshare=")
	})
	if got := (readLog(t, s, "user", 0, LogOptions{TailLines: -1})); got != want {
		t.Errorf("main process:\n%s\nwant:\n%s", got, want)
	}
	var out, errOut bytes.Buffer
	if code, err := s.Exec(e.ctx, "user", []string{"sh", "-c", statusScript}, StreamIO{Stdout: &out, Stderr: &errOut}); err != nil || code != 0 {
		t.Fatalf("exec = %d, %v (%s)", code, err, errOut.String())
	}
	if out.String() != want {
		t.Errorf("exec session:\n%s\nwant:\n%s", out.String(), want)
	}

	// Root keeps the set in every set but the inheritable one.
	root := &Security{Capabilities: defaultCapsForTest}
	e.start(s, ContainerSpec{Name: "root", Args: []string{"sh", "-c", statusScript}, Security: root})
	waitExited(t, s, "root")
	wantRoot := fmt.Sprintf("0\n0\nCapPrm:%016x\nCapEff:%016x\nCapBnd:%016x\nNoNewPrivs:0\nSeccomp:0\nunshare=1\n", defaultCapsForTest, defaultCapsForTest, defaultCapsForTest)
	if got := (readLog(t, s, "root", 0, LogOptions{TailLines: -1})); got != wantRoot {
		t.Errorf("root:\n%s\nwant:\n%s", got, wantRoot)
	}

	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	script := filepath.Join(dir, "root-only")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho ran\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	// Without CAP_DAC_OVERRIDE, which would let the exec itself pass.
	noCaps := &Security{UID: 1000, GID: 1000}
	err := s.StartContainer(e.ctx, ContainerSpec{Name: "denied", Args: []string{script}, Security: noCaps})
	if err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("start of a command the user may not run: %v", err)
	}
	if st, _ := s.Container("denied"); st.Reason != ReasonStartError || !strings.Contains(st.Message, "permission denied") {
		t.Errorf("status = %+v", st)
	}
}

// seccompProbeArg makes the test binary a container command that prints
// what three syscalls the default filter denies answer: an unknown keyctl
// operation, an unusual personality and clone3 (ENOSYS without
// CAP_SYS_ADMIN).
const seccompProbeArg = "seccomp-probe"

func seccompProbe() {
	errname := func(errno unix.Errno) string {
		if errno == 0 {
			return "OK"
		}
		return unix.ErrnoName(errno)
	}
	_, _, keyctl := unix.RawSyscall(unix.SYS_KEYCTL, 0x7fffffff, 0, 0)
	_, _, personality := unix.RawSyscall(unix.SYS_PERSONALITY, 0x0400000, 0, 0)
	_, _, clone3 := unix.RawSyscall(unix.SYS_CLONE3, 0, 0, 0)
	fmt.Printf("keyctl=%s personality=%s clone3=%s\n", errname(keyctl), errname(personality), errname(clone3))
}

// TestDefaultSeccompFilter: the default filter answers EPERM to what
// containerd's profile denies and ENOSYS to clone3 without
// CAP_SYS_ADMIN; without it the same calls get the kernel's answers.
func TestDefaultSeccompFilter(t *testing.T) {
	if nativeAuditArch == 0 {
		t.Skip("the default filter is written for amd64")
	}
	e := newEnv(t, Options{})
	s := e.sandbox()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		sec  Security
		want string
	}{
		{"filtered", Security{Capabilities: defaultCapsForTest, Seccomp: SeccompRuntimeDefault}, "keyctl=EPERM personality=EPERM clone3=ENOSYS\n"},
		{"unconfined", Security{Capabilities: defaultCapsForTest}, "keyctl=ENOTSUP personality=OK clone3=EINVAL\n"},
	} {
		e.start(s, ContainerSpec{Name: tc.name, Args: []string{exe, seccompProbeArg}, Security: &tc.sec})
		if st := waitExited(t, s, tc.name); st.ExitCode != 0 {
			t.Fatalf("%s: %+v", tc.name, st)
		}
		if got := readLog(t, s, tc.name, 0, LogOptions{TailLines: -1}); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestDefaultSeccompFilterFollowsCapabilities(t *testing.T) {
	has := func(prog []unix.SockFilter, nr uint32) bool {
		for _, ins := range prog {
			if ins.Code == bpfJumpEq && ins.K == nr {
				return true
			}
		}
		return false
	}
	plain := defaultSeccompFilter(defaultCapsForTest)
	admin := defaultSeccompFilter(defaultCapsForTest | 1<<unix.CAP_SYS_ADMIN)
	if nativeAuditArch == 0 {
		t.Skip("the default filter is written for amd64")
	}
	for _, nr := range []uint32{unix.SYS_MOUNT, unix.SYS_UNSHARE, unix.SYS_SETNS, unix.SYS_CLONE3} {
		if !has(plain, nr) || has(admin, nr) {
			t.Errorf("syscall %d: tested without CAP_SYS_ADMIN %v, with %v", nr, has(plain, nr), has(admin, nr))
		}
	}
	for _, nr := range []uint32{unix.SYS_KEYCTL, unix.SYS_PIVOT_ROOT, unix.SYS_PERSONALITY} {
		if !has(admin, nr) {
			t.Errorf("syscall %d not tested with CAP_SYS_ADMIN", nr)
		}
	}
	if last := plain[len(plain)-1]; last.Code != bpfReturn || last.K != seccompAllow {
		t.Errorf("the filter ends with %+v, want allow", last)
	}
}
