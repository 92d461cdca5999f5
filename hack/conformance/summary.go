package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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

// commit is the commit of the tree conformance runs in, "+dirty" when it
// has changes; "unknown" outside a git tree.
func commit(ctx context.Context) string {
	out, err := exec.CommandContext(ctx, "git", "rev-parse", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	if st, err := exec.CommandContext(ctx, "git", "status", "--porcelain", "--untracked-files=no").Output(); err != nil || len(st) > 0 {
		c += "+dirty"
	}
	return c
}

// writeSummary writes out/summary.md from every provider's last report
// under out: a table of the runs, the certification set's count
// ([Conformance] specs) and the whole selection's, passed/failed/skipped
// per group of specs for each provider, what failed and what was left
// behind.
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
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, "summary.md"), []byte(summary(reports)), 0o644)
}

// tally counts the specs of a selection by outcome.
type tally struct{ passed, failed, skipped int }

func (t *tally) add(status string) {
	switch status {
	case "passed":
		t.passed++
	case "failed":
		t.failed++
	default:
		t.skipped++
	}
}

func (t tally) String() string {
	return fmt.Sprintf("%d / %d / %d of %d", t.passed, t.failed, t.skipped, t.passed+t.failed+t.skipped)
}

var (
	selected      = regexp.MustCompile(conformance.Focus)
	nodeSelected  = regexp.MustCompile(conformance.NodeFocus)
	certification = regexp.MustCompile(`\[Conformance\]`)
)

// selection matches the specs of the report's selection.
func (r report) selection() *regexp.Regexp {
	if r.Suite == suiteNode {
		return nodeSelected
	}
	return selected
}

// summary is the Markdown of summary.md for reports.
func summary(reports []report) string {
	var b strings.Builder
	fmt.Fprintln(&b, "# Conformance")
	fmt.Fprintln(&b)
	if len(reports) > 0 && reports[0].Suite == suiteNode {
		fmt.Fprintln(&b, "The node conformance test (`e2e_node.test --conformance`). Passed / failed / skipped of the specs in each set: the certification set is every `[Conformance]` spec of the node suite, the selection every `[NodeConformance]` spec (the skipped ones among them).")
	} else {
		fmt.Fprintln(&b, "Passed / failed / skipped of the specs in each set: the certification set is every `[Conformance]` spec, the selection adds every `[NodeConformance]` spec.")
	}
	fmt.Fprintln(&b)
	fmt.Fprintln(&b, "| provider | certification set | selection | duration | pod start p50 | pod start p99 | date | commit | machine |")
	fmt.Fprintln(&b, "|---|---|---|---|---|---|---|---|---|")
	for _, r := range reports {
		var cert, sel tally
		for _, res := range r.Summary.Results {
			if certification.MatchString(res.Name) {
				cert.add(res.Status)
			}
			if r.selection().MatchString(res.Name) {
				sel.add(res.Status)
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.Provider, cert, sel,
			r.Summary.Duration.Round(time.Second), r.Starts.P50.Round(100*time.Millisecond),
			r.Starts.P99.Round(100*time.Millisecond), r.Date.Format("2006-01-02"), r.Commit, r.Machine)
	}
	writeGroups(&b, reports)
	for _, r := range reports {
		if len(r.Agents) > 0 {
			fmt.Fprintf(&b, "\n%s agents over the suite: %s.\n", r.Provider, joinUsage(r.Agents))
		}
	}
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
	return b.String()
}

// writeGroups writes passed / failed / skipped per group of the selected
// specs, a column per provider.
func writeGroups(b *strings.Builder, reports []report) {
	groups := map[string]map[string]*tally{}
	for _, r := range reports {
		for _, res := range r.Summary.Results {
			if !r.selection().MatchString(res.Name) {
				continue
			}
			g := conformance.Group(res.Name)
			if groups[g] == nil {
				groups[g] = map[string]*tally{}
			}
			t := groups[g][r.Provider]
			if t == nil {
				t = &tally{}
				groups[g][r.Provider] = t
			}
			t.add(res.Status)
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
			if t := groups[g][r.Provider]; t != nil {
				fmt.Fprintf(b, " %s |", *t)
			} else {
				fmt.Fprint(b, " – |")
			}
		}
		fmt.Fprintln(b)
	}
}

func joinUsage(us []usage) string {
	parts := make([]string, len(us))
	for i, u := range us {
		parts[i] = u.String()
	}
	return strings.Join(parts, "; ")
}
