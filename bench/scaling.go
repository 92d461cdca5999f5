package main

// The --scaling mode: what a node and a pod cost each agent. Every agent
// runs at several scales, each on a fresh control plane; once every pod is
// Running its RSS and CPU are read over a window. Per agent and figure a
// least-squares fit gives the fixed floor and the slope. Runs that all
// have the same pods/nodes ratio cannot tell a node's cost from a pod's:
// they give the cost of a node with its pods. A run at another ratio
// separates the two, and the fit over every run gives both.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// scalingOptions are the --scaling mode's settings.
type scalingOptions struct {
	run     bool
	scales  string
	window  time.Duration
	fitFile string // refit the runs of this results file instead
}

// scalingRun is one agent at one scale.
type scalingRun struct {
	Agent   string       `json:"agent"`
	Setting agentSetting `json:"setting"`
	Nodes   int          `json:"nodes"`
	Pods    int          `json:"pods"`
	// NodesReadySeconds is from the agent's start to every node Ready,
	// AllRunningSeconds from then to every pod Running.
	NodesReadySeconds float64 `json:"nodesReadySeconds"`
	AllRunningSeconds float64 `json:"podsAllRunningSeconds"`
	// StartCPUSeconds is the agent's CPU from its start until every pod was
	// Running: the cost of bringing the nodes and pods up.
	StartCPUSeconds float64 `json:"startCPUSeconds"`
	// Over the window, every pod Running: the agent's CPU, its RSS (the
	// mean of a reading every rssProbeInterval, and the largest), and the
	// lease lapses (ended in the window, or open at its end).
	WindowSeconds   float64 `json:"windowSeconds"`
	WindowCores     float64 `json:"windowAgentCores"`
	WindowRSSMiB    float64 `json:"windowRSSMeanMiB"`
	WindowRSSMaxMiB float64 `json:"windowRSSMaxMiB"`
	LeaseLapses     int     `json:"windowLeaseLapses"`
	// PeakRSSMiB is the agent's peak RSS (VmHWM) over the whole run.
	PeakRSSMiB float64 `json:"peakRSSMiB"`
}

// measureScaling runs every agent at every size and fits the results.
func measureScaling(ctx context.Context, o options, sizes []scale, window time.Duration) (scalingResult, error) {
	var runs []scalingRun
	for _, size := range sizes {
		o.nodes, o.pods = size.nodes, size.pods
		for _, agent := range o.agents {
			r, err := measureScalingRun(ctx, o, agent, window)
			if err != nil {
				return scalingResult{}, fmt.Errorf("%s at %d nodes and %d pods: %w", agent, size.nodes, size.pods, err)
			}
			runs = append(runs, r)
		}
	}
	return analyzeScaling(runs), nil
}

// measureScalingRun runs one agent at one size: its nodes Ready, its pods
// Running, then the window.
func measureScalingRun(ctx context.Context, o options, agent string, window time.Duration) (scalingRun, error) {
	r := scalingRun{Agent: agent, Nodes: o.nodes, Pods: o.pods, WindowSeconds: window.Seconds()}
	run, err := startAgentRun(ctx, o, agent, false)
	if err != nil {
		return r, err
	}
	defer run.stop()
	r.Setting, r.NodesReadySeconds = run.setting, roundTo(run.nodesReady, 2)
	start := time.Now()
	if _, _, _, err := run.cl.createPods(ctx, run.nodeNames, o.pods); err != nil {
		return r, fmt.Errorf("%w (log %s)", err, run.proc.logPath)
	}
	r.AllRunningSeconds = roundTo(time.Since(start).Seconds(), 2)
	cpu0 := procCPU(run.pid())
	r.StartCPUSeconds = roundTo(cpu0, 2)
	logf("%s: %d pods Running %.1fs after the nodes were Ready; agent CPU so far %.1fs; measuring for %s",
		agent, o.pods, r.AllRunningSeconds, r.StartCPUSeconds, window)

	lw, err := run.cl.watchLapses(ctx)
	if err != nil {
		return r, err
	}
	windowStart := time.Now()
	end := windowStart.Add(window)
	var rss []float64
	for {
		if v := procRSS(run.pid()); !math.IsNaN(v) {
			rss = append(rss, v)
		}
		if !run.proc.alive() {
			lw.stop()
			return r, fmt.Errorf("the agent exited (log %s)", run.proc.logPath)
		}
		left := time.Until(end)
		if left <= 0 {
			break
		}
		select {
		case <-ctx.Done():
			lw.stop()
			return r, ctx.Err()
		case <-time.After(min(rssProbeInterval, left)):
		}
	}
	r.LeaseLapses = lw.stop()
	r.WindowCores = roundTo((procCPU(run.pid())-cpu0)/time.Since(windowStart).Seconds(), 4)
	if len(rss) > 0 {
		r.WindowRSSMiB, r.WindowRSSMaxMiB = roundTo(mean(rss), 1), roundTo(slices.Max(rss), 1)
	}
	r.PeakRSSMiB = roundTo(procPeakRSS(run.pid()), 1)
	logf("%s: window: %.3f cores, RSS %.1f MiB (max %.1f), %d lease lapses; peak RSS %.1f MiB",
		agent, r.WindowCores, r.WindowRSSMiB, r.WindowRSSMaxMiB, r.LeaseLapses, r.PeakRSSMiB)
	return r, nil
}

