package agent

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"

	"github.com/nodelet/nodelet/pkg/config"
	"github.com/nodelet/nodelet/pkg/providers/sim"
	"github.com/nodelet/nodelet/pkg/server"
)

// simNodes makes a sim provider for each node, as nodelet's own binary
// does, with the agent's admission and conditions.
func simNodes(env *Env) (Provider, error) {
	return sim.New(sim.Options{NodeName: env.Node.Name, PodCIDR: "10.244.0.0/24", Version: env.Version,
		Pressure: env.NodeConditions, Admit: env.Admit})
}

// Nothing listens there: building must not talk to the API server.
var nowhere = &rest.Config{Host: "https://127.0.0.1:1"}

func TestBuildMakesEveryLoopWithoutRunning(t *testing.T) {
	for _, tt := range []struct {
		name string
		opts []Option
		want []string
	}{
		{"sim nodes with eviction and attach/detach",
			[]Option{WithEviction(EvictionOptions{}), WithAttachDetach(AttachDetachOptions{Attacher: AttacherSim})},
			[]string{"eviction managers", "node controller", "pod controller", "volume controller"}},
		{"kubelet API and healthz, no eviction",
			[]Option{WithServer(server.Options{}), WithHealthz("127.0.0.1:0")},
			[]string{"healthz", "kubelet API server", "node controller", "pod controller"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a, err := New(Numbered("sim", 3), simNodes, append(tt.opts, WithRootDir(t.TempDir()))...)
			if err != nil {
				t.Fatal(err)
			}
			b, err := a.build(nowhere)
			if err != nil {
				t.Fatal(err)
			}
			defer b.broadcaster.Shutdown()
			got := slices.Sorted(maps.Keys(b.loops))
			if !slices.Equal(got, tt.want) {
				t.Errorf("loops %q, want %q", got, tt.want)
			}
			if b.count != 3 || len(b.factories) != 3 {
				t.Errorf("%d nodes and %d informer factories, want 3 and 3", b.count, len(b.factories))
			}
		})
	}
}

