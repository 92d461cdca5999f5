package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The process provider's streams end to end: kubectl attach to a
// container's stdin and output, with and without a terminal, and container
// logs rotated at the configured size and count.

// syncBuffer is a bytes.Buffer that a process writes while the test reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// session is a kubectl (or a program running kubectl) in the background,
// with its stdin to write to and its output collected.
type session struct {
	cmd            *exec.Cmd
	stdin          io.WriteCloser
	stdout, stderr syncBuffer
	cancel         context.CancelFunc
	done           chan struct{}
}

// startSession starts argv in the background; it is killed when the test
// ends if it is still running.
func startSession(t *testing.T, argv ...string) *session {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &session{cancel: cancel, done: make(chan struct{})}
	s.cmd = exec.CommandContext(ctx, argv[0], argv[1:]...)
	s.cmd.Stdout, s.cmd.Stderr = &s.stdout, &s.stderr
	s.cmd.SysProcAttr = stopWithParent()
	s.cmd.WaitDelay = 10 * time.Second
	var err error
	if s.stdin, err = s.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", argv[0], err)
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	t.Cleanup(s.stop)
	return s
}

// stop closes the session's stdin, kills it and waits for it to exit.
func (s *session) stop() {
	_ = s.stdin.Close()
	s.cancel()
	<-s.done
}

func (s *session) write(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(s.stdin, line+"\n"); err != nil {
		t.Fatalf("write %q to the session: %v", line, err)
	}
}

// waitOutput waits until the session's standard output holds want.
func (s *session) waitOutput(t *testing.T, want string) {
	t.Helper()
	eventually(t, 30*time.Second, "output "+strconv.Quote(want), func() (bool, string) {
		select {
		case <-s.done:
			return strings.Contains(s.stdout.String(), want), fmt.Sprintf("exited (%v); stdout %q, stderr %q", s.cmd.ProcessState, s.stdout.String(), s.stderr.String())
		default:
		}
		return strings.Contains(s.stdout.String(), want), fmt.Sprintf("stdout %q, stderr %q", s.stdout.String(), s.stderr.String())
	})
}

func kubectlArgv(args ...string) []string {
	return append([]string{filepath.Join(root, "bin/controlplane"), "kubectl", "--kubeconfig", kubeconfig}, args...)
}

// waitNoProcess waits until no process has pattern in its command line.
func waitNoProcess(t *testing.T, pattern string) {
	t.Helper()
	eventually(t, 30*time.Second, "no process matching "+pattern, func() (bool, string) {
		out, err := exec.Command("pgrep", "-af", pattern).Output()
		return err != nil, string(out)
	})
}

