// Package e2e tests nodelet against a real control plane (bin/controlplane
// up), driven by the real kubectl of the same release. Every test works in
// its own namespace with its own node names and removes them afterwards.
package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
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
)

var (
	root       string // repository root
	kubeconfig string
	client     kubernetes.Interface
)

func TestMain(m *testing.M) {
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
	kubeconfig = os.Getenv("NODELET_E2E_KUBECONFIG")
	if kubeconfig == "" {
		stop, kc, err := startControlPlane()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer stop()
		kubeconfig = kc
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if client, err = kubernetes.NewForConfig(cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

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
			return "", fmt.Errorf("no nodelet go.mod above the working directory")
		}
		dir = parent
	}
}

// startControlPlane runs bin/controlplane up in a temporary directory until
// stop is called.
func startControlPlane() (stop func(), kubeconfig string, err error) {
	dir, err := os.MkdirTemp("", "nodelet-e2e-")
	if err != nil {
		return nil, "", err
	}
	log, err := os.Create(filepath.Join(dir, "up.log"))
	if err != nil {
		return nil, "", err
	}
	cmd := exec.Command(filepath.Join(root, "bin/controlplane"), "up", "--dir", dir)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	stop = func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		log.Close()
		os.RemoveAll(dir)
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		if _, err := os.Stat(filepath.Join(dir, "ready")); err == nil {
			return stop, filepath.Join(dir, "admin.kubeconfig"), nil
		}
		select {
		case err := <-done:
			out, _ := os.ReadFile(log.Name())
			return nil, "", fmt.Errorf("control plane exited: %v\n%s", err, out)
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return nil, "", fmt.Errorf("control plane not ready after 5 minutes")
		}
	}
}

// kubectl runs the control plane's kubectl and fails the test on error.
func kubectl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := kubectlErr(args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func kubectlErr(args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(root, "bin/controlplane"), append([]string{"kubectl", "--kubeconfig", kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// eventually polls cond every 200ms until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		ok, msg := cond()
		if ok {
			return
		}
		last = msg
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after %s; last: %s", what, timeout, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func randSuffix() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)[:5]
}

// uniqueName is a DNS-safe name for this test's objects.
func uniqueName(t *testing.T) string {
	base := strings.ToLower(strings.TrimPrefix(t.Name(), "Test"))
	base = strings.NewReplacer("/", "-", "_", "-").Replace(base)
	if len(base) > 30 {
		base = base[:30]
	}
	return "e2e-" + strings.Trim(base, "-") + "-" + randSuffix()
}

// newNamespace creates a namespace removed when the test ends.
func newNamespace(t *testing.T) string {
	t.Helper()
	ns := uniqueName(t)
	kubectl(t, "create", "namespace", ns)
	t.Cleanup(func() {
		_, _ = kubectlErr("delete", "namespace", ns, "--wait=false")
	})
	return ns
}

// agent is one running bin/nodelet.
type agent struct {
	t    *testing.T
	node string
	args []string
	cmd  *exec.Cmd
	log  string
	done chan error
}

// startNodelet runs bin/nodelet for node with extra flags. When the test
// ends it is stopped and its Node and Lease are deleted.
func startNodelet(t *testing.T, node string, extra ...string) *agent {
	t.Helper()
	a := &agent{t: t, node: node, args: append([]string{"--kubeconfig", kubeconfig, "--node-name", node, "--provider", "sim"}, extra...)}
	a.start()
	t.Cleanup(func() {
		a.stop()
		if t.Failed() {
			out, _ := os.ReadFile(a.log)
			t.Logf("nodelet log for %s:\n%s", node, lastLines(string(out), 60))
		}
		ctx := context.Background()
		_ = client.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{})
		_ = client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(ctx, node, metav1.DeleteOptions{})
	})
	return a
}

func (a *agent) start() {
	a.t.Helper()
	f, err := os.CreateTemp(a.t.TempDir(), "nodelet-*.log")
	if err != nil {
		a.t.Fatal(err)
	}
	a.log = f.Name()
	a.cmd = exec.Command(filepath.Join(root, "bin/nodelet"), a.args...)
	a.cmd.Stdout, a.cmd.Stderr = f, f
	if err := a.cmd.Start(); err != nil {
		a.t.Fatal(err)
	}
	a.done = make(chan error, 1)
	go func() { a.done <- a.cmd.Wait(); f.Close() }()
}

// stop sends SIGTERM and checks that the agent exits cleanly.
func (a *agent) stop() {
	a.t.Helper()
	if a.done == nil {
		return
	}
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-a.done:
		if err != nil {
			a.t.Errorf("nodelet %s exited with %v", a.node, err)
		}
	case <-time.After(30 * time.Second):
		_ = a.cmd.Process.Kill()
		<-a.done
		a.t.Errorf("nodelet %s did not stop within 30s of SIGTERM", a.node)
	}
	a.done = nil
}

func (a *agent) logText() string {
	out, _ := os.ReadFile(a.log)
	return string(out)
}

func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
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
		if err != nil {
			return false, err.Error()
		}
		if c == nil {
			return false, "no Ready condition"
		}
		return c.Status == corev1.ConditionTrue, fmt.Sprintf("Ready=%s %s", c.Status, c.Reason)
	})
}

func isNotFound(err error) bool { return apierrors.IsNotFound(err) }
