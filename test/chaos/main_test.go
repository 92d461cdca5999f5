// Package chaos is nodelet's reliability suite: the faults users meet
// together and under load — the API server or etcd killed and restarted, a
// partition, a slow API, the agent or the container runtime killed at a
// random moment, a full disk — each asserting what a user cares about
// (pods lost, containers restarted, spurious deletions, status
// regressions, lease lapses), counted from the API and the runtime by
// test/fault's observer, never from nodelet's own logs.
//
// The suite runs its own control plane (bin/controlplane up), whose etcd
// and apiserver it kills, so it never disturbs other tests. Each scenario
// holds every counter to a limit (zero, for most) and appends a row to a
// report (NODELET_RELIABILITY_REPORT, default .local/reliability.md),
// which make test prints: its counts, its figures, and pass or fail —
// whatever step failed it.
package chaos

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodelet/nodelet/pkg/providers/process/sandbox"
	"github.com/nodelet/nodelet/test/crienv"
	"github.com/nodelet/nodelet/test/fault"
)

var (
	root   string // repository root
	euid   = os.Geteuid()
	cp     *fault.ControlPlane
	client kubernetes.Interface
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
	if cp, err = fault.StartControlPlane(filepath.Join(root, "bin/controlplane")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := 1
	defer func() {
		if err := cp.Close(code != 0); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
		if code != 0 {
			fmt.Fprintf(os.Stderr, "control plane logs kept in %s\n", cp.Dir)
		}
	}()
	cfg, err := clientcmd.BuildConfigFromFlags("", cp.Kubeconfig())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cfg.QPS, cfg.Burst = 500, 1000
	cfg.Timeout = 30 * time.Second
	if client, err = kubernetes.NewForConfig(cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer stopCRI()
	code = m.Run()
	// The process agents' pods are gone: their parent cgroups go too
	// (test/e2e does the same), unless another agent on this host has
	// pods in them.
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

// holdHost takes the machine's test lock for the rest of the test: each
// scenario loads the host, which tests of other binaries that measure it
// must not see (fault.LockHost).
func holdHost(t *testing.T) {
	t.Helper()
	unlock, err := fault.LockHost()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(unlock)
	// Registered first, so run last but for the row: after the agents'
	// logs, which are long, the reason of a failure is repeated where CI
	// shows it.
	t.Cleanup(func() {
		if msg, ok := failures.Load(t.Name()); ok && t.Failed() {
			t.Logf("%s failed: %s", t.Name(), msg)
		}
	})
}

// failures holds, by test name, the last condition eventually gave up on.
var failures sync.Map

// eventually polls cond every 200ms until it holds, and fails the test if
// it still does not after timeout; cond's message says what it saw last.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, msg := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			failures.Store(t.Name(), fmt.Sprintf("%s: not true after %s; last seen: %s", what, timeout, msg))
			t.Fatalf("%s: not true after %s; last seen: %s", what, timeout, msg)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// name is a DNS label unique to this run: chaos-<what>-<5 random characters>.
func name(what string) string {
	const alphabet = "bcdfghjklmnpqrstvwxz2456789"
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return "chaos-" + what + "-" + string(b)
}

// newNamespace creates a namespace deleted when the test ends. Create it
// after the test's agents: cleanups run last-in first-out, so its pods are
// then deleted while their agents still run them.
func newNamespace(t *testing.T, what string) string {
	t.Helper()
	ns := name(what)
	ctx := context.Background()
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Logf("delete namespace %s: %v", ns, err)
			return
		}
		deadline := time.Now().Add(2 * time.Minute)
		for time.Now().Before(deadline) {
			if _, err := client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); apierrors.IsNotFound(err) {
				return
			}
			time.Sleep(500 * time.Millisecond)
		}
		t.Errorf("namespace %s not gone 2 minutes after its deletion", ns)
	})
	return ns
}

// kubectl runs the control plane's kubectl with the admin kubeconfig.
func kubectl(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(root, "bin/controlplane"), append([]string{"kubectl", "--kubeconfig", cp.Kubeconfig()}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(stdin), &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}

// node is an agent under test and the nodes it registers.
type node struct {
	*fault.Agent
	name    string // the node, or the prefix of its nodes
	nodes   int    // how many (0: one, named name)
	rootDir string
}

// names are the node names the agent registers.
func (n *node) names() []string {
	if n.nodes == 0 {
		return []string{n.name}
	}
	out := make([]string, n.nodes)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", n.name, i)
	}
	return out
}

// agentOptions say how to run an agent.
type agentOptions struct {
	provider   string // sim, process or cri
	nodes      int
	kubeconfig string // default: the admin kubeconfig
	rootDir    string // default: a temporary directory
	extra      []string
}

