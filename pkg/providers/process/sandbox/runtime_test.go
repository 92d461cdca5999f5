package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"
)

// The test binary doubles as the nodelet binary for the subcommands.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && IsSubcommand(os.Args[1]) {
		os.Exit(Main(os.Args[1:]))
	}
	if len(os.Args) > 1 && os.Args[1] == seccompProbeArg {
		seccompProbe()
		os.Exit(0)
	}
	code := m.Run()
	if code == 0 && os.Geteuid() == 0 {
		// Every test removed its sandboxes: their parent goes too, once
		// the last sandbox killed is reaped (by its manager's Wait, a
		// moment after it died).
		deadline := time.Now().Add(10 * time.Second)
		err := RemoveCgroupParents(testCgroupName)
		for err != nil && errors.Is(err, syscall.EBUSY) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
			err = RemoveCgroupParents(testCgroupName)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "left behind:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// testCgroupName is the tests' parent cgroup of their pods.
const testCgroupName = "nodelet-test"

// requireRoot skips tests that need root and namespaces.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if _, err := os.Stat("/proc/self/ns/pid"); err != nil {
		t.Skip("needs PID namespaces")
	}
}

type env struct {
	t    *testing.T
	ctx  context.Context
	root string
	m    *Manager
}

func newEnv(t *testing.T, opts Options) *env {
	t.Helper()
	requireRoot(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if opts.RootDir == "" {
		opts.RootDir = t.TempDir()
	}
	opts.Exe = exe
	if opts.CgroupName == "" {
		opts.CgroupName = testCgroupName
	}
	m, err := NewManager(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return &env{t: t, ctx: ctx, root: opts.RootDir, m: m}
}

var podSeq int

// sandbox starts a sandbox that the test removes when it ends.
func (e *env) sandbox() *Sandbox {
	e.t.Helper()
	podSeq++
	uid := types.UID(fmt.Sprintf("uid-%s-%d-%d", strings.ToLower(e.t.Name()), os.Getpid(), podSeq))
	uid = types.UID(strings.NewReplacer("/", "-", "_", "-").Replace(string(uid)))
	s, err := e.m.EnsureSandbox(e.ctx, SandboxSpec{UID: uid, Namespace: "default", Name: "pod-" + strings.ToLower(e.t.Name())})
	if err != nil {
		e.t.Fatalf("EnsureSandbox: %v", err)
	}
	e.t.Cleanup(func() {
		if err := e.m.RemoveSandbox(context.Background(), uid); err != nil {
			e.t.Errorf("RemoveSandbox: %v", err)
		}
	})
	return s
}

func (e *env) start(s *Sandbox, spec ContainerSpec) {
	e.t.Helper()
	if err := s.StartContainer(e.ctx, spec); err != nil {
		e.t.Fatalf("StartContainer %s: %v", spec.Name, err)
	}
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func waitExited(t *testing.T, s *Sandbox, name string) ContainerStatus {
	t.Helper()
	var st ContainerStatus
	eventually(t, 30*time.Second, name+" to exit", func() bool {
		st, _ = s.Container(name)
		return st.State == StateExited
	})
	return st
}

func readLog(t *testing.T, s *Sandbox, name string, attempt int, opts LogOptions) string {
	t.Helper()
	var b bytes.Buffer
	if err := ReadLogs(context.Background(), s.LogDir(), s.LogPath(name, attempt), opts, nil, &b); err != nil {
		t.Fatalf("ReadLogs: %v", err)
	}
	return b.String()
}

func TestContainerLifecycle(t *testing.T) {
	e := newEnv(t, Options{})
	s := e.sandbox()
	if !s.Alive() {
		t.Fatal("sandbox not alive")
	}
	exits := make(chan string, 10)
	e.m.OnExit(func(uid types.UID, name string) { exits <- name })

	e.start(s, ContainerSpec{Name: "main", Args: []string{"sh", "-c", "echo hello; echo oops >&2; hostname; sleep 3600"}})
	eventually(t, 10*time.Second, "hello in the log", func() bool {
		got := readLog(t, s, "main", 0, LogOptions{TailLines: -1})
		// hostname prints the pod's name.
		return strings.Contains(got, "hello\n") && strings.Contains(got, "oops\n") && strings.Contains(got, "pod-testcontainerlifecycle\n")
	})
	st, ok := s.Container("main")
	if !ok || st.State != StateRunning || st.PID == 0 {
		t.Fatalf("status = %+v, want running with a PID", st)
	}
	// The host PID is really the container's process.
	cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", st.PID))
	if !bytes.Contains(cmdline, []byte("echo hello")) {
		t.Errorf("PID %d runs %q", st.PID, cmdline)
	}
	// It runs in the container's cgroup of every hierarchy, and its shim
	// does not.
	cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", st.PID))
	if err != nil {
		t.Fatal(err)
	}
	want := "/pod" + string(s.Spec().UID) + "/main\n"
	lines := strings.Split(strings.TrimSpace(string(cg)), "\n")
	for _, line := range lines {
		v2 := len(lines) == 1 && strings.HasPrefix(line, "0::")
		if (v2 || strings.Contains(line, ":memory:") || strings.Contains(line, ":pids:")) && !strings.HasSuffix(line+"\n", want) {
			t.Errorf("container cgroup line %q does not end in %q", line, want)
		}
	}
	// The sandbox runs in the supervisors' CPU cgroup.
	sbcg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", s.rec.PID))
	if !bytes.Contains(sbcg, []byte("/"+supervisorsCgroup+"\n")) {
		t.Errorf("sandbox cgroups %q: not in the supervisors' cgroup", sbcg)
	}
	if self, _ := os.ReadFile("/proc/self/cgroup"); bytes.Contains(self, []byte("/pod"+string(s.Spec().UID))) {
		t.Errorf("the test process joined the pod's cgroup: %s", self)
	}
	if err := s.StartContainer(e.ctx, ContainerSpec{Name: "main", Attempt: 1, Args: []string{"true"}}); err == nil {
		t.Error("second attempt started while the first runs")
	}
	if err := s.StopContainer(e.ctx, "main", 0); err != nil {
		t.Fatal(err)
	}
	st = waitExited(t, s, "main")
	if st.ExitCode != 137 || st.Signal != 9 || st.Reason != ReasonError || st.FinishedAt.IsZero() {
		t.Errorf("killed status = %+v", st)
	}
	select {
	case name := <-exits:
		if name != "main" {
			t.Errorf("OnExit for %q", name)
		}
	case <-time.After(10 * time.Second):
		t.Error("OnExit not called")
	}

	// Exit codes and reasons, and the previous attempt.
	e.start(s, ContainerSpec{Name: "main", Attempt: 1, Args: []string{"sh", "-c", "exit 3"}})
	st = waitExited(t, s, "main")
	if st.Attempt != 1 || st.ExitCode != 3 || st.Reason != ReasonError {
		t.Errorf("status = %+v, want attempt 1 code 3 Error", st)
	}
	if prev, ok := s.Previous("main"); !ok || prev.Attempt != 0 || prev.ExitCode != 137 {
		t.Errorf("previous = %+v %v", prev, ok)
	}
	e.start(s, ContainerSpec{Name: "done", Args: []string{"true"}})
	if st := waitExited(t, s, "done"); st.ExitCode != 0 || st.Reason != ReasonCompleted {
		t.Errorf("status = %+v, want Completed", st)
	}
	if got := len(s.Containers()); got != 2 {
		t.Errorf("Containers() has %d entries, want 2", got)
	}
}

func TestStartError(t *testing.T) {
	e := newEnv(t, Options{})
	s := e.sandbox()
	err := s.StartContainer(e.ctx, ContainerSpec{Name: "bad", Args: []string{"no-such-command-xyz"}})
	if err == nil || !strings.Contains(err.Error(), "executable file not found") {
		t.Fatalf("err = %v, want executable not found", err)
	}
	st, ok := s.Container("bad")
	if !ok || st.State != StateExited || st.ExitCode != 128 || st.Reason != ReasonStartError || st.Message == "" {
		t.Errorf("status = %+v", st)
	}
	err = s.StartContainer(e.ctx, ContainerSpec{Name: "badmount", Args: []string{"true"}, Mounts: []Mount{{Source: "/no/such/source", Destination: "/x"}}})
	if err == nil {
		t.Fatal("start with a missing mount source succeeded")
	}
	if st, _ := s.Container("badmount"); st.Reason != ReasonStartError {
		t.Errorf("status = %+v", st)
	}
}

// TestStartInSandboxNotServingRecordsNoAttempt: a sandbox that no longer
// serves its socket though its process still looks alive (killed, PID 1
// closes its files before it waits for the pod's processes to die) makes
// a start fail with ErrNotRunning and no attempt recorded: the lifecycle
// starts the same attempt in a new sandbox. It was once a StartError,
// an attempt that cost the container a restart.
func TestStartInSandboxNotServingRecordsNoAttempt(t *testing.T) {
	e := newEnv(t, Options{})
	s := e.sandbox()
	sock := filepath.Join(s.dir, sandboxSock)
	if err := os.Rename(sock, sock+".away"); err != nil {
		t.Fatal(err)
	}
	err := s.StartContainer(e.ctx, ContainerSpec{Name: "main", Args: []string{"sleep", "3600"}})
	if !errors.Is(err, ErrNotRunning) {
		t.Fatalf("start in a sandbox not serving: err = %v, want ErrNotRunning", err)
	}
	if st, ok := s.Container("main"); ok {
		t.Fatalf("status after the refused start = %+v, want no attempt", st)
	}
	if err := os.Rename(sock+".away", sock); err != nil {
		t.Fatal(err)
	}
	e.start(s, ContainerSpec{Name: "main", Args: []string{"sleep", "3600"}})
	if st, _ := s.Container("main"); st.Attempt != 0 || st.State != StateRunning {
		t.Errorf("status = %+v, want attempt 0 running", st)
	}
}

// TestStartInSandboxKilledDuringTheRequestRecordsNoAttempt: a sandbox
// killed while it handles a start (the request sent, the connection
// broken before any reply, its shim not started) makes the start fail
// with ErrNotRunning and no attempt recorded, as a sandbox that no
// longer serves. It was once a StartError (exit code 128), which ended a
// pod that never restarts (test/chaos's sandboxes killed during starts).
func TestStartInSandboxKilledDuringTheRequestRecordsNoAttempt(t *testing.T) {
	e := newEnv(t, Options{})
	s := e.sandbox()
	sock := filepath.Join(s.dir, sandboxSock)
	if err := os.Rename(sock, sock+".away"); err != nil {
		t.Fatal(err)
	}
	// In the sandbox's place: read the request, then die. Bound through
	// the directory's descriptor, as the sandbox binds, for the path is
	// longer than a socket address holds.
	d, err := os.Open(s.dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	short := fmt.Sprintf("/proc/self/fd/%d/%s", d.Fd(), sandboxSock)
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: short, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		buf := make([]byte, 64<<10)
		_, _ = c.Read(buf)
		_ = syscall.Kill(s.rec.PID, syscall.SIGKILL)
		c.Close()
	}()
	err = s.StartContainer(e.ctx, ContainerSpec{Name: "main", Args: []string{"sleep", "3600"}})
	if !errors.Is(err, ErrNotRunning) {
		t.Fatalf("start in a sandbox killed during the request: err = %v, want ErrNotRunning", err)
	}
	if st, ok := s.Container("main"); ok {
		t.Fatalf("status after the start the kill cut short = %+v, want no attempt", st)
	}
}

// TestStartCancelledByTheAgentRecordsNoFailure: a start whose request the
// agent gives up because it is stopping records no StartError: the sandbox
// may have started the container, and a recorded failure would make the
// next agent restart it. The next agent decides, from what the sandbox
// runs: here the request never left, so it finds a start that never
// happened, which is no attempt (the next start takes its number).
func TestStartCancelledByTheAgentRecordsNoFailure(t *testing.T) {
	e := newEnv(t, Options{})
	s := e.sandbox()
	stopping, cancel := context.WithCancel(e.ctx)
	cancel()
	if err := s.StartContainer(stopping, ContainerSpec{Name: "main", Args: []string{"sleep", "3600"}}); err == nil {
		t.Fatal("a start with the agent's context cancelled succeeded")
	}
	if st, _ := s.Container("main"); st.State == StateExited {
		t.Fatalf("status after a cancelled start = %+v, want no exit recorded", st)
	}

	m2, err := NewManager(Options{RootDir: e.root, Exe: e.m.opts.Exe, CgroupName: testCgroupName})
	if err != nil {
		t.Fatal(err)
	}
	all, err := m2.Sandboxes(e.ctx)
	if err != nil || len(all) != 1 {
		t.Fatalf("Sandboxes = %v, %v", all, err)
	}
	if st, ok := all[0].Container("main"); ok {
		t.Errorf("status seen by the next agent = %+v, want no attempt: its start never happened", st)
	}
}

func TestStopGrace(t *testing.T) {
	e := newEnv(t, Options{})
	s := e.sandbox()
	// Traps SIGTERM and exits cleanly.
	e.start(s, ContainerSpec{Name: "trap", Args: []string{"sh", "-c", "trap 'echo bye; exit 0' TERM; echo ready; while true; do sleep 0.1; done"}})
	// Ignores SIGTERM: killed at the deadline.
	e.start(s, ContainerSpec{Name: "ignore", Args: []string{"sh", "-c", "trap '' TERM; echo ready; while true; do sleep 0.1; done"}})
	for _, name := range []string{"trap", "ignore"} {
		eventually(t, 10*time.Second, name+" ready", func() bool {
			return strings.Contains(readLog(t, s, name, 0, LogOptions{TailLines: -1}), "ready")
		})
	}
	if err := s.StopContainer(e.ctx, "trap", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	st, _ := s.Container("trap")
	if st.State != StateExited || st.ExitCode != 0 || st.Reason != ReasonCompleted {
		t.Errorf("trap status = %+v, want Completed", st)
	}
	if got := readLog(t, s, "trap", 0, LogOptions{TailLines: -1}); !strings.Contains(got, "bye") {
		t.Errorf("trap log = %q", got)
	}
	begin := time.Now()
	if err := s.StopContainer(e.ctx, "ignore", time.Second); err != nil {
		t.Fatal(err)
	}
	st, _ = s.Container("ignore")
	if st.State != StateExited || st.ExitCode != 137 || st.Signal != 9 {
		t.Errorf("ignore status = %+v, want killed", st)
	}
	if d := time.Since(begin); d < time.Second {
		t.Errorf("killed after %v, before the grace period", d)
	}
	// Stopping an exited container is fine.
	if err := s.StopContainer(e.ctx, "ignore", time.Second); err != nil {
		t.Error(err)
	}
}

func TestExecAndMounts(t *testing.T) {
	e := newEnv(t, Options{})
	s := e.sandbox()
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "data.txt"), []byte("from the volume\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "single")
	if err := os.WriteFile(file, []byte("single file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mnt := filepath.Join(t.TempDir(), "mnt") // mount points made inside a temp dir
	e.start(s, ContainerSpec{
		Name:       "main",
		Args:       []string{"sleep", "3600"},
		Env:        []string{"GREETING=hi"},
		WorkingDir: "/tmp",
		Mounts: []Mount{
			{Source: src, Destination: mnt + "/vol", ReadOnly: true},
			{Source: file, Destination: mnt + "/etc/single"},
		},
	})
	run := func(argv []string, stdin string) (int, string, string) {
		t.Helper()
		var out, errOut bytes.Buffer
		sio := StreamIO{Stdout: &out, Stderr: &errOut}
		if stdin != "" {
			sio.Stdin = strings.NewReader(stdin)
		}
		code, err := s.Exec(e.ctx, "main", argv, sio)
		if err != nil {
			t.Fatalf("Exec %v: %v", argv, err)
		}
		return code, out.String(), errOut.String()
	}
	if code, out, _ := run([]string{"cat", mnt + "/vol/data.txt", mnt + "/etc/single"}, ""); code != 0 || out != "from the volume\nsingle file\n" {
		t.Errorf("cat = %d %q", code, out)
	}
	if code, _, errOut := run([]string{"sh", "-c", "echo x > " + mnt + "/vol/new"}, ""); code == 0 {
		t.Errorf("write to a read-only mount succeeded (%s)", errOut)
	}
	if code, out, _ := run([]string{"sh", "-c", "echo $GREETING; pwd; cat; exit 7"}, "piped\n"); code != 7 || out != "hi\n/tmp\npiped\n" {
		t.Errorf("exec = %d %q", code, out)
	}
	// The mounts are the container's alone.
	if _, err := os.Stat(mnt + "/vol/data.txt"); err == nil {
		t.Error("volume visible on the host")
	}
	// In the pod's PID namespace: the sandbox is PID 1.
	if _, out, _ := run([]string{"cat", "/proc/1/cmdline"}, ""); !strings.Contains(out, cmdSandbox) {
		t.Errorf("PID 1 of the pod runs %q", out)
	}
	if _, err := s.Exec(e.ctx, "main", []string{"no-such-command-xyz"}, StreamIO{}); err == nil {
		t.Error("exec of a missing command succeeded")
	}

	// TTY.
	var out syncBuffer
	resize := make(chan TermSize, 1)
	resize <- TermSize{Width: 91, Height: 37}
	code, err := s.Exec(e.ctx, "main", []string{"sh", "-c", "sleep 0.2; stty size; tty"}, StreamIO{Stdout: &out, TTY: true, Resize: resize})
	close(resize)
	if err != nil || code != 0 {
		t.Fatalf("tty exec = %d %v", code, err)
	}
	if got := out.String(); !strings.Contains(got, "37 91") || !strings.Contains(got, "/dev/pts/") {
		t.Errorf("tty output = %q", got)
	}
}

func TestAttach(t *testing.T) {
	e := newEnv(t, Options{})
	s := e.sandbox()
	e.start(s, ContainerSpec{Name: "cat", Args: []string{"sh", "-c", "while read l; do echo got $l; done; echo eof"}, Stdin: true, StdinOnce: true})
	pr, pw := io.Pipe()
	var out syncBuffer
	done := make(chan error, 1)
	go func() { done <- s.Attach(e.ctx, "cat", StreamIO{Stdin: pr, Stdout: &out, Stderr: &out}) }()
	eventually(t, 10*time.Second, "attached echo", func() bool {
		pw.Write([]byte("one\n"))
		return strings.Contains(out.String(), "got one")
	})
	pw.Close() // stdin once: the container sees EOF and ends
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("attach did not return")
	}
	if st := waitExited(t, s, "cat"); st.Reason != ReasonCompleted {
		t.Errorf("status = %+v", st)
	}
	if got := readLog(t, s, "cat", 0, LogOptions{TailLines: -1}); !strings.Contains(got, "eof") {
		t.Errorf("log = %q", got)
	}
}

func TestOOMKilled(t *testing.T) {
	e := newEnv(t, Options{})
	s := e.sandbox()
	if len(s.rec.Cgroups) == 0 {
		t.Skip("no cgroups")
	}
	e.start(s, ContainerSpec{
		Name:      "hog",
		Args:      []string{"sh", "-c", `x=$(head -c 200m /dev/zero | tr "\0" a); sleep 1`},
		Resources: Resources{MemoryLimitBytes: 32 << 20, CPULimitMillis: 500, CPURequestMillis: 100},
	})
	if u, err := s.Usage(); err != nil || !u.Pod.Memory {
		t.Errorf("Usage: %v (%+v)", err, u)
	}
	st := waitExited(t, s, "hog")
	if st.Reason != ReasonOOMKilled || st.ExitCode != 137 {
		t.Errorf("status = %+v, want OOMKilled 137", st)
	}
}

func TestLogRotation(t *testing.T) {
	e := newEnv(t, Options{LogMaxSize: 4096, LogMaxFiles: 3})
	s := e.sandbox()
	e.start(s, ContainerSpec{Name: "chatty", Args: []string{"sh", "-c", `i=0; while [ $i -lt 500 ]; do echo "line $i"; i=$((i+1)); done`}})
	waitExited(t, s, "chatty")
	path := s.LogPath("chatty", 0)
	files := append(rotatedLogs(path), path)
	if len(files) != 3 {
		t.Fatalf("log files = %v, want 3", files)
	}
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil || st.Size() > 4096 {
			t.Errorf("%s: %v size %d", f, err, st.Size())
		}
	}
	got := readLog(t, s, "chatty", 0, LogOptions{TailLines: -1})
	if !strings.HasSuffix(got, "line 498\nline 499\n") || strings.Contains(got, "line 0\n") {
		t.Errorf("log does not end with the last lines or kept the first: %q...", got[:min(len(got), 40)])
	}
	lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
	for i := 1; i < len(lines); i++ {
		var a, b int
		fmt.Sscanf(lines[i-1], "line %d", &a)
		fmt.Sscanf(lines[i], "line %d", &b)
		if b != a+1 {
			t.Fatalf("lines out of order: %q then %q", lines[i-1], lines[i])
		}
	}
}

func TestAdoption(t *testing.T) {
	e := newEnv(t, Options{})
	s := e.sandbox()
	e.start(s, ContainerSpec{Name: "main", Args: []string{"sh", "-c", "echo started; sleep 3600"}})
	st1, _ := s.Container("main")
	if st1.PID == 0 {
		t.Fatal("no PID")
	}
	// The shell has run its echo before the agent is replaced, so a second
	// "started" later can only come from a second start.
	eventually(t, 10*time.Second, "the first start logged", func() bool {
		return strings.Contains(readLog(t, s, "main", 0, LogOptions{TailLines: -1}), "started")
	})

	// A second agent over the same root.
	m2, err := NewManager(Options{RootDir: e.root, Exe: e.m.opts.Exe, CgroupName: testCgroupName})
	if err != nil {
		t.Fatal(err)
	}
	exits := make(chan string, 1)
	m2.OnExit(func(_ types.UID, name string) { exits <- name })
	all, err := m2.Sandboxes(e.ctx)
	if err != nil || len(all) != 1 {
		t.Fatalf("Sandboxes = %v, %v", all, err)
	}
	s2 := all[0]
	if !s2.Alive() || s2.Spec() != s.Spec() {
		t.Fatalf("adopted sandbox alive=%v spec=%+v", s2.Alive(), s2.Spec())
	}
	st2, _ := s2.Container("main")
	if st2.State != StateRunning || st2.PID != st1.PID || !st2.StartedAt.Equal(st1.StartedAt) {
		t.Fatalf("adopted status = %+v, was %+v", st2, st1)
	}
	again, err := m2.EnsureSandbox(e.ctx, s.Spec())
	if err != nil || again != s2 {
		t.Fatalf("EnsureSandbox after adoption = %p %v, want %p", again, err, s2)
	}
	if err := s2.StartContainer(e.ctx, ContainerSpec{Name: "main", Args: []string{"sh", "-c", "echo started; sleep 3600"}}); err != nil {
		t.Fatalf("restarting the running attempt: %v", err)
	}
	var out bytes.Buffer
	if code, err := s2.Exec(e.ctx, "main", []string{"echo", "adopted"}, StreamIO{Stdout: &out}); err != nil || code != 0 || out.String() != "adopted\n" {
		t.Fatalf("exec through the adopting agent = %d %v %q", code, err, out.String())
	}
	// The process really keeps running: it was not started twice.
	if got := strings.Count(readLog(t, s, "main", 0, LogOptions{TailLines: -1}), "started"); got != 1 {
		t.Errorf("started %d times", got)
	}
	// Its exit is seen by the new agent.
	if err := syscall.Kill(st1.PID, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case name := <-exits:
		if name != "main" {
			t.Errorf("OnExit for %q", name)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("adopting agent not told of the exit")
	}
	if st, _ := s2.Container("main"); st.State != StateExited || st.ExitCode != 143 || st.Signal != 15 {
		t.Errorf("exit = %+v", st)
	}
}

func TestRemoveSandboxLeavesNothing(t *testing.T) {
	e := newEnv(t, Options{})
	s := e.sandbox()
	e.start(s, ContainerSpec{Name: "a", Args: []string{"sh", "-c", "sleep 3600 & sleep 3600"}, Mounts: []Mount{{Source: t.TempDir(), Destination: filepath.Join(t.TempDir(), "m")}}})
	st, _ := s.Container("a")
	uid := s.Spec().UID
	sandboxPID := s.rec.PID
	if err := e.m.RemoveSandbox(e.ctx, uid); err != nil {
		t.Fatal(err)
	}
	if err := e.m.RemoveSandbox(e.ctx, uid); err != nil {
		t.Fatalf("second RemoveSandbox: %v", err)
	}
	for _, pid := range []int{sandboxPID, st.PID} {
		if err := unix.Kill(pid, 0); err == nil {
			if processAlive(pid, 0) {
				t.Errorf("process %d still exists", pid)
			}
		}
	}
	if _, err := os.Stat(e.m.podDir(uid)); !os.IsNotExist(err) {
		t.Errorf("pod directory remains: %v", err)
	}
	for _, cg := range s.rec.Cgroups {
		if _, err := os.Stat(cg); !os.IsNotExist(err) {
			t.Errorf("cgroup %s remains", cg)
		}
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	if bytes.Contains(mounts, []byte(e.root)) {
		t.Error("a mount of the pod remains on the host")
	}
	if s.Alive() {
		t.Error("removed sandbox alive")
	}
}

func TestRemoveSandboxKeepsMountedVolumes(t *testing.T) {
	e := newEnv(t, Options{})
	s := e.sandbox()
	uid := s.Spec().UID
	data := t.TempDir()
	if err := os.WriteFile(filepath.Join(data, "keep"), []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A volume published into the pod's directory and never unpublished.
	target := filepath.Join(e.m.podDir(uid), "volumes", "kubernetes.io~csi", "v", "mount")
	if err := os.MkdirAll(target, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(data, target, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(target, unix.MNT_DETACH) })
	err := e.m.RemoveSandbox(e.ctx, uid)
	if err == nil || !strings.Contains(err.Error(), "still mounted") {
		t.Fatalf("RemoveSandbox with a mounted volume: error %v, want a refusal", err)
	}
	if _, err := os.Stat(filepath.Join(data, "keep")); err != nil {
		t.Fatalf("the mounted volume's data was touched: %v", err)
	}
	if err := unix.Unmount(target, 0); err != nil {
		t.Fatal(err)
	}
	if err := e.m.RemoveSandbox(e.ctx, uid); err != nil {
		t.Fatalf("RemoveSandbox once unmounted: %v", err)
	}
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func TestValidContainerName(t *testing.T) {
	for name, want := range map[string]bool{
		"main": true, "a": true, "web-1": true, "a.b_c": true, "A9": true,
		strings.Repeat("x", 253): true, strings.Repeat("x", 254): false,
		"": false, "-a": false, "a-": false, ".": false, "..": false, "a/b": false, "a b": false, "é": false,
	} {
		if got := validContainerName(name); got != want {
			t.Errorf("validContainerName(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestLookPath(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	tool := filepath.Join(dir, "bin", "tool")
	if err := os.WriteFile(tool, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, dir string
		env       []string
		want      string
	}{
		{"tool", "/", []string{"PATH=/nowhere:" + dir + "/bin"}, tool},
		{"tool", dir, []string{"PATH=bin"}, tool}, // a relative PATH entry is under the working directory
		{"./bin/tool", dir, nil, tool},            // so is a relative command
		{tool, "/", nil, tool},
	} {
		got, err := lookPath(c.name, c.dir, c.env)
		if err != nil || got != c.want {
			t.Errorf("lookPath(%q, %q, %q) = %q, %v; want %q", c.name, c.dir, c.env, got, err, c.want)
		}
	}
	for _, name := range []string{"no-such-tool-xyz", "./bin", "bin/missing"} {
		if got, err := lookPath(name, dir, nil); err == nil {
			t.Errorf("lookPath(%q) = %q, want an error", name, got)
		}
	}
}

// Sandboxes of earlier versions start a shim process per attempt with the
// runtime-shim subcommand; the binary keeps serving them.
func TestShimProcess(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	attempt := filepath.Join(dir, "attempt")
	if err := os.MkdirAll(attempt, 0o755); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "logs", "0.log")
	cfg := shimConfig{Spec: ContainerSpec{Name: "main", Args: []string{"sh", "-c", "echo hi from the shim"}}, LogPath: logPath, LogMaxSize: 1 << 20, LogMaxFiles: 2}
	if err := writeJSONAtomic(filepath.Join(attempt, configFile), cfg); err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	cmd := exec.Command(exe, cmdShim, attempt)
	cmd.ExtraFiles = []*os.File{pw}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	data, _ := io.ReadAll(pr)
	var rep shimReport
	if err := json.Unmarshal(data, &rep); err != nil || rep.PID == 0 || rep.Error != "" {
		t.Fatalf("report %q: %+v, %v", data, rep, err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("shim: %v", err)
	}
	var exit exitRecord
	if err := readJSON(filepath.Join(attempt, exitFile), &exit); err != nil || exit.ExitCode != 0 || exit.Reason != ReasonCompleted {
		t.Errorf("exit record %+v, %v", exit, err)
	}
	if log, _ := os.ReadFile(logPath); !bytes.Contains(log, []byte("hi from the shim")) {
		t.Errorf("log %q lacks the output", log)
	}
}

// A sandbox whose agent is killed before it recorded the sandbox's PID
// ends instead of serving: no record names it, so nothing could ever stop
// it (the chaos scenario of agent kills left one running for good).
func TestSandboxOfAnAgentGoneBeforeRecordingEnds(t *testing.T) {
	e := newEnv(t, Options{})
	uid := types.UID("uid-gone-before-recording")
	dir := e.m.podDir(uid)
	if err := os.MkdirAll(filepath.Join(dir, containersDir), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := writeJSONAtomic(filepath.Join(dir, sandboxFile), sandboxRecord{Spec: SandboxSpec{UID: uid, Namespace: "default", Name: "gone"}}); err != nil {
		t.Fatal(err)
	}
	pid, ready, recorded, err := e.m.startSandbox(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ready.Close()
	start, _, _, _ := procStat(pid)
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	recorded.Close() // the agent dies without a word
	eventually(t, 10*time.Second, "the sandbox ended", func() bool { return !processAlive(pid, start) })
	if err := waitReady(e.ctx, dir, ready); err == nil {
		t.Error("the sandbox said it was ready")
	}
	if _, err := os.Stat(filepath.Join(dir, sandboxSock)); err == nil {
		t.Error("the sandbox served its socket")
	}
}

// An agent killed while the sandbox started an attempt for it leaves the
// attempt without a shim to follow for a moment. The next agent, adopting
// the sandbox meanwhile, waits for the start to end (the attempt's lock,
// which the sandbox holds while it starts it) instead of recording the
// attempt as ended and starting the container again (the agent-kill
// scenario's restarted container), and follows the shim once it answers.
func TestAttemptBeingStartedIsNotTakenForEnded(t *testing.T) {
	e := newEnv(t, Options{})
	s := e.sandbox()
	dir := s.attemptDir("app", 0)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	unlock, err := lockAttempt(e.ctx, dir, time.Second) // the sandbox, starting it
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(e.ctx, 300*time.Millisecond)
	s.watch(ctx, "app", 0)
	cancel()
	if exitRecorded(dir) {
		t.Fatal("the attempt was recorded as ended while its start was under way")
	}
	// The start ends: the shim answers.
	l, err := listenPacket(filepath.Join(dir, shimSock))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	unlock()
	s.watch(e.ctx, "app", 0)
	if !s.isWatching("app", 0) || exitRecorded(dir) {
		t.Error("the attempt whose shim answers is not followed")
	}
}

// An attempt the agent recorded as ended before the sandbox got to start
// it is not started.
func TestEndedAttemptIsNotStarted(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	cfg := shimConfig{Spec: ContainerSpec{Name: "app", Args: []string{"/bin/true"}}, LogPath: filepath.Join(dir, "app.log")}
	if err := writeJSONAtomic(filepath.Join(dir, configFile), cfg); err != nil {
		t.Fatal(err)
	}
	if err := writeJSONAtomic(filepath.Join(dir, exitFile), exitRecord{ExitCode: 137, Reason: ReasonError}); err != nil {
		t.Fatal(err)
	}
	pid, ended, err := startAttempt(dir, newReaper(), false)
	if ended != nil {
		<-ended
	}
	if err == nil || pid != 0 {
		t.Fatalf("started an attempt recorded as ended: pid %d, error %v", pid, err)
	}
}

// An attempt whose start never began (its agent killed before the sandbox
// read the request) is not an attempt: the next agent removes it instead
// of recording it as ended, so that the next start takes its number and is
// not counted as a restart.
func TestAttemptNeverStartedIsNoAttempt(t *testing.T) {
	e := newEnv(t, Options{})
	s := e.sandbox()
	dir := s.attemptDir("app", 0)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := writeJSONAtomic(filepath.Join(dir, configFile), shimConfig{Spec: ContainerSpec{Name: "app", Args: []string{"/bin/true"}}}); err != nil {
		t.Fatal(err)
	}
	s.watch(e.ctx, "app", 0)
	if exists(dir) {
		t.Error("the attempt that never started is kept")
	}
	if st, ok := s.Container("app"); ok {
		t.Errorf("the container has attempt %d (%s), want none", st.Attempt, st.State)
	}
}

// A second request to start an attempt that runs (its agent killed while
// it asked, and the next one asking again) answers the running attempt's
// process instead of starting another.
func TestStartedAttemptIsNotStartedAgain(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	cfg := shimConfig{Spec: ContainerSpec{Name: "app", Args: []string{"/bin/true"}}, LogPath: filepath.Join(dir, "app.log")}
	if err := writeJSONAtomic(filepath.Join(dir, configFile), cfg); err != nil {
		t.Fatal(err)
	}
	const running = 4242
	if err := writeJSONAtomic(filepath.Join(dir, stateFile), startRecord{PID: running, StartedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	pid, ended, err := startAttempt(dir, newReaper(), false)
	if ended != nil {
		<-ended
	}
	if err != nil || pid != running {
		t.Fatalf("start of a running attempt: pid %d, error %v; want the running %d", pid, err, running)
	}
}

// A start that finds an earlier attempt still being started (its lock not
// had before the start gave up waiting) starts nothing beside it.
func TestNoStartBesideAnAttemptBeingStarted(t *testing.T) {
	e := newEnv(t, Options{})
	s := e.sandbox()
	dir := s.attemptDir("app", 0)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	unlock, err := lockAttempt(e.ctx, dir, time.Second) // the sandbox, starting it
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	ctx, cancel := context.WithTimeout(e.ctx, 300*time.Millisecond)
	defer cancel()
	if err := s.StartContainer(ctx, ContainerSpec{Name: "app", Attempt: 1, Args: []string{"sleep", "3600"}}); err == nil {
		t.Error("a start beside an attempt being started succeeded")
	}
	if exists(s.attemptDir("app", 1)) {
		t.Error("attempt 1 was made beside attempt 0, still being started")
	}
}
