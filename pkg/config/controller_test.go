package config

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/pkg/config/checkpoint"
)

var t0 = time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)

func testLocal(root string) Local {
	cfg := Default()
	cfg.NodeName = "node-1"
	cfg.RootDir = root
	return Local{Config: cfg}
}

func source(rv string) checkpoint.Source {
	return checkpoint.Source{Namespace: "ns", Name: "cfg", UID: "uid-1", ResourceVersion: rv}
}

// assign checkpoints data as src and assigns it, at the clock's time.
func assign(t *testing.T, root string, clk *testingclock.FakeClock, src checkpoint.Source, data string) *checkpoint.Store {
	t.Helper()
	store, err := checkpoint.Open(root, checkpoint.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Save(src, []byte(data)); err != nil {
		t.Fatal(err)
	}
	if err := store.SetAssigned(&src); err != nil {
		t.Fatal(err)
	}
	return store
}

func newTestController(t *testing.T, local Local, clk *testingclock.FakeClock) *Controller {
	t.Helper()
	c, err := NewController(local, ControllerOptions{Clock: clk, HealthInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestComposeLayersRemoteOverFileUnderFlags(t *testing.T) {
	local := testLocal("/var/lib/nodelet")
	file, err := Decode([]byte(header+"nodeName: node-1\npingInterval: 20s\nmaxPods: 50\nnodeLabels:\n  a: \"1\"\n"), "file")
	if err != nil {
		t.Fatal(err)
	}
	local.File = file
	local.Flags = func(c *Config) error { c.PingInterval.Duration = 30 * time.Second; return nil }
	cfg, err := local.Compose([]byte(header+"nodeStatusReportFrequency: 1m\nmaxPods: null\nnodeLabels:\n  b: \"2\"\n"), "remote")
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.NodeStatusReportFrequency.Duration; got != time.Minute {
		t.Errorf("nodeStatusReportFrequency = %s, want the remote config's 1m", got)
	}
	if got := cfg.PingInterval.Duration; got != 30*time.Second {
		t.Errorf("pingInterval = %s, want the flag's 30s over the file's", got)
	}
	if cfg.MaxPods != 110 {
		t.Errorf("maxPods = %d, want the default: null in the remote config removes the file's", cfg.MaxPods)
	}
	if cfg.NodeLabels["a"] != "1" || cfg.NodeLabels["b"] != "2" {
		t.Errorf("nodeLabels = %v, want the file's and the remote config's", cfg.NodeLabels)
	}
	if cfg.NodeName != "node-1" || cfg.RootDir != "/var/lib/nodelet" {
		t.Errorf("nodeName %q rootDir %q, want the local config's", cfg.NodeName, cfg.RootDir)
	}
}

func TestComposeErrors(t *testing.T) {
	local := testLocal("/var/lib/nodelet")
	tests := []struct {
		name      string
		data      string
		wantParse bool
		want      []string
	}{
		{"unknown field", header + "pingIntervall: 1s\n", true, []string{`unknown field "pingIntervall"`, "remote"}},
		{"not yaml", "{", true, []string{"remote"}},
		{"negative interval", header + "nodeStatusReportFrequency: -1m\n", false, []string{"nodeStatusReportFrequency: Invalid value", "remote"}},
		{"identity", header + "rootDir: /elsewhere\nprovider: process\n", false, []string{"rootDir: Forbidden", "provider: Forbidden"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := local.Compose([]byte(tt.data), "remote")
			if err == nil {
				t.Fatal("no error")
			}
			var pe errParse
			var ve errValidate
			if errors.As(err, &pe) != tt.wantParse || errors.As(err, &ve) == tt.wantParse {
				t.Errorf("error %T %v: parse error %v, want %v", err, err, !tt.wantParse, tt.wantParse)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

func TestBootstrap(t *testing.T) {
	good := header + "nodeStatusReportFrequency: 1m\n"
	lkgSrc := checkpoint.Source{Namespace: "ns", Name: "old", UID: "uid-0", ResourceVersion: "7"}
	tests := []struct {
		name        string
		setup       func(t *testing.T, root string, clk *testingclock.FakeClock)
		wantFreq    time.Duration // of the config returned
		wantStatus  corev1.ConditionStatus
		wantReason  string
		wantMessage []string
		wantStarts  int // failed starts recorded
	}{
		{
			name:       "fresh store: local",
			setup:      func(*testing.T, string, *testingclock.FakeClock) {},
			wantFreq:   5 * time.Minute,
			wantStatus: corev1.ConditionTrue, wantReason: reasonCurrentLocalOK, wantMessage: []string{msgCurrentLocal},
		},
		{
			name: "assigned remote on trial: used and counted",
			setup: func(t *testing.T, root string, clk *testingclock.FakeClock) {
				assign(t, root, clk, source("1"), good)
			},
			wantFreq:   time.Minute,
			wantStatus: corev1.ConditionTrue, wantReason: reasonCurrentRemoteOK,
			wantMessage: []string{"using current: ConfigMap ns/cfg (uid uid-1, resourceVersion 1)"},
			wantStarts:  1,
		},
		{
			name: "assigned remote past its trial: used, not counted",
			setup: func(t *testing.T, root string, clk *testingclock.FakeClock) {
				assign(t, root, clk, source("1"), good)
				clk.Step(11 * time.Minute)
			},
			wantFreq:   time.Minute,
			wantStatus: corev1.ConditionTrue, wantReason: reasonCurrentRemoteOK,
		},
		{
			name: "invalid: last-known-good local",
			setup: func(t *testing.T, root string, clk *testingclock.FakeClock) {
				assign(t, root, clk, source("2"), header+"nodeStatusReportFrequency: -1m\n")
			},
			wantFreq:   5 * time.Minute,
			wantStatus: corev1.ConditionFalse, wantReason: "failed to validate current: ConfigMap ns/cfg (uid uid-1, resourceVersion 2)",
			wantMessage: []string{msgLKGLocal, "nodeStatusReportFrequency: Invalid value"},
		},
		{
			name: "unparsable: last-known-good local",
			setup: func(t *testing.T, root string, clk *testingclock.FakeClock) {
				assign(t, root, clk, source("2"), header+"nodeStatusReportFrequence: 1m\n")
			},
			wantFreq:   5 * time.Minute,
			wantStatus: corev1.ConditionFalse, wantReason: "failed to parse current: ConfigMap ns/cfg",
			wantMessage: []string{msgLKGLocal, `unknown field "nodeStatusReportFrequence"`},
		},
		{
			name: "corrupt checkpoint: last-known-good local",
			setup: func(t *testing.T, root string, clk *testingclock.FakeClock) {
				assign(t, root, clk, source("3"), good)
				path := filepath.Join(root, "config", "checkpoints", "uid-1", "3", checkpoint.DataFile)
				if err := os.WriteFile(path, []byte(header+"nodeStatusReportFrequency: 2m\n"), 0o600); err != nil {
					t.Fatal(err)
				}
			},
			wantFreq:   5 * time.Minute,
			wantStatus: corev1.ConditionFalse, wantReason: "failed to load current: ConfigMap ns/cfg",
			wantMessage: []string{msgLKGLocal, "checksum", checkpoint.DataFile},
		},
		{
			name: "corrupt assigned record",
			setup: func(t *testing.T, root string, clk *testingclock.FakeClock) {
				assign(t, root, clk, source("3"), good)
				if err := os.WriteFile(filepath.Join(root, "config", checkpoint.AssignedFile), []byte("{}"), 0o600); err != nil {
					t.Fatal(err)
				}
			},
			wantFreq:   5 * time.Minute,
			wantStatus: corev1.ConditionFalse, wantReason: "failed to load current: unknown",
			wantMessage: []string{msgLKGLocal},
		},
		{
			name: "crash loop: last-known-good",
			setup: func(t *testing.T, root string, clk *testingclock.FakeClock) {
				store := assign(t, root, clk, source("4"), good)
				src := source("4")
				if err := writeState(store.Dir(), state{Trial: trialState{Source: &src, FailedStarts: MaxFailedStarts}}); err != nil {
					t.Fatal(err)
				}
			},
			wantFreq:   5 * time.Minute,
			wantStatus: corev1.ConditionFalse, wantReason: "current failed trial period due to crash loop: ConfigMap ns/cfg (uid uid-1, resourceVersion 4)",
			wantMessage: []string{msgLKGLocal, "3 starts in a row"},
			wantStarts:  MaxFailedStarts,
		},
		{
			name: "failed starts of another config do not count",
			setup: func(t *testing.T, root string, clk *testingclock.FakeClock) {
				store := assign(t, root, clk, source("5"), good)
				old := source("4")
				if err := writeState(store.Dir(), state{Trial: trialState{Source: &old, FailedStarts: MaxFailedStarts}}); err != nil {
					t.Fatal(err)
				}
			},
			wantFreq:   time.Minute,
			wantStatus: corev1.ConditionTrue, wantReason: reasonCurrentRemoteOK,
			wantStarts: 1,
		},
		{
			name: "remote last-known-good",
			setup: func(t *testing.T, root string, clk *testingclock.FakeClock) {
				store := assign(t, root, clk, lkgSrc, header+"nodeStatusReportFrequency: 3m\n")
				if err := store.SetLastKnownGood(&lkgSrc); err != nil {
					t.Fatal(err)
				}
				assign(t, root, clk, source("6"), header+"nodeStatusReportFrequency: -1m\n")
			},
			wantFreq:   3 * time.Minute,
			wantStatus: corev1.ConditionFalse, wantReason: "failed to validate current",
			wantMessage: []string{"using last-known-good: ConfigMap ns/old (uid uid-0, resourceVersion 7)"},
		},
		{
			name: "last-known-good fails too: local",
			setup: func(t *testing.T, root string, clk *testingclock.FakeClock) {
				store := assign(t, root, clk, lkgSrc, header+"nodeStatusReportFrequency: 3m\n")
				if err := store.SetLastKnownGood(&lkgSrc); err != nil {
					t.Fatal(err)
				}
				assign(t, root, clk, source("6"), header+"nodeStatusReportFrequency: -1m\n")
				path := filepath.Join(root, "config", "checkpoints", "uid-0", "7", checkpoint.DataFile)
				if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
					t.Fatal(err)
				}
			},
			wantFreq:   5 * time.Minute,
			wantStatus: corev1.ConditionFalse, wantReason: "failed to validate current",
			wantMessage: []string{msgLocalNotDynamic, "failed to load last-known-good"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			clk := testingclock.NewFakeClock(t0)
			tt.setup(t, root, clk)
			c := newTestController(t, testLocal(root), clk)
			cfg, err := c.Bootstrap(ktesting.NewLogger(t, ktesting.DefaultConfig))
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.NodeStatusReportFrequency.Duration; got != tt.wantFreq {
				t.Errorf("config in use has nodeStatusReportFrequency %s, want %s", got, tt.wantFreq)
			}
			conds := c.Conditions("node-1")
			if len(conds) != 1 || conds[0].Type != ConditionConfigOK {
				t.Fatalf("conditions = %v, want ConfigOK", conds)
			}
			cond := conds[0]
			if cond.Status != tt.wantStatus || !strings.HasPrefix(cond.Reason, tt.wantReason) {
				t.Errorf("ConfigOK = %s %q, want %s %q", cond.Status, cond.Reason, tt.wantStatus, tt.wantReason)
			}
			for _, w := range tt.wantMessage {
				if !strings.Contains(cond.Message, w) {
					t.Errorf("ConfigOK message %q does not say %q", cond.Message, w)
				}
			}
			st, err := readState(filepath.Join(root, "config"))
			if err != nil {
				t.Fatal(err)
			}
			if st.Trial.FailedStarts != tt.wantStarts && tt.wantStarts != 0 {
				t.Errorf("failed starts recorded = %d, want %d", st.Trial.FailedStarts, tt.wantStarts)
			}
		})
	}
}

func TestBootstrapStoreHeldByAnotherAgent(t *testing.T) {
	root := t.TempDir()
	f, err := os.OpenFile(filepath.Join(root, lockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	c := newTestController(t, testLocal(root), testingclock.NewFakeClock(t0))
	cfg, err := c.Bootstrap(klog.Background())
	if err != nil || cfg != c.local.Config {
		t.Fatalf("Bootstrap = %v, %v; want the local config", cfg, err)
	}
	cond := c.Conditions("node-1")[0]
	if cond.Status != corev1.ConditionTrue || cond.Message != msgLocalNotDynamic || !strings.Contains(cond.Reason, "held by another nodelet") {
		t.Errorf("ConfigOK = %+v, want True, local, saying the store is held", cond)
	}
	if _, err := os.Stat(filepath.Join(root, "config")); !os.IsNotExist(err) {
		t.Errorf("the store was created although another agent holds it: %v", err)
	}
}

// cluster is a fake API with the agent's Node and informers on it.
type cluster struct {
	client   *fake.Clientset
	factory  informers.SharedInformerFactory
	recorder *record.FakeRecorder
}

func newCluster(annotation string, objects ...*corev1.ConfigMap) *cluster {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", UID: "node-uid"}}
	if annotation != "" {
		node.Annotations = map[string]string{SourceAnnotation: annotation}
	}
	client := fake.NewClientset(node)
	for _, cm := range objects {
		_, _ = client.CoreV1().ConfigMaps(cm.Namespace).Create(context.Background(), cm, metav1.CreateOptions{})
	}
	return &cluster{client: client, factory: informers.NewSharedInformerFactory(client, 0), recorder: record.NewFakeRecorder(10)}
}

func configMap(rv, data string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cfg", UID: "uid-1", ResourceVersion: rv},
		Data:       map[string]string{ConfigMapKey: data},
	}
}

// run starts c on the cluster and returns Run's result channel.
func (cl *cluster) run(t *testing.T, c *Controller, healthy func() bool) (context.CancelFunc, <-chan error) {
	t.Helper()
	if err := c.Watch(cl.factory.Core().V1().Nodes(), "node-1"); err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	cl.factory.Start(ctx.Done())
	cl.factory.WaitForCacheSync(ctx.Done())
	done := make(chan error, 1)
	go func() {
		done <- c.Run(ctx, cl.client, cl.recorder, healthy)
		close(done) // later receives return at once
	}()
	t.Cleanup(func() { cancel(); <-done; cl.factory.Shutdown() })
	return cancel, done
}

func wait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after 10s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestRunAssignsNewSourceAndRestarts(t *testing.T) {
	root := t.TempDir()
	clk := testingclock.NewFakeClock(t0)
	data := header + "nodeStatusReportFrequency: 1m\n"
	cl := newCluster("ns/cfg", configMap("5", data))
	c := newTestController(t, testLocal(root), clk)
	if _, err := c.Bootstrap(klog.Background()); err != nil {
		t.Fatal(err)
	}
	_, done := cl.run(t, c, nil)
	select {
	case err := <-done:
		if !errors.Is(err, ErrRestart) {
			t.Fatalf("Run = %v, want ErrRestart", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not ask for a restart")
	}
	store, err := checkpoint.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := store.Assigned()
	if err != nil || rec.Source == nil || *rec.Source != source("5") {
		t.Fatalf("assigned = %+v, %v; want the ConfigMap", rec, err)
	}
	if got, err := store.Load(source("5")); err != nil || string(got) != data {
		t.Errorf("checkpoint = %q, %v; want the ConfigMap's config", got, err)
	}

	// The next start runs it, and a Run with the same source does nothing.
	c.Close()
	c2 := newTestController(t, testLocal(root), clk)
	cfg, err := c2.Bootstrap(klog.Background())
	if err != nil || cfg.NodeStatusReportFrequency.Duration != time.Minute {
		t.Fatalf("Bootstrap after the restart = %v, %v; want the remote config", cfg, err)
	}
	cl2 := newCluster("ns/cfg", configMap("5", data))
	cancel, done := cl2.run(t, c2, nil)
	select {
	case err := <-done:
		t.Fatalf("Run with the assigned source unchanged returned %v", err)
	case ev := <-cl2.recorder.Events:
		if !strings.HasPrefix(ev, "Normal ConfigChanged using current: ConfigMap ns/cfg") {
			t.Errorf("event = %q, want Normal ConfigChanged naming the ConfigMap", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event for the change of config in use")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run after cancel = %v", err)
	}
}

func TestRunReportsSyncFailures(t *testing.T) {
	tests := []struct {
		name       string
		annotation string
		configMaps []*corev1.ConfigMap
		want       string
	}{
		{"missing ConfigMap", "ns/cfg", nil, "failed to sync, desc: failed to download: ConfigMap ns/cfg not found"},
		{"missing key", "ns/cfg", []*corev1.ConfigMap{{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cfg"}, Data: map[string]string{"other": ""}}},
			`failed to sync, desc: failed to download: ConfigMap ns/cfg has no key "nodelet"`},
		{"invalid annotation", "no-slash", nil, "failed to sync, desc: invalid annotation config.nodelet.io/source=\"no-slash\""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			cl := newCluster(tt.annotation, tt.configMaps...)
			c := newTestController(t, testLocal(root), testingclock.NewFakeClock(t0))
			if _, err := c.Bootstrap(klog.Background()); err != nil {
				t.Fatal(err)
			}
			changes := make(chan struct{}, 10)
			c.OnChange(func() { changes <- struct{}{} })
			cl.run(t, c, nil)
			wait(t, "ConfigOK reports the failed sync", func() bool {
				cond := c.Conditions("node-1")[0]
				return cond.Status == corev1.ConditionFalse && strings.HasPrefix(cond.Reason, tt.want) && cond.Message == msgCurrentLocal
			})
			select {
			case <-changes:
			default:
				t.Error("OnChange's function was not called")
			}
		})
	}
}

func TestRunAnnotationRemovedReturnsToLocal(t *testing.T) {
	root := t.TempDir()
	clk := testingclock.NewFakeClock(t0)
	data := header + "nodeStatusReportFrequency: 1m\n"
	store := assign(t, root, clk, source("5"), data)

	// Running the assigned remote config: back to local is a restart.
	c := newTestController(t, testLocal(root), clk)
	if _, err := c.Bootstrap(klog.Background()); err != nil {
		t.Fatal(err)
	}
	_, done := newCluster("").run(t, c, nil)
	select {
	case err := <-done:
		if !errors.Is(err, ErrRestart) {
			t.Fatalf("Run = %v, want ErrRestart", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not ask for a restart")
	}
	for name, get := range map[string]func() (checkpoint.Record, error){"assigned": store.Assigned, "last-known-good": store.LastKnownGood} {
		if rec, err := get(); err != nil || rec.Source != nil {
			t.Errorf("%s = %+v, %v; want the local config", name, rec, err)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "config", "checkpoints", "uid-1")); !os.IsNotExist(err) {
		t.Errorf("the unused checkpoint is still there: %v", err)
	}

	// Running the local config as last-known-good: no restart, ConfigOK
	// says the local config is the current one.
	c.Close()
	assign(t, root, clk, source("6"), header+"nodeStatusReportFrequency: -1m\n")
	c2 := newTestController(t, testLocal(root), clk)
	if _, err := c2.Bootstrap(klog.Background()); err != nil {
		t.Fatal(err)
	}
	if cond := c2.Conditions("")[0]; cond.Status != corev1.ConditionFalse {
		t.Fatalf("ConfigOK after an invalid config = %+v", cond)
	}
	_, done = newCluster("").run(t, c2, nil)
	wait(t, "ConfigOK back to the local config", func() bool {
		cond := c2.Conditions("")[0]
		return cond.Status == corev1.ConditionTrue && cond.Message == msgCurrentLocal && cond.Reason == reasonCurrentLocalOK
	})
	select {
	case err := <-done:
		t.Fatalf("Run returned %v, want it to keep running the local config", err)
	default:
	}
}

func TestTrialPassedHealthyBecomesLastKnownGood(t *testing.T) {
	root := t.TempDir()
	clk := testingclock.NewFakeClock(t0)
	store := assign(t, root, clk, source("5"), header+"configTrialDuration: 5m\n")
	c := newTestController(t, testLocal(root), clk)
	if _, err := c.Bootstrap(klog.Background()); err != nil {
		t.Fatal(err)
	}
	if st, _ := readState(store.Dir()); st.Trial.FailedStarts != 1 {
		t.Fatalf("failed starts at start = %d, want 1 (counted until healthy)", st.Trial.FailedStarts)
	}
	healthy := make(chan struct{})
	var polls atomic.Int32 // health polls: the controller looking at the agent's health
	cl := newCluster("ns/cfg", configMap("5", header+"configTrialDuration: 5m\n"))
	cl.run(t, c, func() bool { polls.Add(1); return closed(healthy) })

	wait(t, "the agent's health polled", func() bool { return polls.Load() > 0 })
	seen := polls.Load()
	clk.Step(6 * time.Minute) // past the trial, but not healthy yet
	// Two polls past the trial's end: the controller has seen the first
	// one's answer (not healthy) and gone back to waiting.
	wait(t, "the agent's health polled twice past the trial", func() bool {
		clk.Step(time.Millisecond) // for the health ticker
		return polls.Load() >= seen+2
	})
	if rec, _ := store.LastKnownGood(); rec.Source != nil {
		t.Fatalf("last-known-good = %v before the agent was healthy", rec.Source)
	}
	close(healthy)
	wait(t, "failed starts cleared once healthy", func() bool {
		clk.Step(time.Millisecond) // for the health ticker
		st, _ := readState(store.Dir())
		return st.Trial.FailedStarts == 0
	})
	wait(t, "the assigned config is the last-known-good", func() bool {
		clk.Step(time.Millisecond) // for the health ticker
		rec, err := store.LastKnownGood()
		return err == nil && rec.Source != nil && *rec.Source == source("5")
	})
}

func TestTrialNotPromotedEarly(t *testing.T) {
	root := t.TempDir()
	clk := &afterClock{FakeClock: testingclock.NewFakeClock(t0)}
	store := assign(t, root, clk.FakeClock, source("5"), header+"configTrialDuration: 5m\n")
	c, err := NewController(testLocal(root), ControllerOptions{Clock: clk, HealthInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Bootstrap(klog.Background()); err != nil {
		t.Fatal(err)
	}
	cl := newCluster("ns/cfg", configMap("5", header+"configTrialDuration: 5m\n"))
	cl.run(t, c, func() bool { return true })
	wait(t, "failed starts cleared once healthy", func() bool {
		st, _ := readState(store.Dir())
		return st.Trial.FailedStarts == 0
	})
	var end time.Time
	wait(t, "the trial waits for its end", func() bool {
		var ok bool
		end, ok = clk.firstAfter()
		return ok
	})
	clk.Step(4 * time.Minute)
	// The fake clock fires a wait that falls due within its step before
	// the step returns: the trial's still waits, and nothing can have
	// promoted the config.
	if !clk.Now().Before(end) {
		t.Fatalf("the trial's wait ended at %s, within the trial (4 of its 5 minutes)", end.Sub(t0))
	}
	if rec, _ := store.LastKnownGood(); rec.Source != nil {
		t.Fatalf("last-known-good = %v within the trial", rec.Source)
	}
	clk.Step(time.Minute)
	wait(t, "the assigned config is the last-known-good", func() bool {
		rec, err := store.LastKnownGood()
		return err == nil && rec.Source != nil
	})
}

func TestRollbackEvent(t *testing.T) {
	root := t.TempDir()
	clk := testingclock.NewFakeClock(t0)
	assign(t, root, clk, source("2"), header+"pingInterval: -1s\n")
	c := newTestController(t, testLocal(root), clk)
	if _, err := c.Bootstrap(klog.Background()); err != nil {
		t.Fatal(err)
	}
	cl := newCluster("ns/cfg", configMap("2", header+"pingInterval: -1s\n"))
	cl.run(t, c, nil)
	select {
	case ev := <-cl.recorder.Events:
		for _, w := range []string{"Warning ConfigRolledBack failed to validate current: ConfigMap ns/cfg", "using last-known-good: local", "pingInterval"} {
			if !strings.Contains(ev, w) {
				t.Errorf("event %q does not say %q", ev, w)
			}
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event for the rollback")
	}
}

// afterClock is a fake clock that records when each wait of After ends: a
// test sees the controller wait, and whether a step of the clock ended it.
type afterClock struct {
	*testingclock.FakeClock
	mu   sync.Mutex
	ends []time.Time
}

func (c *afterClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	c.ends = append(c.ends, c.Now().Add(d))
	c.mu.Unlock()
	return c.FakeClock.After(d)
}

// firstAfter is when the first wait of After ends, if there was one.
func (c *afterClock) firstAfter() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.ends) == 0 {
		return time.Time{}, false
	}
	return c.ends[0], true
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
