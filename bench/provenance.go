package main

// Provenance: what every results file records of the run that wrote it —
// the commit, whether the tree was clean, the date and the machine — and
// the line every mode prints first, so that a figure can always be traced
// to the code and the machine that made it.

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

// provenance is where and from what a benchmark ran.
type provenance struct {
	// Commit is git rev-parse HEAD of the working directory, or "unknown"
	// with GitError saying why.
	Commit string `json:"commit"`
	// TreeClean says git status --porcelain printed nothing; ChangedPaths
	// is what it printed otherwise (at most maxChangedPaths lines).
	TreeClean        bool     `json:"treeClean"`
	ChangedPathCount int      `json:"changedPathCount,omitempty"`
	ChangedPaths     []string `json:"changedPaths,omitempty"`
	GitError         string   `json:"gitError,omitempty"`
	// Date is when the run started, UTC, RFC 3339.
	Date    string      `json:"date"`
	Machine machineInfo `json:"machine"`
}

// machineInfo is the machine a benchmark ran on, without its name.
type machineInfo struct {
	Cores     int     `json:"cores"`
	MemoryGiB float64 `json:"memoryGiB"`
	Kernel    string  `json:"kernel"`
	CPUModel  string  `json:"cpuModel"`
	GoVersion string  `json:"goVersion"`
}

// maxChangedPaths bounds the changed paths a results file lists.
const maxChangedPaths = 50

// collectProvenance reads the commit and the tree's state from git in the
// working directory, and the machine from /proc. What it cannot read is
// recorded as unknown, never an error: a benchmark runs anyway.
func collectProvenance(start time.Time) provenance {
	p := provenance{Commit: "unknown", Date: start.UTC().Format(time.RFC3339)}
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err == nil {
		var status []byte
		if status, err = exec.Command("git", "status", "--porcelain").Output(); err == nil {
			p.Commit = strings.TrimSpace(string(head))
			p.ChangedPathCount, p.ChangedPaths = parsePorcelain(string(status))
			p.TreeClean = p.ChangedPathCount == 0
		}
	}
	if err != nil {
		p.GitError = gitErrorText(err)
	}
	cpuinfo, _ := os.ReadFile("/proc/cpuinfo")
	meminfo, _ := os.ReadFile("/proc/meminfo")
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	p.Machine = machineInfo{GoVersion: runtime.Version(), Kernel: strings.TrimSpace(string(kernel))}
	p.Machine.Cores, p.Machine.CPUModel = parseCPUInfo(string(cpuinfo))
	p.Machine.MemoryGiB = parseMemTotalGiB(string(meminfo))
	return p
}

// gitErrorText is a git failure as a results file records it: what git
// said on stderr if it said anything.
func gitErrorText(err error) string {
	var exit *exec.ExitError
	if errors.As(err, &exit) && len(exit.Stderr) > 0 {
		return fmt.Sprintf("git: %s", strings.TrimSpace(string(exit.Stderr)))
	}
	return fmt.Sprintf("git: %v", err)
}

// parsePorcelain reads git status --porcelain: how many paths it lists
// (none for a clean tree) and the first maxChangedPaths of its lines.
func parsePorcelain(status string) (count int, changed []string) {
	for _, line := range strings.Split(status, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		if count++; count <= maxChangedPaths {
			changed = append(changed, strings.TrimRight(line, " \r"))
		}
	}
	return count, changed
}

// parseCPUInfo reads the number of processors and the first model name of
// /proc/cpuinfo.
func parseCPUInfo(cpuinfo string) (cores int, model string) {
	for _, line := range strings.Split(cpuinfo, "\n") {
		key, value, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(key) {
		case "processor":
			cores++
		case "model name":
			if model == "" {
				model = strings.TrimSpace(value)
			}
		}
	}
	return cores, model
}

// parseMemTotalGiB reads MemTotal of /proc/meminfo in GiB, to a tenth.
func parseMemTotalGiB(meminfo string) float64 {
	for _, line := range strings.Split(meminfo, "\n") {
		if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			var kb float64
			fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(v), "kB"), &kb)
			return roundTo(kb/(1<<20), 1)
		}
	}
	return 0
}

// line is the provenance as the first line of a mode's output.
func (p provenance) line() string {
	tree := "clean tree"
	switch {
	case p.GitError != "":
		tree = p.GitError
	case !p.TreeClean:
		tree = fmt.Sprintf("tree NOT clean: %d changed paths", p.ChangedPathCount)
	}
	m := p.Machine
	model := m.CPUModel
	if model == "" {
		model = "unknown CPU"
	}
	return fmt.Sprintf("bench: commit %s (%s), %s, %d cores (%s), %.1f GiB, kernel %s, %s",
		p.Commit, tree, p.Date, m.Cores, model, m.MemoryGiB, m.Kernel, m.GoVersion)
}

// writeResults writes a results file: the provenance and fields (the
// results, and what else the mode records), indented JSON.
func writeResults(path string, p provenance, fields map[string]any) error {
	out := map[string]any{"provenance": p}
	maps.Copy(out, fields)
	data, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	fmt.Printf("\nwritten to %s\n", path)
	return nil
}
