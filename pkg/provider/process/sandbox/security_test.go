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
