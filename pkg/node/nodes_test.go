package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	testingclock "k8s.io/utils/clock/testing"
)

// A Node someone else created keeps their labels, taints, capacity and
// addresses; the agent adds the labels it lacks, its status conditions and
// nodeInfo, and a Lease.
func TestTakenOverNodeKeepsWhatItsCreatorWrote(t *testing.T) {
	theirs := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: "kwok-0", UID: "their-uid",
			Labels:      map[string]string{"provider/label": "theirs"},
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake", "nodelet.io/template": "theirs"},
		},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "kwok.x-k8s.io/node", Value: "fake", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{
			Capacity:    corev1.ResourceList{corev1.ResourcePods: resource.MustParse("50"), corev1.ResourceCPU: resource.MustParse("32")},
			Allocatable: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("40")},
			Addresses:   []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.9.9.9"}},
		},
	}
	client := newFakeClient(true, theirs)
	tmpl := template("kwok-0")
	tmpl.Spec.Taints = []corev1.Taint{{Key: "nodelet.io/ours", Effect: corev1.TaintEffectNoSchedule}}
	tmpl.Spec.PodCIDR, tmpl.Spec.PodCIDRs = "10.0.0.0/24", []string{"10.0.0.0/24"}
	c, err := NewController(client, []Node{{Template: tmpl, Provider: &fakeProvider{}, TakenOver: true}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	run(t, c)
	waitReady(t, c)

	got := getNode(t, client, "kwok-0")
	if got.UID != "their-uid" {
		t.Fatalf("node UID %s: it was replaced", got.UID)
	}
	if got.Labels["provider/label"] != "theirs" || got.Labels["nodelet.io/test"] != "yes" ||
		got.Annotations["nodelet.io/template"] != "theirs" || got.Annotations["kwok.x-k8s.io/node"] != "fake" {
		t.Errorf("metadata = %+v, want theirs kept and only missing keys added", got.ObjectMeta)
	}
	if len(got.Spec.Taints) != 1 || got.Spec.Taints[0].Key != "kwok.x-k8s.io/node" || got.Spec.PodCIDR != "" {
		t.Errorf("spec = %+v, want theirs untouched", got.Spec)
	}
	if q := got.Status.Capacity[corev1.ResourcePods]; q.String() != "50" || len(got.Status.Capacity) != 2 {
		t.Errorf("capacity = %v, want theirs", got.Status.Capacity)
	}
	if q := got.Status.Allocatable[corev1.ResourcePods]; q.String() != "40" {
		t.Errorf("allocatable = %v, want theirs", got.Status.Allocatable)
	}
	if len(got.Status.Addresses) != 1 || got.Status.Addresses[0].Address != "10.9.9.9" {
		t.Errorf("addresses = %v, want theirs", got.Status.Addresses)
	}
	if condition(got, corev1.NodeReady) == nil || got.Annotations[LastAppliedAnnotation] == "" {
		t.Errorf("status = %+v, want the agent's Ready condition and record", got.Status)
	}
	poll(t, "the node's Lease", func() bool {
		l, err := client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(context.Background(), "kwok-0", metav1.GetOptions{})
		return err == nil && l.OwnerReferences[0].UID == "their-uid"
	})
}

// A Node taken over is adopted from the copy the caller saw (the
// takeover's cache), without a read from the API, unless that copy is
// stale: the adoption's patch carries its resourceVersion, and on the
// API's conflict the agent reads the Node and patches again.
func TestTakenOverNodeAdoptedFromWhatWasSeen(t *testing.T) {
	for _, stale := range []bool{false, true} {
		t.Run(fmt.Sprintf("stale=%v", stale), func(t *testing.T) {
			theirs := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "kwok-0", UID: "their-uid", ResourceVersion: "5"}}
			client := newFakeClient(true, theirs)
			// The API server's precondition, which the fake does not check.
			client.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
				p := a.(k8stesting.PatchAction)
				var patch struct {
					Metadata struct {
						ResourceVersion string `json:"resourceVersion"`
					} `json:"metadata"`
				}
				if p.GetSubresource() != "" || json.Unmarshal(p.GetPatch(), &patch) != nil || patch.Metadata.ResourceVersion == "5" {
					return false, nil, nil
				}
				return true, nil, apierrors.NewConflict(corev1.Resource("nodes"), "kwok-0", errors.New("the object has been modified"))
			})
			seen := theirs.DeepCopy()
			if stale {
				seen.ResourceVersion = "4"
			}
			c, err := NewController(client, []Node{{Template: template("kwok-0"), Provider: &fakeProvider{}, TakenOver: true, Seen: seen}}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			run(t, c)
			waitReady(t, c)
			if got := getNode(t, client, "kwok-0"); got.Labels["nodelet.io/test"] != "yes" {
				t.Fatalf("labels %v, want the template's added", got.Labels)
			}
			var verbs []string
			for _, a := range client.Actions() {
				if a.GetResource().Resource != "nodes" {
					continue
				}
				if g, ok := a.(k8stesting.GetActionImpl); ok && g.GetOptions.ResourceVersion == "0" || a.GetSubresource() != "" {
					break // the first status report's: adopted by then
				}
				verbs = append(verbs, a.GetVerb())
			}
			want := []string{"patch"}
			if stale {
				want = []string{"patch", "get", "patch"}
			}
			if !slices.Equal(verbs, want) {
				t.Errorf("adoption's requests %v, want %v", verbs, want)
			}
		})
	}
}

