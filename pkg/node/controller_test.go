package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"
)

// fakeProvider describes a node with a pod capacity and a Ready condition;
// both and its ping outcome can be changed while the controller runs.
type fakeProvider struct {
	mu      sync.Mutex
	pingErr error
	pods    string
}

func (p *fakeProvider) Ping(context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pingErr
}

func (p *fakeProvider) ConfigureNode(_ context.Context, n *corev1.Node) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pods := p.pods
	if pods == "" {
		pods = "110"
	}
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	n.Labels["provider/label"] = "yes"
	n.Status.Capacity = corev1.ResourceList{corev1.ResourcePods: resource.MustParse(pods)}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}}
}

func (p *fakeProvider) set(pods string, pingErr error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pods, p.pingErr = pods, pingErr
}

// notifyingProvider also pushes status changes.
type notifyingProvider struct {
	fakeProvider
	notify atomic.Pointer[func()]
}

func (p *notifyingProvider) NotifyNodeStatus(_ context.Context, notify func()) {
	p.notify.Store(&notify)
}

func template(name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:        name,
		Labels:      map[string]string{"nodelet.io/test": "yes"},
		Annotations: map[string]string{"nodelet.io/template": "yes"},
	}}
}

// newFakeClient is a fake clientset that gives created objects a UID, as the
// API server does, and serves the Lease API when leases is true.
func newFakeClient(leases bool, nodes ...*corev1.Node) *fake.Clientset {
	client := fake.NewClientset()
	for _, n := range nodes {
		if err := client.Tracker().Add(n); err != nil {
			panic(err)
		}
	}
	var uids atomic.Int64
	client.PrependReactor("create", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if obj, ok := a.(k8stesting.CreateAction).GetObject().(metav1.Object); ok && obj.GetUID() == "" {
			obj.SetUID(types.UID(fmt.Sprintf("uid-%d", uids.Add(1))))
		}
		return false, nil, nil
	})
	if leases {
		client.Discovery().(*fakediscovery.FakeDiscovery).Resources = []*metav1.APIResourceList{{
			GroupVersion: "coordination.k8s.io/v1",
			APIResources: []metav1.APIResource{{Name: "leases", Namespaced: true, Kind: "Lease"}},
		}}
	}
	return client
}

// run runs c until the test ends.
func run(t *testing.T, c *Controller) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// poll waits until cond holds, failing the test after 10s.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

func waitReady(t *testing.T, c *Controller) {
	t.Helper()
	poll(t, "Ready", func() bool {
		select {
		case <-c.Ready():
			return true
		default:
			return false
		}
	})
}

func getNode(t *testing.T, client *fake.Clientset, name string) *corev1.Node {
	t.Helper()
	n, err := client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get node %s: %v", name, err)
	}
	return n
}

