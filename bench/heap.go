package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/pprof/profile"
)

// heapTop is how many entries of each ranking a heap summary keeps.
const heapTop = 10

// heapSummary is what an agent's heap profile says of its memory in use:
// the total, and the functions and lines that allocated most of it (flat,
// as go tool pprof -top and -top -lines rank them).
type heapSummary struct {
	InUseMiB   float64     `json:"inuseMiB"`
	Profile    string      `json:"profile,omitempty"` // the file it was read from
	ByFunction []heapEntry `json:"byFunction"`
	ByLine     []heapEntry `json:"byLine"`
}

// heapEntry is one function's or line's share of the memory in use.
type heapEntry struct {
	Name    string  `json:"name"`
	MiB     float64 `json:"mib"`
	Percent float64 `json:"percent"`
}

// peakHeap takes the agent's heap profile as it is (the figures of its
// last garbage collection: no collection is forced), saves it to path and
// summarizes it; a failure is logged and gives nil, the other figures
// stand.
func (a agentProbe) peakHeap(ctx context.Context, path string) *heapSummary {
	data, err := a.heapProfile(ctx, false)
	if err == nil {
		err = writeProfile(path, data)
	}
	var s heapSummary
	if err == nil {
		s, err = summarizeHeap(bytes.NewReader(data), heapTop)
	}
	if err != nil {
		logf("heap profile: %v", err)
		return nil
	}
	s.Profile = path
	return &s
}

// heapProfile is the agent's heap profile from its kubelet API, after a
// garbage collection when gc is set.
func (a agentProbe) heapProfile(ctx context.Context, gc bool) ([]byte, error) {
	path := "/debug/pprof/heap"
	if gc {
		path += "?gc=1"
	}
	return agentGet(ctx, a.client, a.port, path)
}

// cpuProfileMax bounds the CPU profile the bench takes: the agent's
// client times out after a minute.
const cpuProfileMax = 50 * time.Second

// saveCPUProfile takes the agent's CPU profile over d and saves it to
// path; a failure is logged, the other figures stand.
func (a agentProbe) saveCPUProfile(ctx context.Context, d time.Duration, path string) {
	data, err := agentGet(ctx, a.client, a.port, fmt.Sprintf("/debug/pprof/profile?seconds=%d", int(d.Seconds())))
	if err == nil {
		err = writeProfile(path, data)
	}
	if err != nil {
		logf("CPU profile: %v", err)
		return
	}
	logf("CPU profile of %s: %s (go tool pprof -top %s)", d, path, path)
}

func writeProfile(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

// profilePath is where the profile of a kind (heap, cpu) of agent at a
// scale goes: beside the results file out.
func profilePath(out, kind, agent string, nodes, pods int) string {
	return fmt.Sprintf("%s-%s-%s-%d-%d.pb.gz", strings.TrimSuffix(out, filepath.Ext(out)), kind, agent, nodes, pods)
}

// summarizeHeap reads a Go heap profile and ranks, by inuse_space, the
// functions and the lines that allocated what is in use (the innermost
// frame of each allocation, inlined ones included), top of each.
func summarizeHeap(r io.Reader, top int) (heapSummary, error) {
	var s heapSummary
	p, err := profile.Parse(r)
	if err != nil {
		return s, fmt.Errorf("parse heap profile: %w", err)
	}
	idx := -1
	for i, st := range p.SampleType {
		if st.Type == "inuse_space" {
			idx = i
		}
	}
	if idx < 0 {
		return s, fmt.Errorf("heap profile has no inuse_space")
	}
	byFunction, byLine := map[string]int64{}, map[string]int64{}
	var total int64
	for _, sample := range p.Sample {
		v := sample.Value[idx]
		total += v
		fn, line := "?", "?"
		if len(sample.Location) > 0 && len(sample.Location[0].Line) > 0 {
			l := sample.Location[0].Line[0]
			if l.Function != nil {
				fn = l.Function.Name
				line = fmt.Sprintf("%s %s:%d", fn, filepath.Base(l.Function.Filename), l.Line)
			}
		}
		byFunction[fn] += v
		byLine[line] += v
	}
	s.InUseMiB = roundTo(float64(total)/(1<<20), 1)
	s.ByFunction = rankHeap(byFunction, total, top)
	s.ByLine = rankHeap(byLine, total, top)
	return s, nil
}

// rankHeap is the top entries of inUse (bytes by name), largest first,
// leaving out what holds nothing.
func rankHeap(inUse map[string]int64, total int64, top int) []heapEntry {
	names := make([]string, 0, len(inUse))
	for name, n := range inUse {
		if n > 0 { // allocated, and all of it freed since
			names = append(names, name)
		}
	}
	sort.Slice(names, func(i, j int) bool {
		if inUse[names[i]] != inUse[names[j]] {
			return inUse[names[i]] > inUse[names[j]]
		}
		return names[i] < names[j]
	})
	out := []heapEntry{}
	for _, name := range names[:min(top, len(names))] {
		e := heapEntry{Name: name, MiB: roundTo(float64(inUse[name])/(1<<20), 2)}
		if total > 0 {
			e.Percent = roundTo(100*float64(inUse[name])/float64(total), 1)
		}
		out = append(out, e)
	}
	return out
}

// printHeapSummary prints an agent's heap summary as two rankings.
func printHeapSummary(w io.Writer, agent, when string, s *heapSummary) {
	fmt.Fprintf(w, "\n%s heap in use %s: %.1f MiB (%s)\n", agent, when, s.InUseMiB, s.Profile)
	for _, ranking := range []struct {
		title   string
		entries []heapEntry
	}{{"by function", s.ByFunction}, {"by line", s.ByLine}} {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "  MiB\t%%\t%s\n", ranking.title)
		for _, e := range ranking.entries {
			fmt.Fprintf(tw, "  %.2f\t%.1f\t%s\n", e.MiB, e.Percent, e.Name)
		}
		tw.Flush()
	}
}
