package main

// The table of one scale: each agent's figures side by side, with the
// first agent's ratio to each other one.

import (
	"fmt"
	"math"
	"os"
	"text/tabwriter"
)

func printTable(w *os.File, results []result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	header := "metric\t"
	for _, r := range results {
		header += r.Agent + "\t"
	}
	for _, r := range results[1:] {
		header += results[0].Agent + "/" + r.Agent + "\t"
	}
	fmt.Fprintln(tw, header)
	rows := []struct {
		name string
		get  func(result) float64
		f    string
	}{
		{"nodes Ready (s)", func(r result) float64 { return r.NodesReadySeconds }, "%.2f"},
		{"pod create→Running p50 (s)", func(r result) float64 { return r.PodRunningP50 }, "%.3f"},
		{"pod create→Running p99 (s)", func(r result) float64 { return r.PodRunningP99 }, "%.3f"},
		{"last create→all Running (s)", func(r result) float64 { return r.LastCreateToRunning }, "%.3f"},
		{"last delete→all gone (s)", func(r result) float64 { return r.LastDeleteToGone }, "%.3f"},
		{"first delete→all gone (s)", func(r result) float64 { return r.DeletePhase }, "%.3f"},
		{"agent CPU (s)", func(r result) float64 { return r.AgentCPUSeconds }, "%.1f"},
		{"agent peak RSS (MiB)", func(r result) float64 { return r.AgentPeakRSSMiB }, "%.0f"},
		{"sampled peak RSS (MiB)", memoryFigure(func(m memSplit) float64 { return m.RSSMiB }), "%.0f"},
		{"  anonymous at it (MiB)", memoryFigure(func(m memSplit) float64 { return m.AnonMiB }), "%.0f"},
		{"  file-backed at it (MiB)", memoryFigure(func(m memSplit) float64 { return m.FileMiB }), "%.0f"},
		{"heap in use at pod peak (MiB)", func(r result) float64 {
			if r.HeapAtPodPeak == nil {
				return math.NaN()
			}
			return r.HeapAtPodPeak.InUseMiB
		}, "%.1f"},
		{"steady API writes/node/min", func(r result) float64 { return r.WritesPerNodeMinute }, "%.2f"},
		{"steady lease lapses", func(r result) float64 { return float64(r.LeaseLapses) }, "%.0f"},
		{"apiserver steady CPU (cores)", func(r result) float64 { return r.APIServerCPUShare }, "%.2f"},
		{"pod phase: apiserver CPU (cores)", func(r result) float64 { return r.PodPhaseAPIServerCores }, "%.2f"},
		{"pod phase: agent CPU (cores)", func(r result) float64 { return r.PodPhaseAgentCores }, "%.2f"},
		{"pod phase: pod writes/s", func(r result) float64 { return r.PodPhaseWritesPerSec }, "%.0f"},
		{"pod phase: pod write latency (ms)", func(r result) float64 { return r.PodPhaseWriteLatencyMs }, "%.1f"},
		{"pod phase: agent alloc (MiB/s)", runtimeFigure(func(p podPhaseRuntime) float64 { return p.AllocMiBPerSec }), "%.1f"},
		{"pod peak: agent goroutines", runtimeFigure(func(p podPhaseRuntime) float64 { return float64(p.Goroutines) }), "%.0f"},
		{"delete phase: status writes/pod", func(r result) float64 { return r.DeleteStatusWritesPerPod }, "%.3f"},
		{"delete phase: agent deletes/pod", func(r result) float64 { return r.DeleteDeletesPerPod }, "%.3f"},
		{"delete phase: deletes 404/pod", func(r result) float64 { return r.DeleteNotFoundPerPod }, "%.3f"},
	}
	for _, row := range rows {
		line := row.name + "\t"
		for _, r := range results {
			if v := row.get(r); math.IsNaN(v) {
				line += "-\t"
			} else {
				line += fmt.Sprintf(row.f, v) + "\t"
			}
		}
		for _, r := range results[1:] {
			if a, b := row.get(results[0]), row.get(r); b != 0 && !math.IsNaN(a) && !math.IsNaN(b) {
				line += fmt.Sprintf("%.2f\t", a/b)
			} else {
				line += "-\t"
			}
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
}

// memoryFigure is a table row's figure of the sample at the agent's
// peak RSS, NaN (printed "-") when none was taken.
func memoryFigure(get func(memSplit) float64) func(result) float64 {
	return func(r result) float64 {
		if r.Memory == nil {
			return math.NaN()
		}
		return get(r.Memory.AtPeakRSS)
	}
}

// runtimeFigure is a table row's figure of the agent's Go runtime over
// the pod phase, NaN (printed "-") when it was not read.
func runtimeFigure(get func(podPhaseRuntime) float64) func(result) float64 {
	return func(r result) float64 {
		if r.PodPhaseRuntime == nil {
			return math.NaN()
		}
		return get(*r.PodPhaseRuntime)
	}
}
