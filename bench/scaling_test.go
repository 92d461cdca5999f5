package main

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-6*math.Max(1, math.Abs(b)) }

// cost is a figure of floor + perNode × nodes + perPod × pods.
func cost(floor, perNode, perPod float64, sizes ...scale) []costPoint {
	var out []costPoint
	for _, s := range sizes {
		out = append(out, costPoint{float64(s.nodes), float64(s.pods), floor + perNode*float64(s.nodes) + perPod*float64(s.pods)})
	}
	return out
}

// TestFitCostSeparates fits the mode's default runs: three at 2 pods a
// node give the floor and the cost of a node with its 2 pods, the fourth
// at 10 a node separates a node's cost from a pod's.
func TestFitCostSeparates(t *testing.T) {
	f := fitCost(cost(45, 0.08, 0.01, scale{1000, 2000}, scale{2500, 5000}, scale{5000, 10000}, scale{1000, 10000}))
	if f.RatioRuns != 3 || !near(f.PodsPerNode, 2) || !near(f.Floor, 45) || !near(f.PerNodeWithPods, 0.08+2*0.01) {
		t.Errorf("at the common ratio: %+v, want 3 runs at 2 pods a node, floor 45, 0.1 a node with its pods", f)
	}
	if !f.Separable || !near(f.SeparateFloor, 45) || !near(f.PerNode, 0.08) || !near(f.PerPod, 0.01) || f.MaxResidual > 1e-6 {
		t.Errorf("over every run: %+v, want floor 45, 0.08 a node, 0.01 a pod", f)
	}
}

// TestFitCostNotSeparable: runs all at one ratio give the cost of a node
// with its pods, and no separate costs.
func TestFitCostNotSeparable(t *testing.T) {
	f := fitCost(cost(45, 0.08, 0.01, scale{1000, 2000}, scale{2500, 5000}, scale{5000, 10000}))
	if f.Separable {
		t.Errorf("runs at one ratio fitted separately: %+v", f)
	}
	if f.RatioRuns != 3 || !near(f.Floor, 45) || !near(f.PerNodeWithPods, 0.1) {
		t.Errorf("%+v, want floor 45 and 0.1 a node with its pods", f)
	}
	if f := fitCost(cost(45, 0.08, 0.01, scale{1000, 2000})); f.RatioRuns != 0 || f.Separable {
		t.Errorf("one run fitted: %+v", f)
	}
	// Nearly one ratio: the fit would follow the noise.
	if f := fitCost(cost(45, 0.08, 0.01, scale{1000, 2000}, scale{2500, 5000}, scale{5000, 10500})); f.Separable {
		t.Errorf("runs at nearly one ratio fitted separately: %+v", f)
	}
	// No pods at all in one run separates them.
	if f := fitCost(cost(45, 0.08, 0.01, scale{1000, 2000}, scale{2500, 5000}, scale{1000, 0})); !f.Separable || !near(f.PerPod, 0.01) {
		t.Errorf("a run without pods: %+v, want 0.01 a pod", f)
	}
}

// TestFitCostResidual: with noise the fit is the least-squares one and
// says how far it is from the worst run.
func TestFitCostResidual(t *testing.T) {
	pts := cost(45, 0.08, 0.01, scale{1000, 2000}, scale{2500, 5000}, scale{5000, 10000}, scale{1000, 10000})
	pts[1].value += 3
	f := fitCost(pts)
	if !f.Separable || f.MaxResidual <= 0 || f.MaxResidual > 3 {
		t.Errorf("%+v, want a separable fit with a residual in (0, 3]", f)
	}
	// The ratio-2 line through three points off by 0, +3, 0 at 1,000,
	// 2,500 and 5,000 nodes.
	if !near(f.PerNodeWithPods, 0.1+3*(2500-2833.3333333333335)/((1000-2833.3333333333335)*(1000-2833.3333333333335)+(2500-2833.3333333333335)*(2500-2833.3333333333335)+(5000-2833.3333333333335)*(5000-2833.3333333333335))) {
		t.Errorf("per node with its pods %v", f.PerNodeWithPods)
	}
}