func TestProcessAttach(t *testing.T) {
	t.Parallel()
	node := uniqueName(t)
	startProcessNodelet(t, node)
	ns := newNamespace(t)
	t.Cleanup(func() { deletePods(t, ns) })
	apply(t, ns, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: pipe
spec:
  nodeName: %[1]s
  containers:
  - name: main
    image: nodelet.io/none
    stdin: true
    command: ["sh", "-c", "echo started; while read l; do echo got:$l; echo err:$l >&2; done; echo stdin-closed"]
---
apiVersion: v1
kind: Pod
metadata:
  name: term
spec:
  nodeName: %[1]s
  containers:
  - name: main
    image: nodelet.io/none
    stdin: true
    tty: true
    command: ["sh", "-c", "test -t 0 && test -t 1 && echo is-a-tty; while read l; do echo got:$l; done"]
`, node))
	waitPodPhase(t, ns, "pipe", "Running", 60*time.Second)
	waitPodPhase(t, ns, "term", "Running", 60*time.Second)

	t.Run("stdin", func(t *testing.T) {
		// Lines piped into kubectl attach -i reach the container's stdin;
		// its stdout and stderr come back on kubectl's.
		s := startSession(t, kubectlArgv("attach", "-i", "-n", ns, "pipe", "-c", "main")...)
		s.write(t, "one")
		s.waitOutput(t, "got:one\n")
		s.write(t, "two")
		s.waitOutput(t, "got:two\n")
		eventually(t, 10*time.Second, "the container's stderr on kubectl's", func() (bool, string) {
			out := s.stderr.String()
			return strings.Contains(out, "err:one\n") && strings.Contains(out, "err:two\n"), out
		})
		if strings.Contains(s.stdout.String(), "err:") {
			t.Errorf("stderr mixed into kubectl's stdout: %q", s.stdout.String())
		}
		// Detaching (the client's stdin ends, then it goes) leaves the
		// container's stdin open: without stdinOnce a new attach feeds it.
		s.stop()
		waitNoProcess(t, "attach -i -n "+ns+" ")
		again := startSession(t, kubectlArgv("attach", "-i", "-n", ns, "pipe", "-c", "main")...)
		again.write(t, "three")
		again.waitOutput(t, "got:three\n")
		if strings.Contains(again.stdout.String(), "got:two") {
			t.Errorf("the second attach got output of the first: %q", again.stdout.String())
		}
		again.stop()
		waitNoProcess(t, "attach -i -n "+ns+" ")

		// The container's output while attached is logged like any other:
		// its stdout lines in order (stderr, another pipe, may interleave
		// anywhere).
		eventually(t, 30*time.Second, "kubectl logs has the attached session", func() (bool, string) {
			out, err := kubectlErr("logs", "-n", ns, "pipe", "-c", "main")
			var stdout []string
			for _, l := range strings.Split(out, "\n") {
				if l != "" && !strings.HasPrefix(l, "err:") {
					stdout = append(stdout, l)
				}
			}
			return err == nil && strings.Join(stdout, " ") == "started got:one got:two got:three" &&
				strings.Contains(out, "err:one\n") && strings.Contains(out, "err:three\n"), fmt.Sprint(out, err)
		})
		out := kubectl(t, "get", "pod", "-n", ns, "pipe", "-o", "jsonpath={.status.phase} {.status.containerStatuses[0].restartCount}")
		if logs := kubectl(t, "logs", "-n", ns, "pipe"); out != "Running 0" || strings.Contains(logs, "stdin-closed") {
			t.Errorf("after two attach sessions: %q, log %q; want the container running with its stdin open", out, logs)
		}
	})

	t.Run("tty", func(t *testing.T) {
		// kubectl attach -t needs a terminal: script gives it one and
		// passes our pipe in as the keyboard.
		cmdline := strings.Join(kubectlArgv("attach", "-it", "-n", ns, "term", "-c", "main"), " ")
		s := startSession(t, "script", "-qec", cmdline, "/dev/null")
		s.write(t, "hello")
		s.waitOutput(t, "got:hello")
		s.write(t, "world")
		s.waitOutput(t, "got:world")
		s.stop()
		waitNoProcess(t, "attach -it -n "+ns+" ")
		eventually(t, 30*time.Second, "kubectl logs has the terminal session", func() (bool, string) {
			out, err := kubectlErr("logs", "-n", ns, "term", "-c", "main")
			return err == nil && strings.HasPrefix(out, "is-a-tty") && strings.Contains(out, "got:hello") && strings.Contains(out, "got:world"), fmt.Sprint(out, err)
		})
		if out := kubectl(t, "get", "pod", "-n", ns, "term", "-o", "jsonpath={.status.phase} {.status.containerStatuses[0].restartCount}"); out != "Running 0" {
			t.Errorf("after the terminal session: %q, want Running 0", out)
		}
	})
}

func TestProcessLogRotation(t *testing.T) {
	t.Parallel()
	node := uniqueName(t)
	const maxSize, maxFiles, lines = 4096, 3, 3000
	cfg := writeFile(t, "nodelet.yaml", fmt.Sprintf(`apiVersion: nodelet.io/v1alpha1
kind: NodeletConfiguration
containerLogMaxSize: "%d"
containerLogMaxFiles: %d
`, maxSize, maxFiles))
	a := startProcessNodelet(t, node, "--config", cfg)
	ns := newNamespace(t)
	t.Cleanup(func() { deletePods(t, ns) })
	trigger := filepath.Join(t.TempDir(), "go")
	apply(t, ns, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: chatty
spec:
  nodeName: %s
  containers:
  - name: main
    image: nodelet.io/none
    command: ["sh", "-c", "echo ready; while [ ! -e %s ]; do sleep 0.1; done; i=0; while [ $i -lt %d ]; do echo line $i; i=$((i+1)); done; echo done; sleep 3600"]
`, node, trigger, lines))
	waitPodPhase(t, ns, "chatty", "Running", 60*time.Second)

	// A follower from before the burst keeps up across the rotations: it
	// may miss lines rotated away before it read them, never the end.
	follow := startSession(t, kubectlArgv("logs", "-f", "-n", ns, "chatty", "-c", "main")...)
	follow.waitOutput(t, "ready\n")
	if err := os.WriteFile(trigger, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	follow.waitOutput(t, fmt.Sprintf("line %d\ndone\n", lines-1))
	follow.stop()
	checkLineOrder(t, "kubectl logs -f", follow.stdout.String(), false)

	// On disk: at most maxFiles files, none over maxSize.
	uid := kubectl(t, "get", "pod", "-n", ns, "chatty", "-o", "jsonpath={.metadata.uid}")
	logDir := filepath.Join(a.rootDir, "pods", uid, "logs", "main")
	entries, err := os.ReadDir(logDir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(`^0\.log(\.[0-9]+)?$`).MatchString(e.Name()) {
			t.Errorf("unexpected file in %s: %s", logDir, e.Name())
		}
		if info.Size() > maxSize {
			t.Errorf("%s is %d bytes, over containerLogMaxSize %d", e.Name(), info.Size(), maxSize)
		}
	}
	if len(names) > maxFiles || len(names) < 2 {
		t.Errorf("log files %v: want rotation to have happened and at most containerLogMaxFiles (%d) kept", names, maxFiles)
	}

	// kubectl logs prints the newest lines, in order, without a gap; the
	// oldest are gone with the rotated-out files.
	out := kubectl(t, "logs", "-n", ns, "chatty", "-c", "main")
	if !strings.HasSuffix(out, fmt.Sprintf("line %d\ndone\n", lines-1)) || strings.Contains(out, "\nline 0\n") || strings.HasPrefix(out, "ready\n") {
		t.Errorf("kubectl logs does not hold the newest lines only: starts %q, ends %q", out[:min(len(out), 40)], out[max(0, len(out)-40):])
	}
	checkLineOrder(t, "kubectl logs", out, true)
	if tail := kubectl(t, "logs", "--tail=3", "-n", ns, "chatty", "-c", "main"); tail != fmt.Sprintf("line %d\nline %d\ndone\n", lines-2, lines-1) {
		t.Errorf("kubectl logs --tail=3 = %q", tail)
	}
}

// checkLineOrder checks that the "line N" lines of out come in increasing
// order, and with contiguous that none is missing between the first and
// the last.
func checkLineOrder(t *testing.T, what, out string, contiguous bool) {
	t.Helper()
	prev := -1
	for _, l := range strings.Split(out, "\n") {
		var n int
		if _, err := fmt.Sscanf(l, "line %d", &n); err != nil {
			continue
		}
		if n <= prev || contiguous && prev >= 0 && n != prev+1 {
			t.Errorf("%s: line %d after line %d", what, n, prev)
			return
		}
		prev = n
	}
	if prev < 0 {
		t.Errorf("%s: no lines in %q", what, out)
	}
}