// scalingMetric is one figure of a run that the mode fits.
type scalingMetric struct {
	Key  string `json:"key"`
	Name string `json:"name"`
	Unit string `json:"unit"`
	get  func(scalingRun) float64
}

var scalingMetrics = []scalingMetric{
	{"windowRSS", "RSS with every pod Running (mean over the window)", "MiB", func(r scalingRun) float64 { return r.WindowRSSMiB }},
	{"peakRSS", "peak RSS over the whole run (VmHWM)", "MiB", func(r scalingRun) float64 { return r.PeakRSSMiB }},
	{"windowCPU", "CPU with every pod Running (over the window)", "millicores", func(r scalingRun) float64 { return r.WindowCores * 1000 }},
	{"startCPU", "CPU from the agent's start until every pod Running", "CPU s", func(r scalingRun) float64 { return r.StartCPUSeconds }},
}

// costFit is one agent's fit of one figure against the nodes and pods of
// its runs.
type costFit struct {
	Agent  string `json:"agent"`
	Metric string `json:"metric"`
	// From the runs at the ratio most runs share (pods = PodsPerNode ×
	// nodes): figure ≈ Floor + PerNodeWithPods × nodes, the cost of one
	// more node with its pods. Zero runs: fewer than two node counts.
	PodsPerNode     float64 `json:"podsPerNode"`
	RatioRuns       int     `json:"ratioRuns"`
	Floor           float64 `json:"floor"`
	PerNodeWithPods float64 `json:"perNodeWithItsPods"`
	// From every run, when their ratios differ: figure ≈ SeparateFloor +
	// PerNode × nodes + PerPod × pods. MaxResidual is the largest
	// difference between a run's figure and the fit's.
	Separable     bool    `json:"separable"`
	SeparateFloor float64 `json:"separateFloor,omitempty"`
	PerNode       float64 `json:"perNode,omitempty"`
	PerPod        float64 `json:"perPod,omitempty"`
	MaxResidual   float64 `json:"maxResidual,omitempty"`
}

// kwokComparison is nodelet's coefficient of one figure over the best
// (smallest) of the kwok agents' — the goal is ≤ scalingGoal for the
// slopes; the floor is reported, with no goal.
type kwokComparison struct {
	Metric      string  `json:"metric"`
	Coefficient string  `json:"coefficient"`
	Nodelet     float64 `json:"nodelet"`
	BestKwok    string  `json:"bestKwok"`
	Kwok        float64 `json:"kwok"`
	Ratio       float64 `json:"ratio"`
	// Goal is false for the floor, which has none. Ratio is 0 when kwok's
	// figure is not positive, where a ratio says nothing.
	Goal    bool   `json:"goal"`
	Met     bool   `json:"met"`
	Verdict string `json:"verdict"`
}

// scalingGoal is nodelet's goal per node and per pod: at most half kwok's
// best run.
const scalingGoal = 0.5