func TestLeastSquares(t *testing.T) {
	if _, ok := leastSquares([][]float64{{1, 2}}, []float64{1}); ok {
		t.Error("fewer points than columns: fitted")
	}
	if _, ok := leastSquares([][]float64{{1, 0}, {1, 0}}, []float64{1, 2}); ok {
		t.Error("a zero column: fitted")
	}
	if _, ok := leastSquares([][]float64{{1, 1000, 2000}, {1, 2500, 5000}, {1, 5000, 10000}, {1, 1000, 2000}}, []float64{1, 2, 3, 4}); ok {
		t.Error("a column proportional to another: fitted")
	}
	b, ok := leastSquares([][]float64{{1, 1}, {1, 2}, {1, 3}}, []float64{1, 2, 2})
	if !ok || !near(b[0], 2.0/3) || !near(b[1], 0.5) {
		t.Errorf("leastSquares = %v, %v; want [2/3 1/2]", b, ok)
	}
}

// scalingRuns is three agents at the default runs: nodelet at half the
// best kwok's cost a node and under half a pod's, on a higher floor.
func scalingRuns() []scalingRun {
	var runs []scalingRun
	for _, a := range []struct {
		agent                  string
		floor, perNode, perPod float64
	}{
		{"nodelet", 60, 0.05, 0.004},
		{"kwok@v0.8.0", 40, 0.12, 0.01},
		{"kwok@v0.8.0-tuned", 42, 0.1, 0.012},
	} {
		for _, s := range []scale{{1000, 2000}, {2500, 5000}, {5000, 10000}, {1000, 10000}} {
			rss := a.floor + a.perNode*float64(s.nodes) + a.perPod*float64(s.pods)
			runs = append(runs, scalingRun{Agent: a.agent, Nodes: s.nodes, Pods: s.pods, WindowRSSMiB: rss, PeakRSSMiB: rss, WindowCores: rss / 1000, StartCPUSeconds: rss})
		}
	}
	return runs
}

func TestAnalyzeScalingComparesToKwoksBest(t *testing.T) {
	res := analyzeScaling(scalingRuns())
	got := map[string]kwokComparison{}
	for _, c := range res.Comparisons {
		if c.Metric == "windowRSS" {
			got[c.Coefficient] = c
		}
	}
	for coefficient, want := range map[string]struct {
		best  string
		ratio float64
		goal  bool
		met   bool
	}{
		"floor":              {"kwok@v0.8.0", 1.5, false, false},
		"perNodeWithItsPods": {"kwok@v0.8.0-tuned", 0.058 / 0.124, true, true},
		"perNode":            {"kwok@v0.8.0-tuned", 0.5, true, true},
		"perPod":             {"kwok@v0.8.0", 0.4, true, true},
	} {
		c, ok := got[coefficient]
		if !ok {
			t.Errorf("no comparison of %s", coefficient)
			continue
		}
		if c.BestKwok != want.best || !near(c.Ratio, roundTo(want.ratio, 3)) || c.Goal != want.goal || c.Met != want.met {
			t.Errorf("%s: %+v, want best %s, ratio %.3f, goal %v, met %v", coefficient, c, want.best, want.ratio, want.goal, want.met)
		}
	}
	// Printed and written, the results hold no NaN and name each verdict.
	if _, err := json.Marshal(res); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	printScaling(&buf, res)
	for _, want := range []string{"per 1,000 nodes with 2,000 pods", "perNode 0.50× kwok@v0.8.0-tuned (goal ≤ 0.5: met)", "floor 1.50× kwok@v0.8.0 (reported, no goal)"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("printed output has no %q:\n%s", want, buf.String())
		}
	}
}

// TestAnalyzeScalingGoalNotMet: a ratio over 0.5 is said not met, and a
// kwok cost of zero gives no ratio.
func TestAnalyzeScalingGoalNotMet(t *testing.T) {
	fits := []costFit{
		{Agent: "nodelet", Metric: "m", RatioRuns: 3, Floor: 10, PerNodeWithPods: 0.3},
		{Agent: "kwok@v0.8.0", Metric: "m", RatioRuns: 3, Floor: 0, PerNodeWithPods: 0.5},
	}
	got := compareToKwok(fits, "m")
	if len(got) != 2 {
		t.Fatalf("comparisons %+v, want the floor and the cost of a node with its pods", got)
	}
	if got[0].Ratio != 0 || !strings.Contains(got[0].Verdict, "no ratio") {
		t.Errorf("floor against kwok's 0: %+v", got[0])
	}
	if got[1].Met || got[1].Ratio != 0.6 || !strings.Contains(got[1].Verdict, "NOT met") {
		t.Errorf("0.3 against 0.5: %+v", got[1])
	}
}
