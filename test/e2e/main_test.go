// Package e2e tests nodelet against a real control plane (bin/controlplane
// up), driven by the real kubectl of the same release. Every test works in
// its own namespace with its own node names and removes them afterwards, so
// the suite can run twice in a row against the same cluster.
//
// Set NODELET_E2E_KUBECONFIG to the admin kubeconfig of a running cluster to
// use it instead of starting a control plane.
package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodelet/nodelet/pkg/providers/process/sandbox"
	"github.com/nodelet/nodelet/test/fault"
)

var (
	root       string // repository root
	kubeconfig string // admin kubeconfig of the cluster under test
	client     kubernetes.Interface
)

func TestMain(m *testing.M) {
	// The process provider run in this process (the provider kit's test)
	// starts its sandboxes as subcommands of this binary.
	if len(os.Args) > 1 && sandbox.IsSubcommand(os.Args[1]) {
		os.Exit(sandbox.Main(os.Args[1:]))
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	if root, err = repoRoot(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for _, bin := range []string{"bin/controlplane", "bin/nodelet"} {
		if _, err := os.Stat(filepath.Join(root, bin)); err != nil {
			fmt.Fprintf(os.Stderr, "%s missing: run make build first\n", bin)
			return 1
		}
	}
	if kubeconfig = os.Getenv("NODELET_E2E_KUBECONFIG"); kubeconfig != "" {
		if _, err := os.Stat(kubeconfig); err != nil {
			fmt.Fprintf(os.Stderr, "NODELET_E2E_KUBECONFIG: %v\n", err)
			return 1
		}
		return runTests(m)
	}
	cp, err := startControlPlane(true)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	kubeconfig = filepath.Join(cp.dir, "admin.kubeconfig")
	code := 1
	defer func() { cp.stop(code != 0) }()
	code = runTests(m)
	return code
}

func runTests(m *testing.M) int {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cfg.QPS, cfg.Burst = 200, 400
	if client, err = kubernetes.NewForConfig(cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer stopCRI()
	code := m.Run()
	// The process nodes' pods are gone: their parent cgroup goes too,
	// unless another agent on this host has pods in it (the cri nodes'
	// go with the runtime: crienv's Stop).
	if err := sandbox.RemoveCgroupParents(sandbox.DefaultCgroupName); err != nil {
		fmt.Fprintln(os.Stderr, "kept:", err)
	}
	return code
}

// repoRoot walks up from the working directory to nodelet's go.mod.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.Contains(data, []byte("module github.com/nodelet/nodelet\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod of github.com/nodelet/nodelet above the working directory")
		}
		dir = parent
	}
}

// controlPlane is a running bin/controlplane up.
type controlPlane struct {
	dir  string
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{} // closed when the process has exited
	err  error         // its exit status, once done is closed
}

// startControlPlane runs bin/controlplane up in a temporary directory (with
// metrics-server when asked, and extra flags) and waits until it is ready.
func startControlPlane(metricsServer bool, extra ...string) (*controlPlane, error) {
	dir, err := os.MkdirTemp("", "nodelet-e2e-")
	if err != nil {
		return nil, err
	}
	log, err := os.Create(filepath.Join(dir, "up.log"))
	if err != nil {
		return nil, err
	}
	cp := &controlPlane{dir: dir, log: log, done: make(chan struct{})}
	args := []string{"up", "--dir", dir}
	if metricsServer {
		args = append(args, "--metrics-server", filepath.Join(root, "bin/metrics-server"))
	}
	cp.cmd = exec.Command(filepath.Join(root, "bin/controlplane"), append(args, extra...)...)
	cp.cmd.Stdout, cp.cmd.Stderr = log, log
	cp.cmd.SysProcAttr = stopWithParent()
	if err := cp.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start control plane: %w", err)
	}
	go func() { cp.err = cp.cmd.Wait(); close(cp.done) }()

	deadline := time.Now().Add(5 * time.Minute)
	for {
		if _, err := os.Stat(filepath.Join(dir, "ready")); err == nil {
			return cp, nil
		}
		select {
		case <-cp.done:
			out, _ := os.ReadFile(log.Name())
			return nil, fmt.Errorf("control plane exited before it was ready: %v\n%s", cp.err, out)
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cp.stop(true)
			return nil, fmt.Errorf("control plane not ready after 5 minutes; logs in %s", dir)
		}
	}
}