// A status write reads the Node from the API server's cache first
// (resourceVersion 0, as the kubelet), or takes the Node as its adoption
// just left it; after a conflict (the copy was behind) it reads from etcd.
func TestStatusReadFromTheCacheFirst(t *testing.T) {
	for _, known := range []bool{false, true} {
		t.Run(fmt.Sprintf("known=%v", known), func(t *testing.T) {
			theirs := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "kwok-0", UID: "their-uid"}}
			client := newFakeClient(true, theirs)
			var patches atomic.Int32
			client.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
				if a.GetSubresource() == "status" && patches.Add(1) == 1 {
					return true, nil, apierrors.NewConflict(corev1.Resource("nodes"), "kwok-0", errors.New("the object has been modified"))
				}
				return false, nil, nil
			})
			c, err := NewController(client, []Node{{Template: template("kwok-0"), Provider: &fakeProvider{}, TakenOver: true}}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer c.queue.ShutDown()
			n := c.node("kwok-0")
			if known {
				n.known = theirs.DeepCopy()
			}
			status := &corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}
			if _, err := c.writeStatus(context.Background(), n, "their-uid", status); err != nil {
				t.Fatal(err)
			}
			var reads []string
			for _, a := range client.Actions() {
				if g, ok := a.(k8stesting.GetActionImpl); ok && a.GetResource().Resource == "nodes" {
					reads = append(reads, "rv="+g.GetOptions.ResourceVersion)
				}
			}
			want := []string{"rv=0", "rv="}
			if known {
				want = []string{"rv="}
			}
			if !slices.Equal(reads, want) || patches.Load() != 2 {
				t.Errorf("reads of the Node %v and %d status patches, want %v and 2 (a conflict, then the write)", reads, patches.Load(), want)
			}
		})
	}
}

