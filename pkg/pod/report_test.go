package pod

import (
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func withPhase(uid string, phase corev1.PodPhase) *corev1.Pod {
	return testPod(uid, "n", func(p *corev1.Pod) { p.Status.Phase = phase })
}

// The newest report of a pod wins: the last one put, never a seed over a
// kept report, and a drop only of the report it names.
func TestReportsKeepTheNewest(t *testing.T) {
	r := newReports()
	phase := func() corev1.PodPhase {
		rep, ok := r.newest("ns/p")
		if !ok {
			return "none"
		}
		return rep.status.Phase
	}
	steps := []struct {
		name string
		do   func()
		want corev1.PodPhase
	}{
		{"a seed of a pod without a report is kept", func() { r.seed("ns/p", withPhase("a", corev1.PodPending)) }, corev1.PodPending},
		{"the last put wins", func() {
			r.put("ns/p", withPhase("a", corev1.PodRunning))
			r.put("ns/p", withPhase("a", corev1.PodSucceeded))
		}, corev1.PodSucceeded},
		{"a seed does not replace a report", func() { r.seed("ns/p", withPhase("a", corev1.PodRunning)) }, corev1.PodSucceeded},
		{"dropping a report that was replaced keeps the newer", func() {
			old, _ := r.newest("ns/p")
			r.put("ns/p", withPhase("b", corev1.PodRunning))
			r.drop("ns/p", old.seq)
		}, corev1.PodRunning},
		{"dropping the newest report drops it", func() {
			cur, _ := r.newest("ns/p")
			r.drop("ns/p", cur.seq)
		}, "none"},
		{"a seed after a drop is kept", func() { r.seed("ns/p", withPhase("c", corev1.PodPending)) }, corev1.PodPending},
		{"forget drops it", func() { r.forget("ns/p") }, "none"},
	}
	for _, s := range steps {
		s.do()
		if got := phase(); got != s.want {
			t.Fatalf("%s: phase %s, want %s", s.name, got, s.want)
		}
	}
}

// A report keeps what writing it needs, not the provider's spec.
func TestReportKeepsIdentityAndStatus(t *testing.T) {
	r := newReports()
	pod := testPod("a", "n", static("h1"), runningStatus)
	r.put("ns/p", pod)
	rep, _ := r.newest("ns/p")
	if rep.uid != pod.UID || !rep.static || rep.hash != "h1" || rep.status.Phase != corev1.PodRunning {
		t.Errorf("report %+v lost the pod's UID, static pod hash or status", rep)
	}
}

// Reports are put and read at once from many goroutines, as providers
// push while the workers read: each put numbers its report, none is lost.
func TestReportsConcurrentPuts(t *testing.T) {
	r := newReports()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				r.put("ns/p", withPhase("a", corev1.PodRunning))
				r.newest("ns/p")
			}
		})
	}
	wg.Wait()
	if rep, _ := r.newest("ns/p"); rep.seq != 800 {
		t.Errorf("newest report numbered %d after 800 puts", rep.seq)
	}
}