// stop sends SIGTERM and waits for a clean exit. The directory is removed
// unless keep is set (tests failed: its logs/ may tell why).
func (cp *controlPlane) stop(keep bool) {
	_ = cp.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-cp.done:
	case <-time.After(60 * time.Second):
		fmt.Fprintln(os.Stderr, "control plane did not stop within 60s of SIGTERM; killing it")
		_ = cp.cmd.Process.Kill()
		<-cp.done
	}
	cp.log.Close()
	if keep {
		fmt.Fprintf(os.Stderr, "control plane logs kept in %s\n", cp.dir)
		return
	}
	_ = os.RemoveAll(cp.dir)
}

// kubectl runs the control plane's kubectl and returns its standard output.
// It fails the test, with kubectl's standard error, if kubectl fails.
func kubectl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := kubectlErr(args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// kubectlErr runs the control plane's kubectl and returns its standard
// output; the error carries the standard error.
func kubectlErr(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(root, "bin/controlplane"), append([]string{"kubectl", "--kubeconfig", kubeconfig}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// eventually polls cond every 200ms until it holds, and fails the test if it
// still does not hold after timeout. cond's message says what it saw last.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, msg := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after %s; last seen: %s", what, timeout, msg)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// holdHost takes the machine's test lock for the rest of the test, for a
// test that measures the host's memory or CPU: the reliability suite,
// which go test may run beside this one, loads the host only while it does
// not hold it (fault.LockHost).
func holdHost(t *testing.T) {
	t.Helper()
	unlock, err := fault.LockHost()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(unlock)
}

// randSuffix is 5 random lowercase letters and digits.
func randSuffix() string {
	const alphabet = "bcdfghjklmnpqrstvwxz2456789"
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

// uniqueName is a DNS-label name for this test's node or namespace:
// e2e-<short test name>-<5 random characters>.
func uniqueName(t *testing.T) string {
	base := strings.ToLower(strings.TrimPrefix(t.Name(), "Test"))
	base = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, base)
	if len(base) > 30 {
		base = base[:30]
	}
	return "e2e-" + strings.Trim(base, "-") + "-" + randSuffix()
}

// newNamespace creates a namespace that is deleted when the test ends.
// Create it after the test's agents: cleanups run last-in first-out, so the
// namespace's pods are then deleted while their agents still run them.
func newNamespace(t *testing.T) string {
	t.Helper()
	ns := uniqueName(t)
	kubectl(t, "create", "namespace", ns)
	t.Cleanup(func() {
		if _, err := kubectlErr("delete", "namespace", ns, "--ignore-not-found", "--timeout=90s"); err != nil {
			t.Logf("namespace %s not deleted yet: %v", ns, err)
		}
	})
	return ns
}

// agent is one bin/nodelet process; start and stop may be repeated.
type agent struct {
	t      *testing.T
	node   string
	args   []string
	cmd    *exec.Cmd
	logDir string        // where its logs go
	log    string        // its standard output and error, one file per start
	done   chan struct{} // closed when the process has exited; nil when not started
	err    error         // the exit status, once done is closed
}

// startNodelet runs bin/nodelet for node with the sim provider, a root
// directory of its own and extra flags (later flags win). When the test
// ends the agent is stopped, its log is printed if the test failed, and its
// Node and Lease are deleted.
func startNodelet(t *testing.T, node string, extra ...string) *agent {
	t.Helper()
	// The log and root directories first: their removal, a cleanup too,
	// must run after ours has stopped the agent and printed the log. The
	// root directory of its own keeps the agent's config checkpoints out of
	// /var/lib/nodelet and away from other agents.
	logDir, rootDir := t.TempDir(), t.TempDir()
	a := &agent{t: t, node: node, logDir: logDir,
		args: append([]string{"--kubeconfig", kubeconfig, "--node-name", node, "--provider", "sim", "--root-dir", rootDir}, extra...)}
	t.Cleanup(func() {
		a.stop()
		if t.Failed() && a.log != "" {
			t.Logf("nodelet log for %s (%s):\n%s", node, a.log, lastLines(a.logText(), 80))
		}
		ctx := context.Background()
		if err := client.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Logf("delete node %s: %v", node, err)
		}
		if err := client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(ctx, node, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Logf("delete lease %s: %v", node, err)
		}
	})
	a.start()
	return a
}

// start runs the agent again with the same flags and a new log file.
func (a *agent) start() {
	a.t.Helper()
	f, err := os.CreateTemp(a.logDir, "nodelet-*.log")
	if err != nil {
		a.t.Fatal(err)
	}
	a.log = f.Name()
	a.cmd = exec.Command(filepath.Join(root, "bin/nodelet"), a.args...)
	a.cmd.Stdout, a.cmd.Stderr = f, f
	a.cmd.SysProcAttr = stopWithParent()
	if err := a.cmd.Start(); err != nil {
		f.Close()
		a.t.Fatalf("start nodelet: %v", err)
	}
	done := make(chan struct{})
	a.done, a.err = done, nil
	go func() { a.err = a.cmd.Wait(); f.Close(); close(done) }()
}

// waitRegistered waits until the (re)started agent has registered all its
// nodes, failing the test if it exits first.
func (a *agent) waitRegistered(timeout time.Duration) {
	a.t.Helper()
	eventually(a.t, timeout, "the agent registers its nodes", func() (bool, string) {
		if exited, err := a.exited(); exited {
			return false, fmt.Sprintf("the agent exited: %v", err)
		}
		return strings.Contains(a.logText(), `"Nodes registered"`), "not yet logged"
	})
}

// exited says whether the agent has exited on its own, and how.
func (a *agent) exited() (bool, error) {
	if a.done == nil {
		return false, nil
	}
	select {
	case <-a.done:
		return true, a.err
	default:
		return false, nil
	}
}

// kill stops the agent with SIGKILL, as a crash would.
func (a *agent) kill() {
	a.t.Helper()
	if a.done == nil {
		return
	}
	_ = a.cmd.Process.Kill()
	<-a.done
	a.done = nil
}

// stop sends SIGTERM and checks that the agent exits with status 0.
func (a *agent) stop() {
	a.t.Helper()
	if a.done == nil {
		return
	}
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.done:
		if a.err != nil {
			a.t.Errorf("nodelet %s exited with %v after SIGTERM, want status 0", a.node, a.err)
		}
	case <-time.After(30 * time.Second):
		_ = a.cmd.Process.Kill()
		<-a.done
		a.t.Errorf("nodelet %s did not stop within 30s of SIGTERM", a.node)
	}
	a.done = nil
}

// runUntilCleanup starts cmd, a helper the test runs beside nodelet
// (kwok, Karpenter), its output in a log file, and stops it with SIGTERM
// (SIGKILL after 30 s) when the test ends, showing the log's end if the
// test failed.
func runUntilCleanup(t *testing.T, what string, cmd *exec.Cmd) {
	t.Helper()
	log, err := os.Create(filepath.Join(t.TempDir(), "helper.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = stopWithParent()
	if err := cmd.Start(); err != nil {
		log.Close()
		t.Fatalf("start %s: %v", what, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("%s did not stop within 30s of SIGTERM", what)
		}
		log.Close()
		if t.Failed() {
			out, _ := os.ReadFile(log.Name())
			t.Logf("%s's log (%s):\n%s", what, log.Name(), lastLines(string(out), 60))
		}
	})
}

func (a *agent) logText() string {
	out, _ := os.ReadFile(a.log)
	return string(out)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// nodeCondition returns the node's condition of type ct, or nil.
func nodeCondition(node string, ct corev1.NodeConditionType) (*corev1.NodeCondition, error) {
	n, err := client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == ct {
			return &n.Status.Conditions[i], nil
		}
	}
	return nil, nil
}

// waitReady waits for the node's Ready condition to be True.
func waitReady(t *testing.T, node string, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, "node "+node+" Ready", func() (bool, string) {
		c, err := nodeCondition(node, corev1.NodeReady)
		switch {
		case err != nil:
			return false, err.Error()
		case c == nil:
			return false, "no Ready condition"
		}
		return c.Status == corev1.ConditionTrue, fmt.Sprintf("Ready=%s %s", c.Status, c.Reason)
	})
}

// writeFile writes a file for kubectl or nodelet to read.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
