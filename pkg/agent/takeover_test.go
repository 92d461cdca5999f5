package agent

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/nodelet/nodelet/pkg/node"
	"github.com/nodelet/nodelet/pkg/pod"
	"github.com/nodelet/nodelet/pkg/provider"
)

func mustSelector(t *testing.T, s string) labels.Selector {
	t.Helper()
	sel, err := labels.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return sel
}

// The selector picks Nodes as kwok's flags do: all, or those matching the
// label and the annotation selector both; a selector never matches a Node
// without labels (annotations) at all.
func TestNodeSelectorMatchesAsKwok(t *testing.T) {
	kwok := mustSelector(t, "kwok.x-k8s.io/node=fake")
	notGPU := mustSelector(t, "!gpu")
	node := func(labels, annotations map[string]string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: labels, Annotations: annotations}}
	}
	fake := map[string]string{KwokNodeAnnotation: "fake"}
	for _, tt := range []struct {
		name string
		sel  NodeSelector
		node *corev1.Node
		want bool
	}{
		{"all takes any node", NodeSelector{All: true}, node(nil, nil), true},
		{"kwok's annotation", NodeSelector{Annotations: kwok}, node(nil, fake), true},
		{"another annotation value", NodeSelector{Annotations: kwok}, node(nil, map[string]string{KwokNodeAnnotation: "real"}), false},
		{"kwok's label is not its annotation", NodeSelector{Annotations: kwok}, node(fake, nil), false},
		{"label selector", NodeSelector{Labels: kwok}, node(fake, nil), true},
		{"both must match", NodeSelector{Labels: kwok, Annotations: kwok}, node(fake, nil), false},
		{"both match", NodeSelector{Labels: kwok, Annotations: kwok}, node(fake, fake), true},
		{"a negation never matches a node without labels", NodeSelector{Labels: notGPU}, node(nil, nil), false},
		{"a negation matches a node with other labels", NodeSelector{Labels: notGPU}, node(map[string]string{"a": "b"}, nil), true},
		{"an empty selector takes nothing", NodeSelector{}, node(fake, fake), false},
		{"one node by name", NodeSelector{Name: "n"}, node(nil, nil), true},
		{"another node's name", NodeSelector{Name: "m"}, node(fake, fake), false},
	} {
		if got := tt.sel.Matches(tt.node); got != tt.want {
			t.Errorf("%s: Matches = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestNewRefusesBadTakeover(t *testing.T) {
	kwok := mustSelector(t, "kwok.x-k8s.io/node=fake")
	for _, tt := range []struct {
		name  string
		nodes Nodes
		opts  []Option
		want  string
	}{
		{"all and a selector", Nodes{}, []Option{WithNodeSelector(NodeSelector{All: true, Labels: kwok})}, "not both"},
		{"an empty selector", Nodes{}, []Option{WithNodeSelector(NodeSelector{})}, "selects nothing"},
		{"a name and all", Nodes{}, []Option{WithNodeSelector(NodeSelector{Name: "n", All: true})}, "one of the three"},
		{"sharding without a selector", One("n"), []Option{WithSharding(ShardOptions{Group: "g"})}, "give WithNodeSelector"},
		{"a bad fixed shard", Nodes{}, []Option{WithNodeSelector(NodeSelector{All: true}), WithSharding(ShardOptions{Index: 2, Count: 2})}, "shard 2/2"},
		{"a kubelet API's TLS bootstrap without an own node", Nodes{}, []Option{WithNodeSelector(NodeSelector{All: true}), WithServer(ServerOptions{TLSBootstrap: true})}, "kubelet API server: TLS bootstrap"},
		{"eviction", One("n"), []Option{WithNodeSelector(NodeSelector{All: true}), WithEviction(EvictionOptions{})}, "eviction: not yet"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := New(tt.nodes, simNodes, tt.opts...); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New = %v, want an error saying %q", err, tt.want)
			}
		})
	}
}

