package main

// nodelet and kwok measured the same way, from what both serve: the Go
// runtime's figures over the pod burst (nodelet's kubelet API and kwok's
// server both serve Go's collector at /metrics), and, after each scale's
// table, where nodelet and the best kwok run differ most.

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// podPhaseRuntime is what the agent's Go runtime did over the pod phase,
// from the first create to all Running: how fast it allocated, and its
// goroutines and heap in use at the end, the pods' peak.
type podPhaseRuntime struct {
	AllocMiBPerSec float64 `json:"allocMiBPerSecond"`
	Goroutines     int     `json:"goroutinesAtPodPeak"`
	HeapInUseMiB   float64 `json:"heapInUseMiBAtPodPeak"` // go_memstats_heap_inuse_bytes
}

// runtimeMark is the agent's runtime figures at one moment.
type runtimeMark struct {
	at time.Time
	rt goRuntime
}

// markRuntime reads the agent's runtime figures now; a failure is logged
// and gives nil, the other figures stand.
func (a agentProbe) markRuntime(ctx context.Context) *runtimeMark {
	rt, err := a.runtime(ctx)
	if err != nil {
		logf("%v", err)
		return nil
	}
	return &runtimeMark{at: time.Now(), rt: rt}
}

// podPhase is the runtime figures between the marks at the pod phase's
// start and end; nil when either is missing.
func podPhase(start, end *runtimeMark) *podPhaseRuntime {
	if start == nil || end == nil {
		return nil
	}
	s := end.at.Sub(start.at).Seconds()
	if s <= 0 {
		return nil
	}
	return &podPhaseRuntime{
		AllocMiBPerSec: roundTo((end.rt.allocMiB-start.rt.allocMiB)/s, 1),
		Goroutines:     end.rt.goroutines,
		HeapInUseMiB:   end.rt.heapInUseMiB,
	}
}

// difference is one part measured on nodelet and on a kwok run, and their
// ratio (nodelet / kwok).
type difference struct {
	Part    string
	Nodelet float64
	Kwok    float64
	KwokRun string
	Ratio   float64
}

// differenceParts are the parts compared, each with its unit; a getter
// says false when the result lacks it.
var differenceParts = []struct {
	name, unit string
	get        func(result) (float64, bool)
}{
	{"anonymous RSS at peak RSS", "MiB", func(r result) (float64, bool) {
		if r.Memory == nil {
			return 0, false
		}
		return r.Memory.AtPeakRSS.AnonMiB, true
	}},
	{"file-backed RSS at peak RSS", "MiB", func(r result) (float64, bool) {
		if r.Memory == nil {
			return 0, false
		}
		return r.Memory.AtPeakRSS.FileMiB, true
	}},
	{"heap in use at pod peak (profile)", "MiB", func(r result) (float64, bool) {
		if r.HeapAtPodPeak == nil {
			return 0, false
		}
		return r.HeapAtPodPeak.InUseMiB, true
	}},
	{"alloc rate over the pod phase", "MiB/s", func(r result) (float64, bool) {
		if r.PodPhaseRuntime == nil {
			return 0, false
		}
		return r.PodPhaseRuntime.AllocMiBPerSec, true
	}},
	{"goroutines at pod peak", "", func(r result) (float64, bool) {
		if r.PodPhaseRuntime == nil {
			return 0, false
		}
		return float64(r.PodPhaseRuntime.Goroutines), true
	}},
}

// nodeletRun is the first result that is not kwok's: nodelet or
// nodelet-takeover, the table's first column.
func nodeletRun(results []result) (result, bool) {
	for _, r := range results {
		if _, ok := parseKwokAgent(r.Agent); !ok {
			return r, true
		}
	}
	return result{}, false
}

// bestKwokRun is the kwok run of a scale's results nodelet is compared
// with: the first tuned one (kwok at its best), else the first at its
// defaults; false when no kwok ran.
func bestKwokRun(results []result) (result, bool) {
	var fallback *result
	for i, r := range results {
		k, ok := parseKwokAgent(r.Agent)
		if !ok {
			continue
		}
		if k.tuned {
			return r, true
		}
		if fallback == nil {
			fallback = &results[i]
		}
	}
	if fallback == nil {
		return result{}, false
	}
	return *fallback, true
}

// differences compares, part by part, nodeletRun with bestKwokRun, largest ratio first; a part either lacks, or kwok's is 0, is
// left out.
func differences(results []result) []difference {
	ours, okOurs := nodeletRun(results)
	kwok, okKwok := bestKwokRun(results)
	if !okOurs || !okKwok {
		return nil
	}
	var out []difference
	for _, p := range differenceParts {
		a, okA := p.get(ours)
		b, okB := p.get(kwok)
		if !okA || !okB || b == 0 {
			continue
		}
		name := p.name
		if p.unit != "" {
			name += " (" + p.unit + ")"
		}
		out = append(out, difference{Part: name, Nodelet: a, Kwok: b, KwokRun: kwok.Agent, Ratio: a / b})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Ratio > out[j].Ratio })
	return out
}

// printDifferences prints where nodelet and the best kwok run differ
// most, after a scale's table.
func printDifferences(w io.Writer, results []result) {
	d := differences(results)
	if len(d) == 0 {
		return
	}
	r, _ := nodeletRun(results)
	ours := r.Agent
	fmt.Fprintf(w, "\nwhere %s and %s differ most (%s / kwok):\n", ours, d[0].KwokRun, ours)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "part\t%s\t%s\tratio\t\n", ours, d[0].KwokRun)
	for _, e := range d {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f\t\n", e.Part, formatFigure(e.Nodelet), formatFigure(e.Kwok), e.Ratio)
	}
	tw.Flush()
}

// formatFigure prints a figure with a decimal only when it has one.
func formatFigure(v float64) string {
	s := fmt.Sprintf("%.1f", v)
	return strings.TrimSuffix(s, ".0")
}
