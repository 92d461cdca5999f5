package main

// The agents that manage the Nodes the bench creates, as kwok does: kwok
// (at its defaults and tuned) and nodelet-takeover, nodelet in sim mode
// taking over the same Nodes by the same annotation selector. Both are
// given the same kwok stage files, from the kwok module's
// kustomize/stage: kwokctl's default fast stages, or kwok's general pod
// stages with the same node stages (--kwok-stages).

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// takeoverAgent is nodelet managing the bench's pre-created Nodes with
// kwok's flags and stages, in place of kwok.
const takeoverAgent = "nodelet-takeover"

// The bench's pre-created Nodes carry kwok's annotation, and every agent
// that manages them selects them by it, as kwokctl's manifests make kwok
// do; their Leases last 40 s under either agent (both agents' default).
const (
	kwokNodeAnnotation      = "kwok.x-k8s.io/node"
	kwokNodeAnnotationValue = "fake"
	kwokNodeSelector        = kwokNodeAnnotation + "=" + kwokNodeAnnotationValue
	takeoverLeaseSeconds    = 40
)

// playsStages says whether an agent manages the pre-created Nodes with
// kwok's stages: kwok and nodelet-takeover; nodelet registers its own
// nodes and plays its built-in lifecycle.
func playsStages(agent string) bool {
	if agent == takeoverAgent {
		return true
	}
	_, ok := parseKwokAgent(agent)
	return ok
}

// stageSet is a set of kwok's published stages (kustomize/stage in the
// kwok module) the agents that play stages are given.
type stageSet string

const (
	// fastStages are kwokctl's default: nodes initialised at once with
	// Lease heartbeats, pods Ready at once and deleted at once.
	fastStages stageSet = "fast"
	// generalStages are kwok's general pod stages (created, init
	// containers, Ready, complete, deleted, each after a delay of 1 to 6
	// s, a delete at most at the pod's deletionTimestamp) with the same
	// node stages.
	generalStages stageSet = "general"
)

// parseStageSets reads --kwok-stages: fast, general or both,
// comma-separated, in the order they run.
func parseStageSets(s string) ([]stageSet, error) {
	var out []stageSet
	for _, part := range strings.Split(s, ",") {
		switch set := stageSet(strings.TrimSpace(part)); set {
		case fastStages, generalStages:
			out = append(out, set)
		default:
			return nil, fmt.Errorf("%q is not a stage set (fast or general)", part)
		}
	}
	return out, nil
}

// patterns are the stage files of the set, as globs under a kwok
// module's kustomize/stage: the directories kwokctl's stage/fast
// kustomization names, with pod/general in place of pod/fast for the
// general set. Each directory's stages are its node-*.yaml or pod-*.yaml
// (beside them are kustomization.yaml, a README and testdata/).
func (s stageSet) patterns() []string {
	pods := "pod/fast/pod-*.yaml"
	if s == generalStages {
		pods = "pod/general/pod-*.yaml"
	}
	return []string{"node/fast/node-*.yaml", "node/heartbeat-with-lease/node-*.yaml", pods}
}

// describe names the set's directories, for an agent's setting.
func (s stageSet) describe() string {
	dirs := make([]string, 0, 3)
	for _, p := range s.patterns() {
		dirs = append(dirs, filepath.Dir(p))
	}
	return fmt.Sprintf("kwok's %s stages (%s)", s, strings.Join(dirs, ", "))
}

// kwokStageDir is the kustomize/stage directory of kwok version's module
// in the module cache gomodcache.
func kwokStageDir(gomodcache, version string) string {
	return filepath.Join(gomodcache, "sigs.k8s.io", "kwok@"+version, "kustomize", "stage")
}

// stageFiles are the files of set under dir (kwokStageDir), in the order
// of its patterns; each pattern must match.
func stageFiles(dir string, set stageSet) ([]string, error) {
	var out []string
	for _, pattern := range set.patterns() {
		m, err := filepath.Glob(filepath.Join(dir, pattern))
		if err != nil || len(m) == 0 {
			return nil, fmt.Errorf("no kwok stages %s in %s (is --gomodcache right?)", pattern, dir)
		}
		out = append(out, m...)
	}
	return out, nil
}

// takeoverFlags select the bench's pre-created Nodes and set their Lease,
// under kwok's flag names, which nodelet shares.
func takeoverFlags() []string {
	return []string{"--manage-all-nodes=false", "--manage-nodes-with-annotation-selector=" + kwokNodeSelector,
		"--node-lease-duration-seconds=" + strconv.Itoa(takeoverLeaseSeconds)}
}

// kwokArgs is the command line of kwok k (bin/kwok-VERSION) managing the
// bench's pre-created Nodes with the stage files; configPath, when not
// empty, is tuned kwok's KwokConfiguration (kwokConfiguration).
func kwokArgs(bin, kubeconfig string, k kwokAgent, configPath string, stages []string) []string {
	args := append([]string{filepath.Join(bin, "kwok-"+k.version), "--kubeconfig", kubeconfig},
		takeoverFlags()...)
	args = append(args, "--cidr=100.64.0.0/10", "--node-ip=127.0.0.1")
	if configPath != "" {
		args = append(args, "--config", configPath)
	}
	for _, s := range stages {
		args = append(args, "--config", s)
	}
	return args
}

// takeoverArgs is the command line of nodelet-takeover: a sim agent with
// no nodes of its own that takes over the bench's pre-created Nodes by
// kwok's flags and plays the same stage files as kwok. What kwok is told
// besides is nodelet's default: kwok's --node-ip is --address
// (127.0.0.1), its --cidr sim.podCIDR (100.64.0.0/10).
func takeoverArgs(bin, kubeconfig string, v int, stages []string) []string {
	args := append([]string{filepath.Join(bin, "nodelet"), "--kubeconfig", kubeconfig, "--provider", "sim"},
		takeoverFlags()...)
	return append(args, "--address=127.0.0.1", "--sim-stages", strings.Join(stages, ","), fmt.Sprintf("-v=%d", v))
}

// tableTitle heads the table of one scale: with the stage set when an
// agent played kwok's stages.
func tableTitle(nodes, pods int, set stageSet, agents []string) string {
	title := fmt.Sprintf("%d nodes, %d pods", nodes, pods)
	for _, a := range agents {
		if playsStages(a) {
			return title + ", " + set.describe()
		}
	}
	return title
}