// startAgent runs bin/nodelet. When the test ends the agent is stopped, its
// log printed if the test failed, and its nodes and leases deleted.
func startAgent(t *testing.T, nodeName string, o agentOptions) *node {
	t.Helper()
	if o.provider != "sim" && os.Geteuid() != 0 {
		t.Skipf("the %s provider needs root", o.provider)
	}
	logDir := t.TempDir()
	if o.rootDir == "" {
		o.rootDir = t.TempDir()
	}
	if o.kubeconfig == "" {
		o.kubeconfig = cp.Kubeconfig()
	}
	args := []string{"--kubeconfig", o.kubeconfig, "--node-name", nodeName, "--provider", o.provider, "--root-dir", o.rootDir}
	if o.nodes > 0 {
		args = append(args, "--nodes", strconv.Itoa(o.nodes))
	}
	if o.provider != "sim" {
		args = append(args, "--port", strconv.Itoa(fault.FreePort(t)), "--client-ca-file", filepath.Join(cp.Dir, "pki", "ca.crt"),
			fault.MemoryEvictionOnly)
	}
	n := &node{Agent: &fault.Agent{Bin: filepath.Join(root, "bin/nodelet"), Args: append(args, o.extra...), LogDir: logDir},
		name: nodeName, nodes: o.nodes, rootDir: o.rootDir}
	t.Cleanup(func() {
		if err := n.Stop(); err != nil {
			t.Errorf("agent %s: %v", nodeName, err)
		}
		if o.provider == "cri" {
			if err := crienv.UnmountRootDir(o.rootDir); err != nil {
				t.Error(err)
			}
		}
		if t.Failed() && n.Log != "" {
			t.Logf("nodelet log for %s (%s):\n%s", nodeName, n.Log, lastLines(n.LogText(), 80))
		}
		ctx := context.Background()
		for _, name := range n.names() {
			if err := client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Logf("delete node %s: %v", name, err)
			}
			if err := client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Logf("delete lease %s: %v", name, err)
			}
		}
	})
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	return n
}

// waitReady waits until every node of the agents is Ready.
func waitReady(t *testing.T, timeout time.Duration, agents ...*node) {
	t.Helper()
	var names []string
	for _, a := range agents {
		names = append(names, a.names()...)
	}
	eventually(t, timeout, fmt.Sprintf("%d nodes Ready", len(names)), func() (bool, string) {
		for _, a := range agents {
			if exited, err := a.Exited(); exited {
				return false, fmt.Sprintf("agent %s exited: %v\n%s", a.name, err, lastLines(a.LogText(), 20))
			}
		}
		notReady := notReadyNodes(names)
		return len(notReady) == 0, fmt.Sprintf("not Ready: %v", head(notReady, 5))
	})
}

// notReadyNodes are those of names whose Ready condition is not True (or
// that cannot be read).
func notReadyNodes(names []string) []string {
	list, err := client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return []string{err.Error()}
	}
	ready := map[string]bool{}
	for _, n := range list.Items {
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				ready[n.Name] = true
			}
		}
	}
	var out []string
	for _, n := range names {
		if !ready[n] {
			out = append(out, n)
		}
	}
	return out
}

func head(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], "...")
	}
	return s
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// limit is the range a count of a scenario's row must fall in; the zero
// value allows none.
type limit struct{ min, max int }

// atMost allows 0 to n; exactly allows n only; between allows lo to hi.
func atMost(n int) limit       { return limit{0, n} }
func exactly(n int) limit      { return limit{n, n} }
func between(lo, hi int) limit { return limit{lo, hi} }

func (l limit) holds(n int) bool { return n >= l.min && n <= l.max }

func (l limit) String() string {
	switch {
	case l.min == l.max:
		return strconv.Itoa(l.min)
	case l.min == 0:
		return fmt.Sprintf("at most %d", l.max)
	default:
		return fmt.Sprintf("%d to %d", l.min, l.max)
	}
}

// cell is a count as the report shows it: with its limit unless that is
// none at all, in bold when outside it.
func (l limit) cell(n int) string {
	s := strconv.Itoa(n)
	if !l.holds(n) {
		s = "**" + s + "**"
	}
	switch {
	case l.max == 0:
		return s
	case l.min == l.max:
		return fmt.Sprintf("%s (= %d)", s, l.min)
	case l.min == 0:
		return fmt.Sprintf("%s (≤ %d)", s, l.max)
	default:
		return fmt.Sprintf("%s (%d–%d)", s, l.min, l.max)
	}
}

// limits are what a scenario allows of each count; the zero value allows
// nothing.
type limits struct {
	lost, restarted, regressions, lapses, notReady limit
}

// row is a scenario's line in the reliability report
// (NODELET_RELIABILITY_REPORT, default .local/reliability.md): its counts,
// each against its limit, its figures, and whether the scenario passed.
type row struct {
	t        *testing.T
	scenario string
	o        *fault.Observer
	limits   limits
	counts   fault.Counters
	figures  string
	done     bool
}

