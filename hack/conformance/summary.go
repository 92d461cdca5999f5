package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/nodelet/nodelet/test/conformance"
)

func (r report) save(path string) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

// machine describes this machine for the summary: CPUs, memory, kernel.
func machine() string {
	mem := ""
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		if _, err := fmt.Sscanf(string(data), "MemTotal: %d kB", &kb); err == nil {
			mem = fmt.Sprintf(", %d GiB", (kb+512*1024)/(1024*1024))
		}
	}
	model := ""
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = " " + strings.TrimSpace(v)
				break
			}
		}
	}
	return fmt.Sprintf("%d cores%s%s", runtime.NumCPU(), model, mem)
}

// writeSummary writes out/summary.md from every provider's last report
// under out: a table of the runs, passed/total per group of specs for
// each provider, what failed and what was left behind.
func writeSummary(out string) error {
	paths, _ := filepath.Glob(filepath.Join(out, "*", "report.json"))
	var reports []report
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		var r report
		if err := json.Unmarshal(data, &r); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		reports = append(reports, r)
	}
	sort.Slice(reports, func(i, j int) bool { return reports[i].Provider < reports[j].Provider })
	var b strings.Builder
	fmt.Fprintln(&b, "# Node conformance")
	fmt.Fprintln(&b)
	fmt.Fprintln(&b, "| provider | passed | failed | run | duration | pod start p50 | pod start p99 | date | machine |")
	fmt.Fprintln(&b, "|---|---|---|---|---|---|---|---|---|")
	for _, r := range reports {
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %s | %s | %s | %s | %s |\n", r.Provider, r.Summary.Passed, r.Summary.Failed,
			r.Summary.Passed+r.Summary.Failed, r.Summary.Duration.Round(time.Second), r.Starts.P50.Round(100*time.Millisecond),
			r.Starts.P99.Round(100*time.Millisecond), r.Date.Format("2006-01-02"), r.Machine)
	}
	writeGroups(&b, reports)
	for _, r := range reports {
		if f := r.Summary.Failures(); len(f) > 0 {
			fmt.Fprintf(&b, "\n## %s: failed\n\n", r.Provider)
			for _, name := range f {
				fmt.Fprintf(&b, "- %s\n", name)
			}
		}
		if len(r.Leaks) > 0 {
			fmt.Fprintf(&b, "\n## %s: left behind\n\n", r.Provider)
			for _, l := range r.Leaks {
				fmt.Fprintf(&b, "- %s\n", l)
			}
		}
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, "summary.md"), []byte(b.String()), 0o644)
}

// writeGroups writes passed/run per group of specs, a column per provider.
func writeGroups(b *strings.Builder, reports []report) {
	type count struct{ passed, run int }
	groups := map[string]map[string]*count{}
	for _, r := range reports {
		for _, res := range r.Summary.Results {
			if res.Status == "skipped" {
				continue
			}
			g := conformance.Group(res.Name)
			if groups[g] == nil {
				groups[g] = map[string]*count{}
			}
			c := groups[g][r.Provider]
			if c == nil {
				c = &count{}
				groups[g][r.Provider] = c
			}
			c.run++
			if res.Status == "passed" {
				c.passed++
			}
		}
	}
	names := make([]string, 0, len(groups))
	for g := range groups {
		names = append(names, g)
	}
	sort.Strings(names)
	fmt.Fprintln(b)
	fmt.Fprint(b, "| group |")
	for _, r := range reports {
		fmt.Fprintf(b, " %s |", r.Provider)
	}
	fmt.Fprint(b, "\n|---|")
	for range reports {
		fmt.Fprint(b, "---|")
	}
	fmt.Fprintln(b)
	for _, g := range names {
		fmt.Fprintf(b, "| %s |", g)
		for _, r := range reports {
			if c := groups[g][r.Provider]; c != nil {
				fmt.Fprintf(b, " %d/%d |", c.passed, c.run)
			} else {
				fmt.Fprint(b, " – |")
			}
		}
		fmt.Fprintln(b)
	}
}
