package fault

import (
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
)

// TestLeaseLapseCountedOnce: a renewal held up through an outage, which
// lands with a renewTime already older than the lease's duration, does not
// end the lapse; the outage is one lapse, not two.
func TestLeaseLapseCountedOnce(t *testing.T) {
	const d = 40 * time.Second
	t0 := time.Date(2026, 11, 28, 6, 38, 59, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		steps func(o *Observer)
		want  int
	}{
		{"renewed on time", func(o *Observer) {
			o.renewal("n", t0.Add(10*time.Second), t0.Add(10*time.Second))
			o.checkLapses(t0.Add(45*time.Second), nil)
		}, 0},
		{"lapsed, then a held-up write, then a fresh one", func(o *Observer) {
			o.checkLapses(t0.Add(41*time.Second), nil)
			o.renewal("n", t0.Add(time.Second), t0.Add(43*time.Second)) // sent before the outage
			o.checkLapses(t0.Add(44*time.Second), nil)
			o.renewal("n", t0.Add(50*time.Second), t0.Add(50*time.Second))
			o.checkLapses(t0.Add(51*time.Second), nil)
		}, 1},
		{"a held-up write before the ticker saw the lapse", func(o *Observer) {
			o.renewal("n", t0.Add(time.Second), t0.Add(42*time.Second))
			o.checkLapses(t0.Add(43*time.Second), nil)
		}, 1},
		{"renewed late, seen only by the renewal", func(o *Observer) {
			o.renewal("n", t0.Add(45*time.Second), t0.Add(45*time.Second))
			o.checkLapses(t0.Add(46*time.Second), nil)
		}, 1},
		{"two outages", func(o *Observer) {
			o.checkLapses(t0.Add(41*time.Second), nil)
			o.renewal("n", t0.Add(50*time.Second), t0.Add(50*time.Second))
			o.checkLapses(t0.Add(91*time.Second), nil)
		}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := &Observer{renewed: map[string]time.Time{"n": t0}, lapsed: map[string]bool{},
				duration: map[string]time.Duration{"n": d}}
			tc.steps(o)
			if o.c.LeaseLapses != tc.want {
				t.Errorf("lapses %d, want %d: %v", o.c.LeaseLapses, tc.want, o.details)
			}
		})
	}
}

// A pod that leaves the API is lost unless the test deleted it or a
// workload controller said it did: a ReplicaSet deletes the surplus it
// made when an outage cut off a create's answer (TestAPIServerKilledDuringRollout
// counted one such pod as lost). The controller's Event may come before
// or after the pod's deletion.
func TestPodsLostLeaveOutControllerDeletes(t *testing.T) {
	o := &Observer{ns: "ns", deleting: map[string]bool{}, scaledDown: map[string]bool{}, pods: map[types.UID]*corev1.Pod{}}
	pod := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name)}}
	}
	deleted := func(name string) *corev1.Event {
		return &corev1.Event{Reason: "SuccessfulDelete", Message: "Deleted pod: " + name}
	}
	o.Deleting("ns", "by-the-test")
	o.podGone(pod("by-the-test"))
	o.event(deleted("surplus-before"))
	o.podGone(pod("surplus-before"))
	o.podGone(pod("surplus-after"))
	o.event(deleted("surplus-after"))
	o.podGone(pod("lost"))
	o.event(&corev1.Event{Reason: "Killing", Message: "Deleted pod: lost"})
	if c := o.Counters(); c.PodsLost != 1 {
		t.Errorf("pods lost %d, want 1 (pod lost): %v", c.PodsLost, o.Details())
	}
	if d := o.Details(); len(d) != 1 || !strings.Contains(d[0], "pod lost deleted") {
		t.Errorf("details %q, want the lost pod's", d)
	}
}