// scalingResult is the mode's runs and what was fitted from them.
type scalingResult struct {
	Metrics     []scalingMetric  `json:"metrics"`
	Runs        []scalingRun     `json:"runs"`
	Fits        []costFit        `json:"fits"`
	Comparisons []kwokComparison `json:"comparisons"`
	Note        string           `json:"note"`
}

// analyzeScaling fits every agent's figures and compares nodelet's to
// kwok's best.
func analyzeScaling(runs []scalingRun) scalingResult {
	res := scalingResult{Metrics: scalingMetrics, Runs: runs}
	var agents []string
	for _, r := range runs {
		if !slices.Contains(agents, r.Agent) {
			agents = append(agents, r.Agent)
		}
	}
	for _, m := range scalingMetrics {
		for _, agent := range agents {
			var pts []costPoint
			for _, r := range runs {
				if r.Agent == agent {
					pts = append(pts, costPoint{nodes: float64(r.Nodes), pods: float64(r.Pods), value: m.get(r)})
				}
			}
			f := fitCost(pts)
			f.Agent, f.Metric = agent, m.Key
			res.Fits = append(res.Fits, f)
		}
		res.Comparisons = append(res.Comparisons, compareToKwok(res.Fits, m.Key)...)
	}
	res.Note = "slopes by least squares; pods/nodes ratios alike in every run give only the cost of a node with its pods (perNodeWithItsPods), a run at another ratio separates perNode and perPod; the CPU and RSS are the agent process's alone, read from /proc"
	return res
}

// compareToKwok compares nodelet's fit of the metric to the best kwok's,
// coefficient by coefficient.
func compareToKwok(fits []costFit, metric string) []kwokComparison {
	var nodelet *costFit
	var kwoks []costFit
	for i, f := range fits {
		if f.Metric != metric {
			continue
		}
		if f.Agent == "nodelet" {
			nodelet = &fits[i]
		} else if _, ok := parseKwokAgent(f.Agent); ok {
			kwoks = append(kwoks, f)
		}
	}
	if nodelet == nil || len(kwoks) == 0 {
		return nil
	}
	coefficients := []struct {
		name string
		goal bool
		get  func(costFit) (float64, bool)
	}{
		{"floor", false, func(f costFit) (float64, bool) { return f.Floor, f.RatioRuns > 0 }},
		{"perNodeWithItsPods", true, func(f costFit) (float64, bool) { return f.PerNodeWithPods, f.RatioRuns > 0 }},
		{"perNode", true, func(f costFit) (float64, bool) { return f.PerNode, f.Separable }},
		{"perPod", true, func(f costFit) (float64, bool) { return f.PerPod, f.Separable }},
	}
	var out []kwokComparison
	for _, c := range coefficients {
		n, ok := c.get(*nodelet)
		if !ok {
			continue
		}
		cmp := kwokComparison{Metric: metric, Coefficient: c.name, Nodelet: n, Goal: c.goal, Kwok: math.Inf(1)}
		for _, k := range kwoks {
			if v, ok := c.get(k); ok && v < cmp.Kwok {
				cmp.Kwok, cmp.BestKwok = v, k.Agent
			}
		}
		if cmp.BestKwok == "" {
			continue
		}
		switch {
		case cmp.Kwok <= 0:
			cmp.Verdict = "kwok's is not positive: no ratio"
		case !c.goal:
			cmp.Ratio, cmp.Verdict = roundTo(n/cmp.Kwok, 3), "reported, no goal"
		default:
			cmp.Ratio = roundTo(n/cmp.Kwok, 3)
			cmp.Met = cmp.Ratio <= scalingGoal
			cmp.Verdict = fmt.Sprintf("goal ≤ %.1f: %s", scalingGoal, okWord(cmp.Met, "met", "NOT met"))
		}
		out = append(out, cmp)
	}
	return out
}

// costPoint is one run's figure at its nodes and pods.
type costPoint struct{ nodes, pods, value float64 }

