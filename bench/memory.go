package main

// An agent's resident memory split by what backs it, sampled from
// /proc/PID/smaps_rollup through the agent's whole run, so that nodelet
// and kwok are measured the same way: the peak RSS, and how much of it was
// anonymous (the Go heap, stacks, the runtime's own) and how much
// file-backed (the mapped binary and libraries).

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// smapsEvery is how often the bench samples an agent's smaps_rollup.
const smapsEvery = time.Second

// memSplit is one reading of a process's resident memory, in MiB. The
// kernel's smaps_rollup (Documentation/filesystems/proc.rst) gives Rss,
// Anonymous (memory that belongs to no file) and Pss_Shmem (shared
// memory, proportionally: it has no Rss_Shmem); the rest of Rss is
// file-backed. For an agent that maps no shared memory, Pss_Shmem is 0 and
// FileMiB is exactly Rss − Anonymous.
type memSplit struct {
	RSSMiB   float64 `json:"rssMiB"`
	AnonMiB  float64 `json:"anonymousMiB"`
	FileMiB  float64 `json:"fileBackedMiB"`
	ShmemMiB float64 `json:"shmemMiB"`
}

// parseSmapsRollup reads the text of /proc/PID/smaps_rollup.
func parseSmapsRollup(text string) (memSplit, error) {
	var rss, anon, shmem int64
	hasRSS := false
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		var field *int64
		switch name {
		case "Rss":
			field, hasRSS = &rss, true
		case "Anonymous":
			field = &anon
		case "Pss_Shmem":
			field = &shmem
		default:
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
		if err != nil {
			return memSplit{}, fmt.Errorf("smaps_rollup: %s: %w", name, err)
		}
		*field = kb
	}
	if err := sc.Err(); err != nil {
		return memSplit{}, fmt.Errorf("smaps_rollup: %w", err)
	}
	if !hasRSS {
		return memSplit{}, fmt.Errorf("smaps_rollup: no Rss")
	}
	mib := func(kb int64) float64 { return roundTo(float64(kb)/1024, 1) }
	return memSplit{RSSMiB: mib(rss), AnonMiB: mib(anon), FileMiB: mib(max(rss-anon-shmem, 0)), ShmemMiB: mib(shmem)}, nil
}

// memoryPeak is what the samples of a run came to: the sample at the
// highest RSS, and the highest of each part on its own (which may come
// from other samples).
type memoryPeak struct {
	AtPeakRSS   memSplit `json:"atPeakRSS"`
	PeakAnonMiB float64  `json:"peakAnonymousMiB"`
	PeakFileMiB float64  `json:"peakFileBackedMiB"`
	Samples     int      `json:"samples"`
	EverySecond float64  `json:"everySeconds"`
}

// observe is p with one more sample s.
func (p memoryPeak) observe(s memSplit) memoryPeak {
	if p.Samples == 0 || s.RSSMiB > p.AtPeakRSS.RSSMiB {
		p.AtPeakRSS = s
	}
	p.PeakAnonMiB = max(p.PeakAnonMiB, s.AnonMiB)
	p.PeakFileMiB = max(p.PeakFileMiB, s.FileMiB)
	p.Samples++
	return p
}

// smapsSampler samples one process's smaps_rollup every so often until
// its Run's context ends, keeping the peaks.
type smapsSampler struct {
	pid   int
	every time.Duration

	mu   sync.Mutex
	peak memoryPeak
}

func newSmapsSampler(pid int, every time.Duration) *smapsSampler {
	return &smapsSampler{pid: pid, every: every, peak: memoryPeak{EverySecond: every.Seconds()}}
}

// Run samples until ctx ends; a process gone or a file unreadable ends
// nothing, the next tick tries again.
func (s *smapsSampler) Run(ctx context.Context) error {
	t := time.NewTicker(s.every)
	defer t.Stop()
	for {
		s.sample()
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (s *smapsSampler) sample() {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", s.pid))
	if err != nil {
		return
	}
	m, err := parseSmapsRollup(string(data))
	if err != nil {
		return
	}
	s.mu.Lock()
	s.peak = s.peak.observe(m)
	s.mu.Unlock()
}

// Peak is the peaks so far, with one sample taken now; nil when no sample
// could be read (no smaps_rollup: a kernel before 4.14).
func (s *smapsSampler) Peak() *memoryPeak {
	s.sample()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.peak.Samples == 0 {
		return nil
	}
	p := s.peak
	return &p
}

// startSmapsSampler runs a sampler of pid until the returned stop, which
// waits for it to end.
func startSmapsSampler(pid int) (*smapsSampler, func()) {
	s := newSmapsSampler(pid, smapsEvery)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(ctx) }()
	return s, func() { cancel(); <-done }
}