func TestBuildWithNodeSelector(t *testing.T) {
	a, err := New(Nodes{}, simNodes, WithRootDir(t.TempDir()), WithNodeSelector(NodeSelector{All: true}),
		WithSharding(ShardOptions{Group: "sim"}), WithHealthz("127.0.0.1:0"), WithServer(ServerOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	b, err := a.build(nowhere)
	if err != nil {
		t.Fatal(err)
	}
	defer b.broadcaster.Shutdown()
	got := slices.Sorted(maps.Keys(b.loops))
	if want := []string{"healthz", "kubelet API server", "node controller", "node takeover", "pod controller", "shard membership"}; !slices.Equal(got, want) {
		t.Errorf("loops %q, want %q", got, want)
	}
	if len(b.factories) != 4 {
		t.Errorf("%d informer factories, want 4 (with the shard Leases')", len(b.factories))
	}
}

// The takeover follows the Nodes: one that matches is taken over and
// registered, one that stops matching or is deleted is let go, one of
// another replica or of the agent's own is never taken.
func TestTakeoverFollowsTheSelector(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset()
	a, err := New(One("own-0"), simNodes, WithNodeSelector(NodeSelector{Annotations: mustSelector(t, "kwok.x-k8s.io/node=fake")}))
	if err != nil {
		t.Fatal(err)
	}
	p := &parts{
		built:    &built{client: client, loops: map[string]func(context.Context) error{}},
		recorder: record.NewFakeRecorder(1000),
		inf:      newAgentInformers(client, nil, true),
		registry: prometheus.NewRegistry(), probes: prometheus.NewRegistry(),
	}
	if p.nodes, err = node.NewController(client, nil, node.Options{PingInterval: time.Hour}); err != nil {
		t.Fatal(err)
	}
	pods, err := pod.NewController(client, p.inf.pods.Core().V1().Pods(), nil, p.recorder, pod.Options{})
	if err != nil {
		t.Fatal(err)
	}
	served := &nodeProviders{nodes: map[string]provider.PodLifecycleHandler{}}
	backend := &multiNodeBackend{nodes: served}
	tk, err := a.newTakeover(p, []nodeFollower{pods, served}, func(name string) bool { return !strings.HasPrefix(name, "elsewhere") })
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range p.inf.all() {
		f.Start(ctx.Done())
	}
	for _, run := range []func(context.Context) error{p.nodes.Run, pods.Run, tk.Run} {
		go func() { _ = run(ctx) }()
	}

	nodes := client.CoreV1().Nodes()
	create := func(name string, annotations map[string]string) {
		t.Helper()
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Annotations: annotations}}
		if _, err := nodes.Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	fake := map[string]string{KwokNodeAnnotation: "fake"}
	create("kwok-0", fake)
	create("plain", nil)
	create("elsewhere-0", fake)
	create("own-0", fake)
	create("kwok-1", fake)
	poll(t, "kwok-0 and kwok-1 taken over and registered", func() bool {
		return tk.count() == 2 && p.nodes.AllReported() && closed(tk.ready)
	})
	// The kubelet API serves them: a pod on kwok-1 is found on its node.
	if got := slices.Sorted(maps.Keys(served.snapshot())); !slices.Equal(got, []string{"kwok-0", "kwok-1"}) {
		t.Errorf("kubelet API serves %q, want the two taken over", got)
	}
	prov, _ := served.get("kwok-1")
	web := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "uid-web"}, Spec: corev1.PodSpec{NodeName: "kwok-1",
		Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
	if err := prov.CreatePod(ctx, web); err != nil {
		t.Fatal(err)
	}
	if n, ok := backend.NodeForPod("ns", "web"); !ok || n != "kwok-1" {
		t.Errorf("NodeForPod(web) = %q, %v; want kwok-1", n, ok)
	}
	got, err := nodes.Get(ctx, "kwok-1", metav1.GetOptions{})
	if err != nil || got.Annotations[node.LastAppliedAnnotation] == "" || got.Status.NodeInfo.KubeletVersion == "" {
		t.Fatalf("kwok-1 = %+v, %v; want its status reported", got, err)
	}
	for _, name := range []string{"plain", "elsewhere-0", "own-0"} {
		if n, _ := nodes.Get(ctx, name, metav1.GetOptions{}); n.Annotations[node.LastAppliedAnnotation] != "" {
			t.Errorf("%s was taken over", name)
		}
	}

	got = got.DeepCopy()
	delete(got.Annotations, KwokNodeAnnotation)
	if _, err := nodes.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := nodes.Delete(ctx, "kwok-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "both let go", func() bool { return tk.count() == 0 && p.nodes.Len() == 0 })
	if got := served.snapshot(); len(got) != 0 {
		t.Errorf("kubelet API still serves %q after they were let go", slices.Collect(maps.Keys(got)))
	}
	if n, ok := backend.NodeForPod("ns", "web"); ok {
		t.Errorf("NodeForPod(web) = %q after its node was let go, want not found", n)
	}
	if _, err := backend.GetContainerLogs(ctx, "ns", "web", "app", provider.ContainerLogOpts{}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("logs of a pod of a node let go: %v, want not found", err)
	}
}

func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 20*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}