// fitCost fits the points: the floor and the cost of a node with its pods
// from the points at the ratio most share, and, when the points' ratios
// differ, the floor, the cost per node and the cost per pod from all.
func fitCost(pts []costPoint) costFit {
	var f costFit
	ratio, at := commonRatio(pts)
	if len(at) >= 2 {
		x := make([][]float64, len(at))
		y := make([]float64, len(at))
		for i, p := range at {
			x[i], y[i] = []float64{1, p.nodes}, p.value
		}
		if b, ok := leastSquares(x, y); ok {
			f.PodsPerNode, f.RatioRuns, f.Floor, f.PerNodeWithPods = ratio, len(at), b[0], b[1]
		}
	}
	if !ratiosSpread(pts) {
		return f
	}
	x := make([][]float64, len(pts))
	y := make([]float64, len(pts))
	for i, p := range pts {
		x[i], y[i] = []float64{1, p.nodes, p.pods}, p.value
	}
	if b, ok := leastSquares(x, y); ok {
		f.Separable, f.SeparateFloor, f.PerNode, f.PerPod = true, b[0], b[1], b[2]
		for i, p := range pts {
			f.MaxResidual = max(f.MaxResidual, math.Abs(y[i]-(b[0]+b[1]*p.nodes+b[2]*p.pods)))
		}
	}
	return f
}

// minRatioSpread is how far apart, as a factor, the largest and the
// smallest pods/nodes ratio of the runs must be for a node's cost to be
// told from a pod's: runs at nearly one ratio would give a fit that
// follows their noise.
const minRatioSpread = 1.5

// ratiosSpread says whether the points' pods/nodes ratios are far enough
// apart to separate a node's cost from a pod's.
func ratiosSpread(pts []costPoint) bool {
	if len(pts) == 0 {
		return false
	}
	lo, hi := math.Inf(1), 0.0
	for _, p := range pts {
		lo, hi = min(lo, p.pods/p.nodes), max(hi, p.pods/p.nodes)
	}
	return hi > 0 && hi >= minRatioSpread*lo
}

// commonRatio is the pods/nodes ratio that the most points with distinct
// node counts share (the first such, on a tie), and those points.
func commonRatio(pts []costPoint) (float64, []costPoint) {
	var best []costPoint
	bestRatio, bestNodes := 0.0, 0
	for _, p := range pts {
		r := p.pods / p.nodes
		var at []costPoint
		nodes := map[float64]bool{}
		for _, q := range pts {
			if math.Abs(q.pods/q.nodes-r) <= 1e-9*math.Max(1, r) {
				at = append(at, q)
				nodes[q.nodes] = true
			}
		}
		if len(nodes) > bestNodes {
			best, bestRatio, bestNodes = at, r, len(nodes)
		}
	}
	return bestRatio, best
}

// leastSquares solves min ‖Xβ − y‖ by the normal equations, each column
// of X scaled to unit length first; false when the columns are not
// independent over the points (or there are fewer points than columns).
func leastSquares(x [][]float64, y []float64) ([]float64, bool) {
	if len(x) == 0 || len(x) < len(x[0]) {
		return nil, false
	}
	k := len(x[0])
	norm := make([]float64, k)
	for j := range k {
		for i := range x {
			norm[j] += x[i][j] * x[i][j]
		}
		norm[j] = math.Sqrt(norm[j])
		if norm[j] == 0 {
			return nil, false
		}
	}
	// a = [XᵀX | Xᵀy] of the scaled columns.
	a := make([][]float64, k)
	for r := range k {
		a[r] = make([]float64, k+1)
		for i := range x {
			for c := range k {
				a[r][c] += x[i][r] / norm[r] * x[i][c] / norm[c]
			}
			a[r][k] += x[i][r] / norm[r] * y[i]
		}
	}
	for col := range k {
		pivot := col
		for r := col + 1; r < k; r++ {
			if math.Abs(a[r][col]) > math.Abs(a[pivot][col]) {
				pivot = r
			}
		}
		// The scaled Gram matrix has ones on its diagonal: a pivot this
		// small means a column is a combination of the others.
		if math.Abs(a[pivot][col]) < 1e-9 {
			return nil, false
		}
		a[col], a[pivot] = a[pivot], a[col]
		for r := range k {
			if r == col {
				continue
			}
			factor := a[r][col] / a[col][col]
			for c := col; c <= k; c++ {
				a[r][c] -= factor * a[col][c]
			}
		}
	}
	beta := make([]float64, k)
	for j := range k {
		beta[j] = a[j][k] / a[j][j] / norm[j]
	}
	return beta, true
}

