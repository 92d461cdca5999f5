package fault

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
			o.checkLapses(t0.Add(45 * time.Second))
		}, 0},
		{"lapsed, then a held-up write, then a fresh one", func(o *Observer) {
			o.checkLapses(t0.Add(41 * time.Second))
			o.renewal("n", t0.Add(time.Second), t0.Add(43*time.Second)) // sent before the outage
			o.checkLapses(t0.Add(44 * time.Second))
			o.renewal("n", t0.Add(50*time.Second), t0.Add(50*time.Second))
			o.checkLapses(t0.Add(51 * time.Second))
		}, 1},
		{"a held-up write before the ticker saw the lapse", func(o *Observer) {
			o.renewal("n", t0.Add(time.Second), t0.Add(42*time.Second))
			o.checkLapses(t0.Add(43 * time.Second))
		}, 1},
		{"renewed late, seen only by the renewal", func(o *Observer) {
			o.renewal("n", t0.Add(45*time.Second), t0.Add(45*time.Second))
			o.checkLapses(t0.Add(46 * time.Second))
		}, 1},
		{"two outages", func(o *Observer) {
			o.checkLapses(t0.Add(41 * time.Second))
			o.renewal("n", t0.Add(50*time.Second), t0.Add(50*time.Second))
			o.checkLapses(t0.Add(91 * time.Second))
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
