package node

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"
	testingclock "k8s.io/utils/clock/testing"
)

var errTest = errors.New("provider unreachable")

type fakeNodeProvider struct{ pingErr error }

func (f *fakeNodeProvider) Ping(context.Context) error { return f.pingErr }

func (f *fakeNodeProvider) ConfigureNode(_ context.Context, n *corev1.Node) {
	n.Status.Capacity = corev1.ResourceList{corev1.ResourcePods: *resourceQuantity("110")}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}}
}

func template(name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"nodelet.io/test": "yes"}}}
}

func newFakeClient(objs ...*corev1.Node) *fake.Clientset {
	client := fake.NewClientset()
	for _, o := range objs {
		_ = client.Tracker().Add(o)
	}
	client.Discovery().(*fakediscovery.FakeDiscovery).Resources = []*metav1.APIResourceList{{
		GroupVersion: "coordination.k8s.io/v1",
		APIResources: []metav1.APIResource{{Name: "leases", Namespaced: true, Kind: "Lease"}},
	}}
	return client
}

func TestNewControllerRejectsBadInput(t *testing.T) {
	p := &fakeNodeProvider{}
	tests := []struct {
		name  string
		nodes []Node
		opts  Options
	}{
		{"no nodes", nil, Options{}},
		{"duplicate name", []Node{{template("a"), p}, {template("a"), p}}, Options{}},
		{"empty name", []Node{{template(""), p}}, Options{}},
		{"no provider", []Node{{template("a"), nil}}, Options{}},
		{"renew not shorter than lease", []Node{{template("a"), p}}, Options{LeaseDuration: 10 * time.Second, RenewInterval: 10 * time.Second}},
		{"negative ping interval", []Node{{template("a"), p}}, Options{PingInterval: -time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := NewController(fake.NewClientset(), tt.nodes, tt.opts); err == nil {
				t.Error("NewController() succeeded, want an error")
			}
		})
	}
}

func TestRetryBackoff(t *testing.T) {
	rl := retryBackoff()
	key := taskKey{node: "n", task: taskLease}
	want := []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, 1600 * time.Millisecond, 3200 * time.Millisecond, 6400 * time.Millisecond, 7 * time.Second, 7 * time.Second}
	for i, w := range want {
		if got := rl.When(key); got != w {
			t.Errorf("retry %d: backoff %s, want %s", i+1, got, w)
		}
	}
	rl.Forget(key)
	if got := rl.When(key); got != 200*time.Millisecond {
		t.Errorf("after success: backoff %s, want 200ms again", got)
	}
}

func leaseController(t *testing.T) (*Controller, *nodeState, *fake.Clientset, *testingclock.FakeClock) {
	t.Helper()
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	client := newFakeClient()
	c, err := NewController(client, []Node{{template("n"), &fakeNodeProvider{}}}, Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	n := c.nodes["n"]
	n.uid = "node-uid"
	return c, n, client, clk
}

func getLease(t *testing.T, client *fake.Clientset) (renew time.Time, err error) {
	l, err := client.CoordinationV1().Leases(LeaseNamespace).Get(context.Background(), "n", metav1.GetOptions{})
	if err != nil {
		return time.Time{}, err
	}
	if *l.Spec.HolderIdentity != "n" || *l.Spec.LeaseDurationSeconds != 40 || len(l.OwnerReferences) != 1 || l.OwnerReferences[0].UID != "node-uid" {
		t.Errorf("lease = %+v, want holder n, 40s, owned by the node", l.Spec)
	}
	return l.Spec.RenewTime.Time, nil
}

func TestLeaseRenewal(t *testing.T) {
	ctx := context.Background()
	c, n, client, clk := leaseController(t)

	next, err := c.renewLease(ctx, "n", n)
	if err != nil || next <= 0 || next > 10*time.Second {
		t.Fatalf("creation: next %s err %v, want a spread start within 10s", next, err)
	}
	if renew, err := getLease(t, client); err != nil || !renew.Equal(clk.Now()) {
		t.Fatalf("lease renewTime %v err %v, want %v", renew, err, clk.Now())
	}

	clk.Step(10 * time.Second)
	client.ClearActions()
	if next, err = c.renewLease(ctx, "n", n); err != nil || next != 10*time.Second {
		t.Fatalf("renewal: next %s err %v, want 10s (a quarter of 40s)", next, err)
	}
	if acts := client.Actions(); len(acts) != 1 || acts[0].GetVerb() != "update" {
		t.Errorf("renewal made %v, want one update", acts)
	}
	if renew, _ := getLease(t, client); !renew.Equal(clk.Now()) {
		t.Errorf("renewTime %v, want advanced to %v", renew, clk.Now())
	}
}

func TestDeletedLeaseIsRecreated(t *testing.T) {
	ctx := context.Background()
	c, n, client, _ := leaseController(t)
	if _, err := c.renewLease(ctx, "n", n); err != nil {
		t.Fatal(err)
	}
	if err := client.CoordinationV1().Leases(LeaseNamespace).Delete(ctx, "n", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.renewLease(ctx, "n", n); err == nil {
		t.Fatal("renewing a deleted lease succeeded, want an error to back off on")
	}
	if _, err := c.renewLease(ctx, "n", n); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if _, err := getLease(t, client); err != nil {
		t.Errorf("lease not recreated: %v", err)
	}
}

func TestFailedPingStopsRenewal(t *testing.T) {
	ctx := context.Background()
	c, n, client, _ := leaseController(t)
	n.pingErr = errTest
	client.ClearActions()
	if _, err := c.renewLease(ctx, "n", n); err != nil {
		t.Fatal(err)
	}
	if acts := client.Actions(); len(acts) != 0 {
		t.Errorf("renewal while the ping fails made %v, want nothing", acts)
	}
}

func TestRunRegistersAndAdopts(t *testing.T) {
	existing := template("old")
	existing.Labels = map[string]string{"someone/else": "kept"}
	existing.Spec.Taints = []corev1.Taint{{Key: "someone/taint", Effect: corev1.TaintEffectNoSchedule}}
	client := newFakeClient(existing)
	fresh := template("new")
	fresh.Spec.Taints = []corev1.Taint{{Key: "ours", Effect: corev1.TaintEffectNoSchedule}}
	adopted := template("old")
	adopted.Spec.Taints = fresh.Spec.Taints
	c, err := NewController(client, []Node{{fresh, &fakeNodeProvider{}}, {adopted, &fakeNodeProvider{}}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- c.Run(ctx) }()
	select {
	case <-c.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("Ready not closed")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}

	old, err := client.CoreV1().Nodes().Get(context.Background(), "old", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if old.Labels["someone/else"] != "kept" || old.Labels["nodelet.io/test"] != "yes" {
		t.Errorf("adopted labels = %v, want others' kept and ours added", old.Labels)
	}
	if len(old.Spec.Taints) != 2 {
		t.Errorf("adopted taints = %v, want others' kept and ours added", old.Spec.Taints)
	}
	created, err := client.CoreV1().Nodes().Get(context.Background(), "new", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if created.Annotations[LastAppliedAnnotation] == "" || len(created.Status.Conditions) == 0 {
		t.Errorf("created node lacks status or last-applied annotation: %+v", created)
	}
}

func resourceQuantity(s string) *resource.Quantity {
	q := resource.MustParse(s)
	return &q
}
