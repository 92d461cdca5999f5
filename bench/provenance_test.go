package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParsePorcelain(t *testing.T) {
	if n, paths := parsePorcelain(""); n != 0 || paths != nil {
		t.Errorf("an empty status: %d, %q; want a clean tree", n, paths)
	}
	n, paths := parsePorcelain(" M bench/main.go\n?? bench/new.go\n")
	if n != 2 || len(paths) != 2 || paths[0] != " M bench/main.go" || paths[1] != "?? bench/new.go" {
		t.Errorf("two changes: %d, %q", n, paths)
	}
	var many strings.Builder
	for i := range maxChangedPaths + 7 {
		fmt.Fprintf(&many, "?? f%d\n", i)
	}
	if n, paths := parsePorcelain(many.String()); n != maxChangedPaths+7 || len(paths) != maxChangedPaths {
		t.Errorf("%d changes: counted %d, listed %d; want every one counted, %d listed", maxChangedPaths+7, n, len(paths), maxChangedPaths)
	}
}

func TestParseMachine(t *testing.T) {
	cpuinfo := "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\n\nprocessor\t: 1\nmodel name\t: AMD EPYC 7B13\n"
	if cores, model := parseCPUInfo(cpuinfo); cores != 2 || model != "AMD EPYC 7B13" {
		t.Errorf("parseCPUInfo = %d, %q; want 2, AMD EPYC 7B13", cores, model)
	}
	if got := parseMemTotalGiB("MemTotal:       24632068 kB\nMemFree:         1 kB\n"); got != 23.5 {
		t.Errorf("parseMemTotalGiB = %v, want 23.5", got)
	}
	if got := parseMemTotalGiB("nothing"); got != 0 {
		t.Errorf("parseMemTotalGiB without MemTotal = %v, want 0", got)
	}
}

func TestProvenanceLine(t *testing.T) {
	p := provenance{Commit: "2cb583e0000000000000000000000000000000aa", TreeClean: true, Date: "2026-11-26T19:30:00Z",
		Machine: machineInfo{Cores: 2, MemoryGiB: 23.5, Kernel: "6.18.0", CPUModel: "AMD EPYC 7B13", GoVersion: "go1.26.8"}}
	want := "bench: commit 2cb583e0000000000000000000000000000000aa (clean tree), 2026-11-26T19:30:00Z, 2 cores (AMD EPYC 7B13), 23.5 GiB, kernel 6.18.0, go1.26.8"
	if got := p.line(); got != want {
		t.Errorf("line() =\n%s\nwant\n%s", got, want)
	}
	p.TreeClean, p.ChangedPathCount = false, 3
	if got := p.line(); !strings.Contains(got, "(tree NOT clean: 3 changed paths)") {
		t.Errorf("a changed tree: %s", got)
	}
	p.Commit, p.GitError = "unknown", "git: not a git repository"
	if got := p.line(); !strings.Contains(got, "commit unknown (git: not a git repository)") {
		t.Errorf("without git: %s", got)
	}
}

// TestWriteResults: a results file has the provenance beside the mode's
// fields, under the names docs/benchmarks.md gives.
func TestWriteResults(t *testing.T) {
	path := filepath.Join(t.TempDir(), "results.json")
	p := provenance{Commit: "abc", TreeClean: true, Date: time.Date(2026, 11, 26, 19, 30, 0, 0, time.UTC).Format(time.RFC3339),
		Machine: machineInfo{Cores: 2, MemoryGiB: 23.5, Kernel: "6.18.0", CPUModel: "AMD EPYC", GoVersion: "go1.26.8"}}
	if err := writeResults(path, p, map[string]any{"results": []int{1}}); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Provenance map[string]any `json:"provenance"`
		Results    []int          `json:"results"`
	}
	if err := json.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Results) != 1 {
		t.Errorf("results %v, want [1]: %s", file.Results, data)
	}
	for _, key := range []string{"commit", "treeClean", "date", "machine"} {
		if _, ok := file.Provenance[key]; !ok {
			t.Errorf("provenance has no %s: %s", key, data)
		}
	}
	m, _ := file.Provenance["machine"].(map[string]any)
	for _, key := range []string{"cores", "memoryGiB", "kernel", "cpuModel", "goVersion"} {
		if _, ok := m[key]; !ok {
			t.Errorf("machine has no %s: %s", key, data)
		}
	}
}

// TestCollectProvenance reads this machine and this repository: a commit
// of 40 hex digits (or why not), a date that parses, cores and a kernel.
func TestCollectProvenance(t *testing.T) {
	p := collectProvenance(time.Now())
	if p.GitError == "" && len(p.Commit) != 40 {
		t.Errorf("commit %q is not a hash, and no git error", p.Commit)
	}
	if _, err := time.Parse(time.RFC3339, p.Date); err != nil || !strings.HasSuffix(p.Date, "Z") {
		t.Errorf("date %q is not RFC 3339 in UTC (%v)", p.Date, err)
	}
	if p.Machine.Cores < 1 || p.Machine.Kernel == "" || p.Machine.MemoryGiB <= 0 || p.Machine.GoVersion == "" {
		t.Errorf("machine %+v", p.Machine)
	}
}