// A taken-over Node that is missing is never created: it was deleted.
func TestTakenOverNodeIsNeverCreated(t *testing.T) {
	client := newFakeClient(true)
	c, err := NewController(client, []Node{{Template: template("gone"), Provider: &fakeProvider{}, TakenOver: true}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	run(t, c)
	poll(t, "the adoption tried twice", func() bool {
		gets := 0
		for _, a := range client.Actions() {
			if a.GetVerb() == "get" && a.GetResource().Resource == "nodes" {
				gets++
			}
		}
		return gets >= 2
	})
	for _, a := range client.Actions() {
		if a.GetVerb() == "create" {
			t.Errorf("created %s, want nothing created", a.GetResource().Resource)
		}
	}
	if c.AllReported() {
		t.Error("AllReported with a node that is not registered")
	}
}

// Nodes added and removed at run time: an added node registers and gets
// its Lease; a removed node's Lease is no longer renewed.
func TestAddAndRemoveAtRunTime(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	client := newFakeClient(true)
	c, err := NewController(client, nil, Options{Clock: clk, Workers: 1, PingInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	run(t, c)
	waitReady(t, c) // none to register
	for _, name := range []string{"a", "b"} {
		if err := c.Add(Node{Template: template(name), Provider: &fakeProvider{}}); err != nil {
			t.Fatal(err)
		}
		poll(t, "the Lease of "+name, func() bool { return leaseOf(client, name) != nil })
	}
	poll(t, "every node reported", c.AllReported)

	c.Remove("a")
	if c.Len() != 1 || !c.AllReported() {
		t.Errorf("after Remove: %d nodes, all reported %v; want 1, true", c.Len(), c.AllReported())
	}
	renewedA := leaseOf(client, "a").Spec.RenewTime.Time
	before := leaseOf(client, "b").Spec.RenewTime.Time
	// One worker runs the due tasks in the order they fell due: once b's
	// Lease is renewed, a's renewal, due before it, would have run too.
	// The clock moves on at each look, in case b's renewal was not yet
	// scheduled at the last.
	poll(t, "b's Lease renewed", func() bool {
		clk.Step(c.opts.RenewInterval)
		return leaseOf(client, "b").Spec.RenewTime.Time.After(before)
	})
	if !leaseOf(client, "a").Spec.RenewTime.Time.Equal(renewedA) {
		t.Error("the removed node's Lease was renewed")
	}
	if err := c.Add(Node{Template: template("Bad_Name"), Provider: &fakeProvider{}}); err == nil {
		t.Error("Add of an invalid name succeeded")
	}
	// A provider may notify as soon as it is asked to.
	if err := c.Add(Node{Template: template("eager"), Provider: &eagerNotifier{}}); err != nil {
		t.Fatal(err)
	}
	poll(t, "the eager node's Lease", func() bool { return leaseOf(client, "eager") != nil })
}

// eagerNotifier notifies a status change the moment it is asked to notify.
type eagerNotifier struct{ fakeProvider }

func (p *eagerNotifier) NotifyNodeStatus(_ context.Context, notify func()) { notify() }

func leaseOf(client *fake.Clientset, name string) *coordinationv1.Lease {
	l, err := client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return l
}

// addressedProvider is a node at the agent's address and port, as the
// sim provider describes a Node taken over that has no InternalIP.
type addressedProvider struct{ fakeProvider }

func (p *addressedProvider) ConfigureNode(ctx context.Context, n *corev1.Node) {
	p.fakeProvider.ConfigureNode(ctx, n)
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.5"}, {Type: corev1.NodeHostName, Address: "agent"}}
	n.Status.DaemonEndpoints.KubeletEndpoint.Port = 10350
}

// What the API server needs to reach the kubelet API of a Node taken over
// is added, as a kubelet adds it: the agent's port in daemonEndpoints and,
// when the creator wrote no InternalIP, the agent's; the creator's own
// addresses stay.
func TestTakenOverNodeIsReachable(t *testing.T) {
	for _, tt := range []struct {
		name         string
		theirs, want []corev1.NodeAddress
	}{
		{"no addresses: the provider's", nil,
			[]corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.5"}, {Type: corev1.NodeHostName, Address: "agent"}}},
		{"no InternalIP: theirs and the agent's", []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: "kwok-0"}},
			[]corev1.NodeAddress{{Type: corev1.NodeHostName, Address: "kwok-0"}, {Type: corev1.NodeInternalIP, Address: "10.0.0.5"}}},
		{"their InternalIP: theirs alone", []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.9.9.9"}},
			[]corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.9.9.9"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			theirs := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "kwok-0", UID: "their-uid"},
				Status: corev1.NodeStatus{Addresses: tt.theirs}}
			client := newFakeClient(true, theirs)
			c, err := NewController(client, []Node{{Template: template("kwok-0"), Provider: &addressedProvider{}, TakenOver: true}}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			run(t, c)
			waitReady(t, c)
			got := getNode(t, client, "kwok-0")
			if !equality.Semantic.DeepEqual(got.Status.Addresses, tt.want) {
				t.Errorf("addresses = %v, want %v", got.Status.Addresses, tt.want)
			}
			if port := got.Status.DaemonEndpoints.KubeletEndpoint.Port; port != 10350 {
				t.Errorf("kubelet endpoint port = %d, want the agent's 10350", port)
			}
		})
	}
}

// With GrowWorkers, the workers grow with the nodes added at run time to
// WorkersFor them (the Nodes an agent takes over come after it starts),
// and a controller without it keeps its count.
func TestWorkersGrowWithTheNodesAdded(t *testing.T) {
	for _, grow := range []bool{true, false} {
		t.Run(fmt.Sprintf("grow=%v", grow), func(t *testing.T) {
			client := newFakeClient(true)
			c, err := NewController(client, nil, Options{Workers: 8, GrowWorkers: grow, PingInterval: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			run(t, c)
			waitReady(t, c)
			for i := range 100 {
				if err := c.Add(Node{Template: template(fmt.Sprintf("n-%d", i)), Provider: &fakeProvider{}}); err != nil {
					t.Fatal(err)
				}
			}
			poll(t, "every node reported", c.AllReported)
			c.mu.RLock()
			workers := c.workers
			c.mu.RUnlock()
			want := 8
			if grow {
				want = WorkersFor(100)
			}
			if workers != want {
				t.Errorf("%d workers for 100 nodes, want %d", workers, want)
			}
		})
	}
}
