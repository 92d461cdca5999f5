package main

import (
	"maps"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestSoakMarkIndex(t *testing.T) {
	for _, tc := range []struct {
		duration, interval time.Duration
		want               int
	}{
		{60 * time.Minute, time.Minute, 30},
		{20 * time.Minute, time.Minute, 10},
		{5 * time.Minute, time.Minute, 3},
		{time.Minute, time.Minute, 1},
		{2 * time.Minute, 30 * time.Second, 2},
	} {
		if got := soakMarkIndex(soakOptions{duration: tc.duration, interval: tc.interval}); got != tc.want {
			t.Errorf("soakMarkIndex(%s every %s) = %d, want %d", tc.duration, tc.interval, got, tc.want)
		}
	}
}

// minutes makes one sample a minute with these RSS figures and the given
// writes per node per minute.
func minutes(writes float64, rss ...float64) []soakSample {
	var out []soakSample
	for i, r := range rss {
		out = append(out, soakSample{Minute: float64(i + 1), RSSMiB: r, WritesPerNodeMinute: writes, BenchWritesPerNodeMinute: 0.5})
	}
	return out
}

func TestJudgeSoak(t *testing.T) {
	so := soakOptions{duration: 6 * time.Minute, interval: time.Minute} // mark: minute 3
	for _, tc := range []struct {
		name     string
		samples  []soakSample
		lapses   int
		wantFlat bool
		wantPass bool
	}{
		{"flat", minutes(6, 100, 120, 200, 204, 196, 209), 0, true, true},
		{"growing", minutes(6, 100, 150, 200, 205, 210, 211), 0, false, false},
		{"shrinking", minutes(6, 100, 150, 200, 189, 185, 190), 0, false, false},
		{"writes over budget", minutes(7.1, 200, 200, 200, 200, 200, 200), 0, true, false},
		{"the bench's own writes not counted", minutes(6.9, 200, 200, 200, 200, 200, 200), 0, true, true},
		{"a lapse", minutes(6, 200, 200, 200, 200, 200, 200), 1, true, false},
		{"no sample after the mark", minutes(6, 200, 200, 200), 0, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.samples[len(tc.samples)-1].LeaseLapses = tc.lapses
			v := judgeSoak(tc.samples, so)
			if v.MemoryFlat != tc.wantFlat || v.Pass != tc.wantPass {
				t.Errorf("judgeSoak: flat %v pass %v, want %v %v (%+v)", v.MemoryFlat, v.Pass, tc.wantFlat, tc.wantPass, v)
			}
		})
	}
}

func TestPodWritesPerPod(t *testing.T) {
	before := map[string]float64{"POST pods": 100, "DELETE pods": 50, "PATCH pods/status": 10, "GET pods": 7, "PUT leases": 1000}
	after := map[string]float64{"POST pods": 300, "DELETE pods": 450, "PATCH pods/status": 410, "GET pods": 900, "PUT leases": 9000, "POST events": 20}
	want := map[string]float64{"POST pods": 1, "DELETE pods": 2, "PATCH pods/status": 2, "POST events": 0.1}
	if got := podWritesPerPod(before, after, 200); !maps.Equal(got, want) {
		t.Errorf("podWritesPerPod = %v, want %v", got, want)
	}
}

func TestScanSamples(t *testing.T) {
	raw := []byte(`# HELP go_goroutines Number of goroutines.
# TYPE go_goroutines gauge
go_goroutines 163
go_memstats_heap_inuse_bytes 5.24288e+07
apiserver_request_total{code="201",resource="pods",verb="POST"} 452
`)
	got := map[string]float64{}
	if err := scanSamples(raw, func(name, _ string, v float64) { got[name] += v }); err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"go_goroutines": 163, "go_memstats_heap_inuse_bytes": 52428800, "apiserver_request_total": 452}
	if !maps.Equal(got, want) {
		t.Errorf("scanSamples = %v, want %v", got, want)
	}
}

func TestLapseWatchGaps(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 1, 0, 0, 0, time.UTC)
	lease := func(renewed time.Duration) *coordinationv1.Lease {
		return &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{
			RenewTime:            &metav1.MicroTime{Time: t0.Add(renewed)},
			LeaseDurationSeconds: ptr.To[int32](40),
		}}
	}
	var w lapseWatch
	w.onUpdate(lease(0), lease(10*time.Second))              // renewed in time
	w.onUpdate(lease(10*time.Second), lease(10*time.Second)) // another field changed
	w.onUpdate(lease(10*time.Second), lease(50*time.Second)) // 40 s: just in time
	w.onUpdate(lease(50*time.Second), lease(91*time.Second)) // 41 s: lapsed
	if got := w.count(); got != 1 {
		t.Errorf("lapses = %d, want 1", got)
	}
}