// A provider's own loop and the loops it adds to its Env are run with the
// agent's, each named after its node.
func TestBuildRunsTheProvidersLoops(t *testing.T) {
	a, err := New(One("n"), func(env *Env) (Provider, error) {
		env.Go("registrar", func(context.Context) error { return nil })
		p, err := simNodes(env)
		return runner{p}, err
	}, WithRootDir(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	b, err := a.build(nowhere)
	if err != nil {
		t.Fatal(err)
	}
	defer b.broadcaster.Shutdown()
	for _, name := range []string{"provider of node n", "n: registrar"} {
		if b.loops[name] == nil {
			t.Errorf("no loop %q among %v", name, slices.Collect(maps.Keys(b.loops)))
		}
	}
}

// A loop of WithLoop runs with the agent's, given its client config and
// recorder.
func TestBuildRunsWithLoop(t *testing.T) {
	var gotHost string
	var gotRecorder bool
	a, err := New(One("n"), simNodes, WithRootDir(t.TempDir()), WithLoop("stages", func(_ context.Context, rc *rest.Config, rec record.EventRecorder) error {
		gotHost, gotRecorder = rc.Host, rec != nil
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	b, err := a.build(nowhere)
	if err != nil {
		t.Fatal(err)
	}
	defer b.broadcaster.Shutdown()
	run := b.loops["stages"]
	if run == nil {
		t.Fatalf("no loop %q among %v", "stages", slices.Collect(maps.Keys(b.loops)))
	}
	if err := run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if gotHost != nowhere.Host || !gotRecorder {
		t.Errorf("loop given host %q, recorder %v; want %q and the agent's recorder", gotHost, gotRecorder, nowhere.Host)
	}
	if _, err := New(One("n"), simNodes, WithLoop("x", nil)); err == nil {
		t.Error("WithLoop without a function: no error")
	}
}

// runner is a provider with a loop of its own.
type runner struct{ Provider }

func (runner) Run(ctx context.Context) error { <-ctx.Done(); return nil }

// Options that need something of every node's provider say which node's
// lacks it, and which interface.
func TestBuildNamesTheMissingInterface(t *testing.T) {
	a, err := New(One("n"), func(env *Env) (Provider, error) {
		p, err := simNodes(env)
		return runner{p}, err // hides the sim provider's StatsProvider and Evicter
	}, WithRootDir(t.TempDir()), WithEviction(EvictionOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.build(nowhere); err == nil || !strings.Contains(err.Error(), "node n") || !strings.Contains(err.Error(), "provider.StatsProvider") {
		t.Errorf("build = %v, want an error naming node n and provider.StatsProvider", err)
	}
}

func TestNewRefusesBadNodesAndOptions(t *testing.T) {
	empty, err := Numbered("sim", 1).Shard(1-shardOf("sim-0", 2), 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name  string
		nodes Nodes
		opts  []Option
		want  string
	}{
		{"an empty shard", empty, nil, "nodes: none"},
		{"a name twice", Nodes{nodes: []NodeInfo{{Name: "a"}, {Name: "a"}}}, nil, "given twice"},
		{"bootstrap of several nodes", Numbered("sim", 2), []Option{WithBootstrap("/b")}, "bootstrap"},
		{"static pods on several nodes", Numbered("sim", 2), []Option{WithStaticPods(StaticPodOptions{ManifestDir: "/m"})}, "static pods"},
		{"an unknown attacher", One("n"), []Option{WithAttachDetach(AttachDetachOptions{Attacher: "floppy"})}, "floppy"},
		{"a client config and a kubeconfig", One("n"), []Option{WithClientConfig(nowhere), WithKubeconfig("/k")}, "pick one"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := New(tt.nodes, simNodes, tt.opts...); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New = %v, want an error saying %q", err, tt.want)
			}
		})
	}
}

func TestShardsCoverEveryNodeOnce(t *testing.T) {
	const total, shards = 1000, 3
	seen := map[string]int{}
	for i := range shards {
		nodes, err := Numbered("sim", total).Shard(i, shards)
		if err != nil {
			t.Fatal(err)
		}
		if nodes.Len() < total/shards/2 {
			t.Errorf("shard %d has %d nodes: hashing is badly skewed", i, nodes.Len())
		}
		for _, n := range nodes.List() {
			seen[n.Name]++
			if want := "sim-" + strconv.Itoa(n.Index); n.Name != want {
				t.Errorf("node %s has index %d", n.Name, n.Index)
			}
		}
	}
	if len(seen) != total {
		t.Errorf("shards cover %d nodes, want %d", len(seen), total)
	}
	for name, n := range seen {
		if n != 1 {
			t.Errorf("%s managed %d times", name, n)
		}
	}
	if _, err := Numbered("sim", 3).Shard(3, 3); err == nil {
		t.Error("shard 3/3: want an error")
	}
}

func TestRunStopsWithItsContext(t *testing.T) {
	a, err := New(One("sim"), simNodes, WithClientConfig(nowhere), WithRootDir(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run after its context ended = %v, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}

// Every factory the agent builds trims managedFields from what its
// informers cache.
func TestAgentInformersCacheNoManagedFields(t *testing.T) {
	managed := []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply,
		FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{}}`)}}}
	meta := func(namespace, name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: namespace, Name: name, ManagedFields: managed}
	}
	client := fake.NewClientset(
		&corev1.Pod{ObjectMeta: meta("ns", "p"), Spec: corev1.PodSpec{NodeName: "sim-0"}},
		&corev1.Node{ObjectMeta: meta("", "sim-0")},
		&storagev1.CSIDriver{ObjectMeta: meta("", "d")},
	)
	inf := newAgentInformers(client, []string{"sim-0", "sim-1"}, false)
	pods := inf.pods.Core().V1().Pods()
	nodes := inf.nodes.Core().V1().Nodes()
	drivers := inf.cluster.Storage().V1().CSIDrivers()
	pods.Informer()
	nodes.Informer()
	drivers.Informer()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	factories := []informers.SharedInformerFactory{inf.pods, inf.nodes, inf.cluster}
	for _, f := range factories {
		f.Start(ctx.Done())
	}
	defer func() {
		cancel()
		for _, f := range factories {
			f.Shutdown()
		}
	}()
	for _, f := range factories {
		for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
			if !ok {
				t.Fatalf("%v cache did not sync", typ)
			}
		}
	}

	pod, err := pods.Lister().Pods("ns").Get("p")
	if err != nil {
		t.Fatal(err)
	}
	node, err := nodes.Lister().Get("sim-0")
	if err != nil {
		t.Fatal(err)
	}
	driver, err := drivers.Lister().Get("d")
	if err != nil {
		t.Fatal(err)
	}
	for name, obj := range map[string]metav1.Object{"pod": pod, "node": node, "CSI driver": driver} {
		if got := obj.GetManagedFields(); got != nil {
			t.Errorf("cached %s has managedFields %v, want none", name, got)
		}
	}
}

// The agent's client asks for protobuf first (and sends it), as the
// kubelet's does, and still reads a JSON answer; with contentType JSON it
// asks for JSON only.
func TestClientContentType(t *testing.T) {
	for _, tt := range []struct{ contentType, wantAccept string }{
		{config.ContentTypeProtobuf, "application/vnd.kubernetes.protobuf,application/json"},
		{config.ContentTypeJSON, "application/json"},
	} {
		var accept atomic.Value
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			accept.Store(r.Header.Get("Accept"))
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"kind":"Node","apiVersion":"v1","metadata":{"name":"n"}}`)
		}))
		rc := &rest.Config{Host: srv.URL}
		a, err := New(One("n"), simNodes, WithClientConfig(rc), WithContentType(tt.contentType))
		if err != nil {
			t.Fatal(err)
		}
		creds, err := a.loadCredentials(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		client, err := kubernetes.NewForConfig(creds.config)
		if err != nil {
			t.Fatal(err)
		}
		n, err := client.CoreV1().Nodes().Get(context.Background(), "n", metav1.GetOptions{})
		srv.Close()
		if err != nil || n.Name != "n" {
			t.Errorf("%s: get node = %v, %v; want n", tt.contentType, n, err)
		}
		if got := accept.Load(); got != tt.wantAccept {
			t.Errorf("%s: Accept %q, want %q", tt.contentType, got, tt.wantAccept)
		}
		if rc.ContentType != "" {
			t.Errorf("the agent changed the client config it was given: %q", rc.ContentType)
		}
	}
}