func condition(n *corev1.Node, typ corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == typ {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

func statusPatches(client *fake.Clientset) int {
	count := 0
	for _, a := range client.Actions() {
		if a.GetVerb() == "patch" && a.GetSubresource() == "status" {
			count++
		}
	}
	return count
}

func TestNewControllerRejectsBadInput(t *testing.T) {
	p := &fakeProvider{}
	one := []Node{{Template: template("a"), Provider: p}}
	tests := []struct {
		name  string
		nodes []Node
		opts  Options
	}{
		{"duplicate name", []Node{{Template: template("a"), Provider: p}, {Template: template("a"), Provider: p}}, Options{}},
		{"empty name", []Node{{Template: template(""), Provider: p}}, Options{}},
		{"no template", []Node{{Provider: p}}, Options{}},
		{"invalid name", []Node{{Template: template("Not_A_Name"), Provider: p}}, Options{}},
		{"no provider", []Node{{Template: template("a")}}, Options{}},
		{"negative ping interval", one, Options{PingInterval: -time.Second}},
		{"negative workers", one, Options{Workers: -1}},
		{"lease duration not whole seconds", one, Options{LeaseDuration: 1500 * time.Millisecond}},
		{"renew interval not shorter than the lease", one, Options{LeaseDuration: 10 * time.Second, RenewInterval: 10 * time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := NewController(fake.NewClientset(), tt.nodes, tt.opts); err == nil {
				t.Error("NewController succeeded, want an error")
			}
		})
	}
	if _, err := NewController(nil, one, Options{}); err == nil {
		t.Error("NewController without a client succeeded, want an error")
	}
}

func TestNewControllerDefaults(t *testing.T) {
	client := fake.NewClientset()
	c, err := NewController(client, []Node{{Template: template("a"), Provider: &fakeProvider{}}}, Options{LeaseDuration: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.queue.ShutDown()
	o := c.opts
	if o.LeaseDuration != 20*time.Second || o.RenewInterval != 5*time.Second || o.StatusReportInterval != 5*time.Minute ||
		o.PingInterval != 10*time.Second || o.Workers != 8 || o.Clock == nil {
		t.Errorf("options after defaults = %+v", o)
	}
	if acts := client.Actions(); len(acts) != 0 {
		t.Errorf("NewController made API calls %v, want none", acts)
	}
}

func TestRunRegistersAndAdopts(t *testing.T) {
	existing := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: "old", UID: "old-uid",
			Labels:      map[string]string{"someone/label": "kept"},
			Annotations: map[string]string{"someone/annotation": "kept"},
		},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "someone/taint", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: "example.com/Other", Status: corev1.ConditionTrue, Reason: "SomeoneElse"},
		}},
	}
	client := newFakeClient(true, existing)
	ours := []corev1.Taint{{Key: "nodelet.io/ours", Effect: corev1.TaintEffectNoSchedule}}
	fresh, adopted := template("new"), template("old")
	fresh.Spec.Taints, adopted.Spec.Taints = ours, ours
	for _, n := range []*corev1.Node{fresh, adopted} {
		n.Spec.PodCIDR, n.Spec.PodCIDRs, n.Spec.ProviderID = "10.0.0.0/24", []string{"10.0.0.0/24"}, "nodelet://"+n.Name
	}
	c, err := NewController(client, []Node{{Template: fresh, Provider: &fakeProvider{}}, {Template: adopted, Provider: &fakeProvider{}}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	run(t, c)
	waitReady(t, c)

	created := getNode(t, client, "new")
	if created.Labels["nodelet.io/test"] != "yes" || created.Labels["provider/label"] != "yes" ||
		created.Annotations["nodelet.io/template"] != "yes" || len(created.Spec.Taints) != 1 {
		t.Errorf("created node metadata %+v taints %v, want the template's and the provider's", created.ObjectMeta, created.Spec.Taints)
	}
	if created.Annotations[LastAppliedAnnotation] == "" || condition(created, corev1.NodeReady) == nil {
		t.Errorf("created node lacks its status or last-applied annotation: %+v", created)
	}

	old := getNode(t, client, "old")
	if old.Labels["someone/label"] != "kept" || old.Labels["nodelet.io/test"] != "yes" ||
		old.Annotations["someone/annotation"] != "kept" || old.Annotations["nodelet.io/template"] != "yes" {
		t.Errorf("adopted metadata = %+v, want others' kept and ours added", old.ObjectMeta)
	}
	if len(old.Spec.Taints) != 2 {
		t.Errorf("adopted taints = %v, want others' kept and ours added", old.Spec.Taints)
	}
	if condition(old, "example.com/Other") == nil || condition(old, corev1.NodeReady) == nil {
		t.Errorf("adopted conditions = %+v, want others' kept and Ready added", old.Status.Conditions)
	}
	for _, n := range []*corev1.Node{created, old} {
		if n.Spec.PodCIDR != "10.0.0.0/24" || len(n.Spec.PodCIDRs) != 1 || n.Spec.ProviderID != "nodelet://"+n.Name {
			t.Errorf("node %s spec = %+v, want the template's pod range and provider ID", n.Name, n.Spec)
		}
	}

	for _, n := range []*corev1.Node{created, old} {
		poll(t, "lease of "+n.Name, func() bool {
			l, err := client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(context.Background(), n.Name, metav1.GetOptions{})
			return err == nil && len(l.OwnerReferences) == 1 && l.OwnerReferences[0].UID == n.UID
		})
	}
}

func TestRunWithoutLeaseAPIReportsStatusEveryPing(t *testing.T) {
	client := newFakeClient(false)
	c, err := NewController(client, []Node{{Template: template("n"), Provider: &fakeProvider{}}}, Options{PingInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	run(t, c)
	waitReady(t, c)
	poll(t, "three status heartbeats", func() bool { return statusPatches(client) >= 3 })
	for _, a := range client.Actions() {
		if a.GetResource().Resource == "leases" {
			t.Fatalf("lease call %v without the Lease API", a)
		}
	}
}

func TestRunSurvivesAPIServerDownAtStart(t *testing.T) {
	client := newFakeClient(true)
	var down atomic.Bool
	var failures atomic.Int64
	down.Store(true)
	client.PrependReactor("*", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
		if down.Load() {
			failures.Add(1)
			return true, nil, errors.New("connection refused")
		}
		return false, nil, nil
	})
	c, err := NewController(client, []Node{{Template: template("n"), Provider: &fakeProvider{}}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	run(t, c)
	poll(t, "failed registration attempts", func() bool { return failures.Load() >= 3 })
	select {
	case <-c.Ready():
		t.Fatal("Ready while the API server is down")
	default:
	}
	down.Store(false)
	waitReady(t, c)
	getNode(t, client, "n")
}

func TestRunReportsPingFailureAndRecovery(t *testing.T) {
	client := newFakeClient(true)
	p := &fakeProvider{}
	c, err := NewController(client, []Node{{Template: template("n"), Provider: p}}, Options{PingInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	run(t, c)
	waitReady(t, c)

	p.set("", errors.New("backend unreachable"))
	poll(t, "Ready False after a failed ping", func() bool {
		r := condition(getNode(t, client, "n"), corev1.NodeReady)
		return r != nil && r.Status == corev1.ConditionFalse && r.Reason == "ProviderPingFailed" && r.Message == "backend unreachable"
	})
	p.set("", nil)
	poll(t, "the provider's Ready back", func() bool {
		r := condition(getNode(t, client, "n"), corev1.NodeReady)
		return r != nil && r.Status == corev1.ConditionTrue && r.Reason == "KubeletReady"
	})
}

func TestStatusChangesAreReportedAtOnce(t *testing.T) {
	client := newFakeClient(true)
	p := &notifyingProvider{}
	// Long intervals: only the notification and ReportStatus can explain a
	// write within the test.
	c, err := NewController(client, []Node{{Template: template("n"), Provider: p}}, Options{PingInterval: time.Hour, StatusReportInterval: 2 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	run(t, c)
	waitReady(t, c)
	pods := func() string {
		q := getNode(t, client, "n").Status.Capacity[corev1.ResourcePods]
		return q.String()
	}

	p.set("50", nil)
	(*p.notify.Load())()
	poll(t, "capacity from the notification", func() bool { return pods() == "50" })

	p.set("60", nil)
	c.ReportStatus("n")
	c.ReportStatus("unknown-node") // ignored
	poll(t, "capacity from ReportStatus", func() bool { return pods() == "60" })

	// An unchanged status is not written again before it is due.
	before := statusPatches(client)
	c.ReportStatus("n")
	poll(t, "status check done", func() bool { return c.queue.Len() == 0 })
	if after := statusPatches(client); after != before {
		t.Errorf("an unchanged status was written: %d patches, want %d", after, before)
	}
}

func TestDeletedNodeIsRegisteredAgain(t *testing.T) {
	client := newFakeClient(false)
	c, err := NewController(client, []Node{{Template: template("n"), Provider: &fakeProvider{}}}, Options{PingInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	run(t, c)
	waitReady(t, c)
	first := getNode(t, client, "n").UID
	if err := client.CoreV1().Nodes().Delete(context.Background(), "n", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "the node registered again", func() bool {
		n, err := client.CoreV1().Nodes().Get(context.Background(), "n", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false
		}
		return err == nil && n.UID != first && n.Annotations[LastAppliedAnnotation] != ""
	})
}

func TestRunTwice(t *testing.T) {
	c, err := NewController(newFakeClient(true), []Node{{Template: template("n"), Provider: &fakeProvider{}}}, Options{Clock: testingclock.NewFakeClock(start)})
	if err != nil {
		t.Fatal(err)
	}
	run(t, c)
	poll(t, "Run started", c.started.Load)
	if err := c.Run(context.Background()); err == nil {
		t.Error("a second Run succeeded, want an error")
	}
}

func TestExtraConditionsAreReported(t *testing.T) {
	client := newFakeClient(true)
	var mu sync.Mutex
	extra := corev1.NodeCondition{Type: "ConfigOK", Status: corev1.ConditionTrue, Reason: "passing all checks", Message: "using current: local"}
	conditions := func(node string) []corev1.NodeCondition {
		mu.Lock()
		defer mu.Unlock()
		if node != "n" {
			t.Errorf("conditions asked for node %q", node)
		}
		return []corev1.NodeCondition{extra}
	}
	c, err := NewController(client, []Node{{Template: template("n"), Provider: &fakeProvider{}}},
		Options{PingInterval: time.Hour, StatusReportInterval: 2 * time.Hour, Conditions: conditions})
	if err != nil {
		t.Fatal(err)
	}
	run(t, c)
	waitReady(t, c)
	n := getNode(t, client, "n")
	if got := condition(n, "ConfigOK"); got == nil || got.Message != "using current: local" || got.LastHeartbeatTime.IsZero() {
		t.Fatalf("ConfigOK = %+v, want the extra condition with times", got)
	}
	if !c.NodeReady("n") || c.NodeReady("unknown") {
		t.Errorf("NodeReady(n) = %v, NodeReady(unknown) = %v; want true, false", c.NodeReady("n"), c.NodeReady("unknown"))
	}

	mu.Lock()
	extra.Status, extra.Message = corev1.ConditionFalse, "using last-known-good: local"
	mu.Unlock()
	c.ReportAllStatus()
	poll(t, "the changed condition reported", func() bool {
		got := condition(getNode(t, client, "n"), "ConfigOK")
		return got != nil && got.Status == corev1.ConditionFalse && got.Message == "using last-known-good: local"
	})
	if ready := condition(getNode(t, client, "n"), corev1.NodeReady); ready == nil || ready.Status != corev1.ConditionTrue {
		t.Errorf("Ready = %+v, want the provider's, untouched", ready)
	}
}

func TestSetConditionsReplacesByType(t *testing.T) {
	status := corev1.NodeStatus{Conditions: []corev1.NodeCondition{
		{Type: corev1.NodeReady, Status: corev1.ConditionTrue},
		{Type: "ConfigOK", Status: corev1.ConditionTrue},
	}}
	setConditions(&status, []corev1.NodeCondition{{Type: "ConfigOK", Status: corev1.ConditionFalse}, {Type: "Other", Status: corev1.ConditionTrue}})
	if len(status.Conditions) != 3 || status.Conditions[1].Status != corev1.ConditionFalse || status.Conditions[2].Type != "Other" {
		t.Errorf("conditions = %+v", status.Conditions)
	}
}

func TestSetVolumesAttached(t *testing.T) {
	client := newFakeClient(true)
	p := &notifyingProvider{}
	c, err := NewController(client, []Node{{Template: template("n"), Provider: p}}, Options{PingInterval: time.Hour, StatusReportInterval: 2 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	disk := []corev1.AttachedVolume{{Name: "kubernetes.io/csi/d^1", DevicePath: ""}}
	// Before the node is registered the list waits for the registration.
	if err := c.SetVolumesAttached(ctx, "n", disk); err != nil {
		t.Fatalf("before registration: %v", err)
	}
	run(t, c)
	waitReady(t, c)
	if got := getNode(t, client, "n").Status.VolumesAttached; len(got) != 1 || got[0].Name != disk[0].Name {
		t.Fatalf("volumesAttached after registration = %v, want %v", got, disk)
	}

	two := append(slices.Clone(disk), corev1.AttachedVolume{Name: "kubernetes.io/csi/d^2"})
	if err := c.SetVolumesAttached(ctx, "n", two); err != nil {
		t.Fatal(err)
	}
	// Written when the call returns, not later.
	if got := getNode(t, client, "n").Status.VolumesAttached; len(got) != 2 {
		t.Fatalf("volumesAttached = %v, want %v", got, two)
	}
	// A status report for another reason keeps them.
	p.set("50", nil)
	(*p.notify.Load())()
	poll(t, "capacity reported", func() bool {
		q := getNode(t, client, "n").Status.Capacity[corev1.ResourcePods]
		return q.String() == "50"
	})
	if got := getNode(t, client, "n").Status.VolumesAttached; len(got) != 2 {
		t.Fatalf("volumesAttached after another report = %v, want %v", got, two)
	}

	if err := c.SetVolumesAttached(ctx, "n", nil); err != nil {
		t.Fatal(err)
	}
	if got := getNode(t, client, "n").Status.VolumesAttached; len(got) != 0 {
		t.Fatalf("volumesAttached = %v, want none", got)
	}
	if err := c.SetVolumesAttached(ctx, "other", disk); !apierrors.IsNotFound(err) {
		t.Errorf("a node not managed: err = %v, want NotFound", err)
	}
}

// TestStatusWritesDoNotUndoEachOther runs volume writes against status
// reports: a report computed before a volume write must not land after it.
func TestStatusWritesDoNotUndoEachOther(t *testing.T) {
	client := newFakeClient(true)
	p := &notifyingProvider{}
	c, err := NewController(client, []Node{{Template: template("n"), Provider: p}}, Options{PingInterval: time.Hour, StatusReportInterval: 2 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	run(t, c)
	waitReady(t, c)
	var want []corev1.AttachedVolume
	for i := range 30 {
		p.set(fmt.Sprint(100+i), nil)
		(*p.notify.Load())()
		want = append(want, corev1.AttachedVolume{Name: corev1.UniqueVolumeName(fmt.Sprintf("kubernetes.io/csi/d^%d", i))})
		if err := c.SetVolumesAttached(context.Background(), "n", want); err != nil {
			t.Fatal(err)
		}
	}
	poll(t, "status reports done", func() bool { return c.queue.Len() == 0 })
	if got := getNode(t, client, "n").Status.VolumesAttached; len(got) != len(want) {
		t.Fatalf("volumesAttached has %d volumes, want %d", len(got), len(want))
	}
}

func TestSetVolumesAttachedSkipsWritesThatChangeNothing(t *testing.T) {
	client := newFakeClient(true)
	c, err := NewController(client, []Node{{Template: template("n"), Provider: &fakeProvider{}}}, Options{PingInterval: time.Hour, StatusReportInterval: 2 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	run(t, c)
	waitReady(t, c)
	poll(t, "status tasks done", func() bool { return c.queue.Len() == 0 })
	before := len(client.Actions())
	// At start the attach/detach controller reports every node once, most
	// with no volume: that must cost no request.
	if err := c.SetVolumesAttached(context.Background(), "n", nil); err != nil {
		t.Fatal(err)
	}
	if after := len(client.Actions()); after != before {
		t.Errorf("an unchanged empty list cost %d requests, want none", after-before)
	}
}

// The first reports of nodes registered or adopted together are spread
// over half the report interval, so that their later reports do not all
// come in the same seconds.
func TestFirstReportsAreSpread(t *testing.T) {
	var existing []*corev1.Node
	var nodes []Node
	for i := range 40 {
		name := fmt.Sprintf("n%d", i)
		if i%2 == 1 { // adopted: reported, not created with its status
			existing = append(existing, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name + "-uid")}})
		}
		nodes = append(nodes, Node{Template: template(name), Provider: &fakeProvider{}})
	}
	client := newFakeClient(true, existing...)
	interval := 2 * time.Hour
	c, err := NewController(client, nodes, Options{PingInterval: time.Hour, StatusReportInterval: interval})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	run(t, c)
	waitReady(t, c)
	reported := func(n *nodeState) time.Time {
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.appliedAt
	}
	poll(t, "every node reported", func() bool {
		for _, n := range c.nodes {
			if reported(n).IsZero() {
				return false
			}
		}
		return true
	})
	end := time.Now()
	var earliest, latest time.Time
	for name, n := range c.nodes {
		at := reported(n)
		if at.Before(start.Add(-interval/2)) || at.After(end) {
			t.Errorf("node %s: first report counted at %v, want within half an interval before %v", name, at, start)
		}
		if earliest.IsZero() || at.Before(earliest) {
			earliest = at
		}
		if at.After(latest) {
			latest = at
		}
	}
	// 40 draws from an hour: that they span less than ten minutes is
	// about as likely as 40 coins all landing heads.
	if latest.Sub(earliest) < 10*time.Minute {
		t.Errorf("first reports counted from %v to %v: not spread over the interval", earliest, latest)
	}
}