// printScaling prints the runs, each figure's fit per agent, and nodelet
// against kwok's best.
func printScaling(w io.Writer, res scalingResult) {
	fmt.Fprintln(w, "\nruns:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "agent\tnodes\tpods\tnodes Ready (s)\tpods Running (s)\tstart CPU (s)\twindow CPU (cores)\twindow RSS (MiB)\tpeak RSS (MiB)\tlease lapses\t")
	for _, r := range res.Runs {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f\t%.1f\t%.1f\t%.3f\t%.1f\t%.1f\t%d\t\n", r.Agent, r.Nodes, r.Pods,
			r.NodesReadySeconds, r.AllRunningSeconds, r.StartCPUSeconds, r.WindowCores, r.WindowRSSMiB, r.PeakRSSMiB, r.LeaseLapses)
	}
	tw.Flush()
	fmt.Fprintln(w, "settings:")
	seen := map[string]bool{}
	for _, r := range res.Runs {
		if key := fmt.Sprintf("%s %d", r.Agent, r.Nodes); !seen[key] {
			seen[key] = true
			fmt.Fprintf(w, "  %s at %d nodes: %s\n", r.Agent, r.Nodes, r.Setting.Summary)
		}
	}

	for _, m := range res.Metrics {
		fmt.Fprintf(w, "\n%s, %s: floor and cost per 1,000\n", m.Name, m.Unit)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		ratio := 0.0
		for _, f := range res.Fits {
			if f.Metric == m.Key && f.RatioRuns > 0 {
				ratio = f.PodsPerNode
			}
		}
		fmt.Fprintf(tw, "agent\tfloor\tper 1,000 nodes with %s pods\t|\tfloor\tper 1,000 nodes\tper 1,000 pods\tmax residual\t\n", thousands(1000*ratio))
		for _, f := range res.Fits {
			if f.Metric != m.Key {
				continue
			}
			line := f.Agent + "\t"
			if f.RatioRuns > 0 {
				line += fmt.Sprintf("%.1f\t%.1f\t", f.Floor, 1000*f.PerNodeWithPods)
			} else {
				line += "-\t-\t"
			}
			line += "|\t"
			if f.Separable {
				line += fmt.Sprintf("%.1f\t%.1f\t%.1f\t%.1f\t", f.SeparateFloor, 1000*f.PerNode, 1000*f.PerPod, f.MaxResidual)
			} else {
				line += "-\t-\t-\t-\t"
			}
			fmt.Fprintln(tw, line)
		}
		tw.Flush()
		var parts []string
		for _, c := range res.Comparisons {
			if c.Metric != m.Key {
				continue
			}
			parts = append(parts, fmt.Sprintf("%s %.2f× %s (%s)", c.Coefficient, c.Ratio, c.BestKwok, c.Verdict))
		}
		if len(parts) > 0 {
			fmt.Fprintf(w, "nodelet / kwok's best: %s\n", strings.Join(parts, "; "))
		}
	}
	if !slices.ContainsFunc(res.Fits, func(f costFit) bool { return f.Separable }) {
		fmt.Fprintln(w, "\nevery run has the same pods/nodes ratio: a node's cost and a pod's cannot be told apart (add a run at another ratio)")
	}
}

// thousands writes a whole number with a comma every three digits.
func thousands(x float64) string {
	s := fmt.Sprintf("%.0f", x)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// refitScaling fits again the runs of a results file of --scaling and
// prints them, after the file's provenance.
func refitScaling(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var file struct {
		Provenance provenance    `json:"provenance"`
		Scaling    scalingResult `json:"scaling"`
	}
	if err := json.Unmarshal(data, &file); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if len(file.Scaling.Runs) == 0 {
		return fmt.Errorf("%s: no scaling.runs", path)
	}
	fmt.Println(file.Provenance.line())
	fmt.Printf("(fitted again from %s)\n", path)
	printScaling(os.Stdout, analyzeScaling(file.Scaling.Runs))
	return nil
}