// The watch may be behind the API after an API server restart: a lease
// that looks lapsed in it but was renewed in the API is no lapse, one the
// API has not renewed either is, and one the API cannot be asked about
// is looked at again later.
func TestLapseConfirmedInTheAPI(t *testing.T) {
	now := time.Now()
	lease := func(name string, renewed time.Time) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceNodeLease, Name: name},
			Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: renewed}, LeaseDurationSeconds: ptr(int32(40))}}
	}
	client := fake.NewClientset(lease("renewed", now.Add(-5*time.Second)), lease("stale", now.Add(-45*time.Second)))
	o := &Observer{client: client, lapsed: map[string]bool{},
		renewed:  map[string]time.Time{"renewed": now.Add(-45 * time.Second), "stale": now.Add(-45 * time.Second), "unknown": now.Add(-45 * time.Second)},
		duration: map[string]time.Duration{"renewed": 40 * time.Second, "stale": 40 * time.Second, "unknown": 40 * time.Second}}
	o.lookForLapses(now)
	if o.c.LeaseLapses != 1 || len(o.details) != 1 || !strings.Contains(o.details[0], "lease stale: not renewed") {
		t.Errorf("lapses %d %v, want the stale lease's alone", o.c.LeaseLapses, o.details)
	}
	if !o.renewed["renewed"].Equal(now.Add(-5*time.Second)) || o.lapsed["unknown"] {
		t.Errorf("renewed %v, lapsed %v: want the API's renewal taken and the unknown lease left for later", o.renewed, o.lapsed)
	}
}

// A node the node controller marks Unknown while its lease in the API is
// fresh is the controller's late view, noted and not counted; Unknown
// with a stale lease, and False (the agent's own verdict), are counted.
func TestNotReadyJudgedAgainstTheLease(t *testing.T) {
	now := time.Now()
	client := fake.NewClientset(
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceNodeLease, Name: "n-fresh"},
			Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: now.Add(-3 * time.Second)}}},
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceNodeLease, Name: "n-stale"},
			Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: now.Add(-30 * time.Second)}}},
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceNodeLease, Name: "n-false"},
			Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: now.Add(-3 * time.Second)}}},
	)
	o := &Observer{nodePrefix: "n-", client: client, ready: map[string]bool{}}
	node := func(name string, status corev1.ConditionStatus) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status}}}}
	}
	for _, name := range []string{"n-fresh", "n-stale", "n-false"} {
		o.node(node(name, corev1.ConditionTrue))
	}
	o.node(node("n-fresh", corev1.ConditionUnknown))
	o.node(node("n-stale", corev1.ConditionUnknown))
	o.node(node("n-false", corev1.ConditionFalse))
	if o.c.NodesNotReady != 2 || len(o.notes) != 1 || !strings.Contains(o.notes[0], "node n-fresh") {
		t.Errorf("NotReady %d (%v), notes %v; want n-stale and n-false counted, n-fresh noted", o.c.NodesNotReady, o.details, o.notes)
	}
}

// A ReplicaSet's pod whose graceful deletion was asked for is not lost,
// whatever became of the ReplicaSet's Event (aggregated by the recorder,
// or dropped beyond its burst); one gone without that, and without an
// Event, is.
func TestPodsLostAfterLossyEvents(t *testing.T) {
	o := &Observer{ns: "ns", deleting: map[string]bool{}, scaledDown: map[string]bool{}, pods: map[types.UID]*corev1.Pod{}}
	owned := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name),
			OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "rs", Controller: ptr(true)}}}}
	}
	o.event(&corev1.Event{Reason: "SuccessfulDelete", Message: "(combined from similar events): Deleted pod: aggregated"})
	o.podGone(owned("aggregated"))
	graceful := owned("graceful")
	o.pod(graceful)
	terminating := graceful.DeepCopy()
	terminating.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	terminating.DeletionGracePeriodSeconds = ptr(int64(2))
	o.pod(terminating)
	o.podGone(terminating)
	o.pod(owned("vanished"))
	o.podGone(owned("vanished"))
	if c := o.Counters(); c.PodsLost != 1 {
		t.Errorf("pods lost %d, want 1 (vanished): %v", c.PodsLost, o.Details())
	}
}

func ptr[T any](v T) *T { return &v }
