package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseStageSets(t *testing.T) {
	sets, err := parseStageSets("fast, general")
	if err != nil || !slices.Equal(sets, []stageSet{fastStages, generalStages}) {
		t.Errorf("fast, general: %v, %v", sets, err)
	}
	for _, bad := range []string{"", "slow", "fast,"} {
		if _, err := parseStageSets(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// kwokStageLayout writes, under a temporary directory, the files of a kwok
// module's kustomize/stage that matter here, with what lies beside them.
func kwokStageLayout(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{
		"fast/kustomization.yaml",
		"node/fast/kustomization.yaml", "node/fast/node-initialize.yaml", "node/fast/testdata/node-pending.input.yaml",
		"node/heartbeat-with-lease/node-heartbeat-with-lease.yaml", "node/heartbeat/node-heartbeat.yaml",
		"node/chaos/node-not-ready.yaml",
		"pod/fast/README.md", "pod/fast/pod-complete.yaml", "pod/fast/pod-delete.yaml", "pod/fast/pod-ready.yaml",
		"pod/general/kustomization.yaml", "pod/general/pod-create.yaml", "pod/general/pod-ready.yaml",
		"pod/general/testdata/pod-create.input.yaml",
	} {
		path := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestStageFiles(t *testing.T) {
	dir := kwokStageLayout(t)
	rel := func(files []string) []string {
		var out []string
		for _, f := range files {
			r, _ := filepath.Rel(dir, f)
			out = append(out, r)
		}
		return out
	}
	nodes := []string{"node/fast/node-initialize.yaml", "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml"}
	for set, pods := range map[stageSet][]string{
		fastStages:    {"pod/fast/pod-complete.yaml", "pod/fast/pod-delete.yaml", "pod/fast/pod-ready.yaml"},
		generalStages: {"pod/general/pod-create.yaml", "pod/general/pod-ready.yaml"},
	} {
		files, err := stageFiles(dir, set)
		if err != nil {
			t.Fatal(err)
		}
		if want := append(slices.Clone(nodes), pods...); !slices.Equal(rel(files), want) {
			t.Errorf("%s: %v, want %v", set, rel(files), want)
		}
	}
	if err := os.RemoveAll(filepath.Join(dir, "pod", "general")); err != nil {
		t.Fatal(err)
	}
	if _, err := stageFiles(dir, generalStages); err == nil || !strings.Contains(err.Error(), "pod/general") {
		t.Errorf("general stages missing: error %v, want one naming them", err)
	}
}

// TestStageFilesOfTheKwokModule reads the pinned kwok's own stage
// directory, when the module cache holds it: kwokctl's fast set is its
// stage/fast kustomization's, and the general set has kwok's six general
// pod stages.
func TestStageFilesOfTheKwokModule(t *testing.T) {
	cache := os.Getenv("GOMODCACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, "go", "pkg", "mod")
	}
	dir := kwokStageDir(cache, "v0.8.0")
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("no kwok v0.8.0 module: %v", err)
	}
	fast, err := stageFiles(dir, fastStages)
	if err != nil || len(fast) != 5 {
		t.Errorf("fast: %v, %v; want node-initialize, node-heartbeat-with-lease and 3 pod stages", fast, err)
	}
	general, err := stageFiles(dir, generalStages)
	if err != nil || len(general) != 8 {
		t.Errorf("general: %v, %v; want the 2 node stages and 6 pod stages", general, err)
	}
}

func TestTakeoverAndKwokArgs(t *testing.T) {
	stages := []string{"/m/node/fast/node-initialize.yaml", "/m/pod/fast/pod-ready.yaml"}
	selection := []string{"--manage-all-nodes=false", "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
		"--node-lease-duration-seconds=40"}

	nodelet := takeoverArgs("bin", "/cp/admin.kubeconfig", 2, stages)
	if nodelet[0] != "bin/nodelet" || slices.Contains(nodelet, "--nodes") || slices.Contains(nodelet, "--node-name") {
		t.Errorf("nodelet-takeover: %v, want bin/nodelet with no nodes of its own", nodelet)
	}
	i := slices.Index(nodelet, "--sim-stages")
	if i < 0 || nodelet[i+1] != strings.Join(stages, ",") {
		t.Errorf("nodelet-takeover: %v, want --sim-stages with every stage file", nodelet)
	}

	kwok := kwokArgs("bin", "/cp/admin.kubeconfig", kwokAgent{version: "v0.8.0"}, "", stages)
	if kwok[0] != "bin/kwok-v0.8.0" {
		t.Errorf("kwok: %v", kwok)
	}
	var configs []string
	for i, a := range kwok {
		if a == "--config" {
			configs = append(configs, kwok[i+1])
		}
	}
	if !slices.Equal(configs, stages) {
		t.Errorf("kwok's --config %v, want the stage files %v", configs, stages)
	}
	tuned := kwokArgs("bin", "/cp/admin.kubeconfig", kwokAgent{version: "v0.8.0", tuned: true}, "/cp/kwok-configuration.yaml", stages)
	if i := slices.Index(tuned, "--config"); i < 0 || tuned[i+1] != "/cp/kwok-configuration.yaml" {
		t.Errorf("tuned kwok: %v, want its configuration before the stages", tuned)
	}

	// Both select and keep the same Nodes by the same flags.
	for name, args := range map[string][]string{"nodelet-takeover": nodelet, "kwok": kwok} {
		for _, f := range selection {
			if !slices.Contains(args, f) {
				t.Errorf("%s: %v lacks %s", name, args, f)
			}
		}
	}
}

func TestTakeoverSetting(t *testing.T) {
	s, err := simAgentSetting(takeoverAgent, 5000, generalStages)
	if err != nil {
		t.Fatal(err)
	}
	if s.Values["nodeWorkers"] != 1024 || s.Values["podWorkers"] != 64 {
		t.Errorf("nodelet-takeover at 5,000 nodes: %v, want 1,024 node workers (grown from 250 with the Nodes taken over) and 64 pod workers", s.Values)
	}
	if !strings.Contains(s.Summary, "pod/general") || !strings.Contains(s.Summary, "kwok.x-k8s.io/node=fake") {
		t.Errorf("summary %q does not name the stages and the selector", s.Summary)
	}
	k, err := simAgentSetting("kwok@v0.8.0", 5000, fastStages)
	if err != nil || !strings.Contains(k.Summary, "pod/fast") {
		t.Errorf("kwok's summary %q (%v) does not name its stages", k.Summary, err)
	}
	for agent, want := range map[string]bool{takeoverAgent: true, "kwok@v0.8.0-tuned": true, "nodelet": false} {
		if playsStages(agent) != want {
			t.Errorf("playsStages(%s) = %v", agent, !want)
		}
	}
}

func TestTableTitle(t *testing.T) {
	if got := tableTitle(50, 200, generalStages, []string{"nodelet"}); got != "50 nodes, 200 pods" {
		t.Errorf("nodelet alone: %q", got)
	}
	got := tableTitle(50, 200, generalStages, []string{takeoverAgent, "kwok@v0.8.0"})
	if got != "50 nodes, 200 pods, kwok's general stages (node/fast, node/heartbeat-with-lease, pod/general)" {
		t.Errorf("with stages: %q", got)
	}
}
