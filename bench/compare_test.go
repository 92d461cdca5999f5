package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestDifferences(t *testing.T) {
	nodelet := result{Agent: "nodelet",
		Memory:          &memoryPeak{AtPeakRSS: memSplit{RSSMiB: 440, AnonMiB: 400, FileMiB: 40}},
		HeapAtPodPeak:   &heapSummary{InUseMiB: 150},
		PodPhaseRuntime: &podPhaseRuntime{AllocMiBPerSec: 60, Goroutines: 3000}}
	kwok := result{Agent: "kwok@v0.8.0",
		Memory:          &memoryPeak{AtPeakRSS: memSplit{RSSMiB: 800, AnonMiB: 760, FileMiB: 40}},
		PodPhaseRuntime: &podPhaseRuntime{AllocMiBPerSec: 10, Goroutines: 100}}
	tuned := result{Agent: "kwok@v0.8.0-tuned",
		Memory:          &memoryPeak{AtPeakRSS: memSplit{RSSMiB: 420, AnonMiB: 390, FileMiB: 20}},
		HeapAtPodPeak:   &heapSummary{InUseMiB: 100},
		PodPhaseRuntime: &podPhaseRuntime{AllocMiBPerSec: 30, Goroutines: 0}} // 0: left out

	got := differences([]result{nodelet, kwok, tuned})
	want := []difference{
		{Part: "file-backed RSS at peak RSS (MiB)", Nodelet: 40, Kwok: 20, KwokRun: "kwok@v0.8.0-tuned", Ratio: 2},
		{Part: "alloc rate over the pod phase (MiB/s)", Nodelet: 60, Kwok: 30, KwokRun: "kwok@v0.8.0-tuned", Ratio: 2},
		{Part: "heap in use at pod peak (profile) (MiB)", Nodelet: 150, Kwok: 100, KwokRun: "kwok@v0.8.0-tuned", Ratio: 1.5},
		{Part: "anonymous RSS at peak RSS (MiB)", Nodelet: 400, Kwok: 390, KwokRun: "kwok@v0.8.0-tuned", Ratio: 400.0 / 390},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("differences =\n%+v\nwant\n%+v", got, want)
	}

	// No tuned run: kwok at its defaults; heap in use lacking on it.
	got = differences([]result{nodelet, kwok})
	var parts []string
	for _, d := range got {
		parts = append(parts, fmt.Sprintf("%s %.2f", d.Part, d.Ratio))
	}
	wantParts := []string{"goroutines at pod peak 30.00", "alloc rate over the pod phase (MiB/s) 6.00",
		"file-backed RSS at peak RSS (MiB) 1.00", "anonymous RSS at peak RSS (MiB) 0.53"}
	if !reflect.DeepEqual(parts, wantParts) {
		t.Errorf("differences without a tuned run = %q, want %q", parts, wantParts)
	}

	if got := differences([]result{kwok, tuned}); got != nil {
		t.Errorf("differences without nodelet = %+v, want none", got)
	}
	if got := differences([]result{nodelet}); got != nil {
		t.Errorf("differences without kwok = %+v, want none", got)
	}
	var b strings.Builder
	printDifferences(&b, []result{nodelet, kwok, tuned})
	if !strings.Contains(b.String(), "where nodelet and kwok@v0.8.0-tuned differ most") {
		t.Errorf("printDifferences:\n%s", b.String())
	}
}

func TestPodPhase(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 1, 0, 0, 0, time.UTC)
	start := &runtimeMark{at: t0, rt: goRuntime{allocMiB: 100, goroutines: 50}}
	end := &runtimeMark{at: t0.Add(20 * time.Second), rt: goRuntime{allocMiB: 1100, goroutines: 900, heapInUseMiB: 120}}
	want := &podPhaseRuntime{AllocMiBPerSec: 50, Goroutines: 900, HeapInUseMiB: 120}
	if got := podPhase(start, end); !reflect.DeepEqual(got, want) {
		t.Errorf("podPhase = %+v, want %+v", got, want)
	}
	if got := podPhase(nil, end); got != nil {
		t.Errorf("podPhase without a start = %+v, want nil", got)
	}
}

// The figures come from Go's collector as both nodelet's kubelet API and
// kwok's server serve it.
func TestAgentProbeRuntime(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, `# TYPE go_goroutines gauge
go_goroutines 1234
# TYPE go_memstats_alloc_bytes_total counter
go_memstats_alloc_bytes_total 1.073741824e+09
go_memstats_heap_inuse_bytes 1.048576e+08
`)
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	port, _ := strconv.Atoi(u.Port())
	a := agentProbe{port: port, client: srv.Client()}
	rt, err := a.runtime(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if want := (goRuntime{goroutines: 1234, heapInUseMiB: 100, allocMiB: 1024}); rt != want {
		t.Errorf("runtime = %+v, want %+v", rt, want)
	}
}