// begin starts a scenario: it takes the host (holdHost) and opens the
// scenario's row, written when the test ends, whatever ends it, with the
// test's result: a scenario that fails, at any step, has a failed row.
func begin(t *testing.T, scenario string) *row {
	t.Helper()
	r := &row{t: t, scenario: scenario}
	// Registered before everything else, so run after everything else:
	// a cleanup that fails the test (a namespace not gone) fails the row.
	t.Cleanup(r.write)
	holdHost(t)
	return r
}

// observe starts the row's observer of ns and of the nodes named prefix*,
// stopped when the test ends.
func (r *row) observe(ns, prefix string, onDelete func(*corev1.Pod)) *fault.Observer {
	r.t.Helper()
	o, err := fault.Observe(client, ns, prefix, onDelete)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(o.Stop)
	r.o = o
	return o
}

// finish ends the scenario: it fails the test for every count outside its
// limit, with the observer's details, and keeps the counts and figures for
// the row.
func (r *row) finish(l limits, figures string) {
	r.t.Helper()
	r.limits, r.figures, r.done = l, figures, true
	if r.o == nil {
		r.t.Error("the scenario has no observer: its counts are unknown")
		return
	}
	r.counts = r.o.Counters()
	c := r.counts
	var bad []string
	for _, k := range []struct {
		what string
		n    int
		l    limit
	}{
		{"pods lost", c.PodsLost, l.lost},
		{"containers restarted", c.ContainersRestarted, l.restarted},
		{"status regressions", c.StatusRegressions, l.regressions},
		{"lease lapses", c.LeaseLapses, l.lapses},
		{"nodes NotReady", c.NodesNotReady, l.notReady},
	} {
		if !k.l.holds(k.n) {
			bad = append(bad, fmt.Sprintf("%s %d, want %s", k.what, k.n, k.l))
		}
	}
	if len(bad) > 0 {
		r.t.Errorf("%s\n%s", strings.Join(bad, "; "), strings.Join(head(r.o.Details(), 30), "\n"))
	}
}

var reportMu sync.Mutex

// write appends the row to the report and the test's log; a skipped
// scenario has none.
func (r *row) write() {
	t := r.t
	if t.Skipped() {
		return
	}
	result, figures := "pass", r.figures
	if t.Failed() {
		result = "**fail**"
	}
	if !r.done {
		why := "see the test's log"
		if msg, ok := failures.LoadAndDelete(t.Name()); ok {
			why = msg.(string)
		}
		figures = "did not finish: " + why
		if r.o != nil {
			r.counts = r.o.Counters()
		}
	}
	failures.Delete(t.Name())
	counts := []string{"–", "–", "–", "–", "–"}
	if c, l := r.counts, r.limits; r.o != nil {
		counts = []string{l.lost.cell(c.PodsLost), l.restarted.cell(c.ContainersRestarted), l.regressions.cell(c.StatusRegressions),
			l.lapses.cell(c.LeaseLapses), l.notReady.cell(c.NodesNotReady)}
		if !r.done { // limits unknown: the counts as they are
			counts = []string{strconv.Itoa(c.PodsLost), strconv.Itoa(c.ContainersRestarted), strconv.Itoa(c.StatusRegressions),
				strconv.Itoa(c.LeaseLapses), strconv.Itoa(c.NodesNotReady)}
		}
	}
	line := fmt.Sprintf("| %s | %s | %s | %s |", r.scenario, result, strings.Join(counts, " | "),
		strings.ReplaceAll(figures, "\n", " "))
	t.Log("RELIABILITY " + line)
	path := os.Getenv("NODELET_RELIABILITY_REPORT")
	if path == "" {
		path = filepath.Join(root, ".local", "reliability.md")
	}
	reportMu.Lock()
	defer reportMu.Unlock()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Log(err)
		return
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Log(err)
		return
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() == 0 {
		fmt.Fprintln(f, "| scenario | result | pods lost | containers restarted | status regressions | lease lapses | nodes NotReady | figures | date |")
		fmt.Fprintln(f, "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- | --- |")
	}
	fmt.Fprintf(f, "%s %s |\n", line, time.Now().UTC().Format("2006-01-02"))
}

// CRI: one containerd and registry for the binary, on first use.
var (
	criOnce sync.Once
	criRT   *crienv.Env
	criReg  *crienv.Registry
	criErr  error
)

func criEnv(t *testing.T) *crienv.Env {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("containerd needs root")
	}
	criOnce.Do(func() {
		criReg, criErr = crienv.StartRegistry(filepath.Join(root, "bin", "images"), filepath.Join(root, ".local", "images"))
		if criErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		criRT, criErr = crienv.Start(ctx, crienv.Options{Mirror: "http://" + criReg.Addr})
	})
	if errors.Is(criErr, crienv.ErrUnavailable) {
		t.Skipf("cri environment unavailable: %v", criErr)
	}
	if criErr != nil {
		t.Fatalf("cri environment: %v", criErr)
	}
	return criRT
}

func stopCRI() {
	if criRT != nil {
		if err := criRT.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stop containerd: %v\n", err)
		}
	}
	if criReg != nil {
		criReg.Stop()
	}
}
