package main

import (
	"os"
	"testing"
)

// A Go agent's smaps_rollup (Linux 6.x): 300 MiB resident, 256 of them
// anonymous, 2 MiB of shared memory.
const smapsRollupText = `558bcdd95000-7ffd18806000 ---p 00000000 00:00 0                          [rollup]
Rss:              307200 kB
Pss:              300000 kB
Pss_Dirty:        262144 kB
Pss_Anon:         262144 kB
Pss_File:          35808 kB
Pss_Shmem:          2048 kB
Shared_Clean:      12000 kB
Shared_Dirty:          0 kB
Private_Clean:     33056 kB
Private_Dirty:    262144 kB
Referenced:       307200 kB
Anonymous:        262144 kB
KSM:                   0 kB
LazyFree:              0 kB
AnonHugePages:         0 kB
ShmemPmdMapped:        0 kB
FilePmdMapped:         0 kB
Shared_Hugetlb:        0 kB
Private_Hugetlb:       0 kB
Swap:                  0 kB
SwapPss:               0 kB
Locked:                0 kB
`

func TestParseSmapsRollup(t *testing.T) {
	got, err := parseSmapsRollup(smapsRollupText)
	if err != nil {
		t.Fatal(err)
	}
	want := memSplit{RSSMiB: 300, AnonMiB: 256, FileMiB: 42, ShmemMiB: 2}
	if got != want {
		t.Errorf("parseSmapsRollup = %+v, want %+v", got, want)
	}
	if _, err := parseSmapsRollup("Pss: 12 kB\n"); err == nil {
		t.Error("parseSmapsRollup without Rss: no error")
	}
	if _, err := parseSmapsRollup("Rss: twelve kB\n"); err == nil {
		t.Error("parseSmapsRollup of a bad Rss: no error")
	}
}

func TestMemoryPeakObserve(t *testing.T) {
	var p memoryPeak
	for _, s := range []memSplit{
		{RSSMiB: 100, AnonMiB: 60, FileMiB: 40},
		{RSSMiB: 300, AnonMiB: 250, FileMiB: 50}, // the peak RSS
		{RSSMiB: 280, AnonMiB: 200, FileMiB: 80}, // file-backed's own peak
		{RSSMiB: 200, AnonMiB: 150, FileMiB: 50},
	} {
		p = p.observe(s)
	}
	want := memoryPeak{AtPeakRSS: memSplit{RSSMiB: 300, AnonMiB: 250, FileMiB: 50}, PeakAnonMiB: 250, PeakFileMiB: 80, Samples: 4}
	if p != want {
		t.Errorf("observe = %+v, want %+v", p, want)
	}
}

func TestSmapsSamplerOfThisProcess(t *testing.T) {
	if _, err := os.Stat("/proc/self/smaps_rollup"); err != nil {
		t.Skip("no smaps_rollup:", err)
	}
	s, stop := startSmapsSampler(os.Getpid())
	p := s.Peak()
	stop()
	if p == nil || p.Samples == 0 || p.AtPeakRSS.RSSMiB <= 0 || p.AtPeakRSS.AnonMiB <= 0 {
		t.Errorf("Peak of this process = %+v", p)
	}
}
