package main

// The sim agents the bench measures and the settings each runs with:
// nodelet at its defaults, kwok at its defaults, and kwok tuned — its
// parallelism raised to nodelet's worker counts at the same scale, so that
// kwok is measured at its best rather than at four of everything.

import (
	"fmt"
	"strings"

	"github.com/nodelet/nodelet/pkg/config"
	"github.com/nodelet/nodelet/pkg/node"
)

// kwokAgent is an agent that runs kwok: kwok@VERSION at kwok's defaults,
// or kwok@VERSION-tuned with its parallelism raised (tunedKwokParallelism).
type kwokAgent struct {
	version string
	tuned   bool
}

// tunedSuffix marks the tuned variant of a kwok agent.
const tunedSuffix = "-tuned"

// parseKwokAgent reads an agent named kwok@VERSION or kwok@VERSION-tuned;
// false for any other name.
func parseKwokAgent(agent string) (kwokAgent, bool) {
	v, ok := strings.CutPrefix(agent, "kwok@")
	if !ok {
		return kwokAgent{}, false
	}
	v, tuned := strings.CutSuffix(v, tunedSuffix)
	if v == "" {
		return kwokAgent{}, false
	}
	return kwokAgent{version: v, tuned: tuned}, true
}

// normalizeAgent gives the short names their version: kwok is
// kwok@VERSION and kwok-tuned kwok@VERSION-tuned, VERSION being
// --kwok-version's.
func normalizeAgent(agent, kwokVersion string) string {
	switch agent {
	case "kwok":
		return "kwok@" + kwokVersion
	case "kwok" + tunedSuffix:
		return "kwok@" + kwokVersion + tunedSuffix
	}
	return agent
}

// kwokParallelism is what bounds how much kwok does at once: three options
// of its KwokConfiguration (config.kwok.x-k8s.io/v1alpha1), the same in
// v0.7.0 and v0.8.0.
type kwokParallelism struct {
	NodeLease     int `json:"nodeLeaseParallelism"`
	NodePlayStage int `json:"nodePlayStageParallelism"`
	PodPlayStage  int `json:"podPlayStageParallelism"`
}

// kwokDefaultParallelism is kwok's defaults for those options (+default=4
// in both v0.7.0 and v0.8.0).
var kwokDefaultParallelism = kwokParallelism{NodeLease: 4, NodePlayStage: 4, PodPlayStage: 4}

// nodeletNodeWorkers is how many node workers nodelet runs for n nodes;
// they renew the Leases and write the node statuses, both.
func nodeletNodeWorkers(n int) int { return node.WorkersFor(n) }

// nodeletPodWorkers is how many pods nodelet syncs at once by default
// (podWorkers).
func nodeletPodWorkers() int { return int(config.Default().PodWorkers) }

// tunedKwokParallelism is kwok at nodelet's worker counts for n nodes:
// nodelet's node workers for both of kwok's node pools (leases and node
// stages, which nodelet's one pool serves together: kwok gets twice the
// node workers), its pod workers for kwok's pod stages.
func tunedKwokParallelism(n int) kwokParallelism {
	w := nodeletNodeWorkers(n)
	return kwokParallelism{NodeLease: w, NodePlayStage: w, PodPlayStage: nodeletPodWorkers()}
}

// kwokConfiguration is kwok's configuration file setting p: one more
// --config for kwok, beside its stages, for kwok of the given version.
// Every other option is written out at kwok's default, as its
// SetObjectDefaults_KwokConfiguration gives it: kwok v0.8.0 defaults a
// KwokConfiguration only when no file is given (pkg/config's
// GetKwokConfiguration; a file's is converted as read), so a file with
// the parallelisms alone left tuned kwok with its debugging and profiling
// handlers off, no pod CIDR, and no pager for its pods-on-node sync — not
// kwok at its defaults with its parallelism raised. v0.7.0 defaults a
// file's options, to the same values but its CIDR.
func kwokConfiguration(version string, p kwokParallelism) []byte {
	cidr := "10.0.0.0/24"
	if version == "v0.7.0" {
		cidr = "10.0.0.1/24"
	}
	return fmt.Appendf(nil, `apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  nodeLeaseParallelism: %d
  nodePlayStageParallelism: %d
  podPlayStageParallelism: %d
  cidr: %s
  manageAllNodes: false
  enableDebuggingHandlers: true
  enableContentionProfiling: false
  enableProfilingHandler: true
  podsOnNodeSyncParallelism: 1
  enablePodsOnNodeSyncListPager: true
  enablePodsOnNodeSyncStreamWatch: false
`, p.NodeLease, p.NodePlayStage, p.PodPlayStage, cidr)
}

// agentSetting is what an agent ran with, recorded beside its figures: a
// sentence, and the values under their own option names.
type agentSetting struct {
	Summary string         `json:"summary"`
	Values  map[string]int `json:"values"`
}

// nodeletTakeoverNodeWorkers is how many node workers nodelet runs once it
// has taken over n Nodes: it starts with as many as for 1,000 nodes (the
// count it will take over is not known at start) and grows the pool with
// the Nodes taken over (pkg/node's GrowWorkers).
func nodeletTakeoverNodeWorkers(n int) int { return nodeletNodeWorkers(max(n, 1000)) }

// simAgentSetting is the setting of a sim agent at n nodes: nodelet's
// worker counts and client limit, kwok's parallelism (its client is
// unthrottled in both versions: client.NewClientset sets no rate limit),
// and for the agents that play kwok's stages, the stage set.
func simAgentSetting(agent string, n int, stages stageSet) (agentSetting, error) {
	switch agent {
	case "nodelet":
		return nodeletSetting(fmt.Sprintf("nodelet defaults: %d node workers (min(max(%d nodes/4, 8), 1024))", nodeletNodeWorkers(n), n),
			nodeletNodeWorkers(n)), nil
	case takeoverAgent:
		w := nodeletTakeoverNodeWorkers(n)
		s := nodeletSetting(fmt.Sprintf("nodelet defaults taking over the bench's Nodes (%s), %s: %d node workers once they are taken over (%d at start, as for 1,000 nodes, growing with the Nodes taken over)",
			kwokNodeSelector, stages.describe(), w, nodeletTakeoverNodeWorkers(0)), w)
		return s, nil
	}
	k, ok := parseKwokAgent(agent)
	if !ok {
		return agentSetting{}, fmt.Errorf("unknown agent %q (nodelet, %s, kwok, kwok-tuned, kwok@VERSION or kwok@VERSION-tuned)", agent, takeoverAgent)
	}
	p, how := kwokDefaultParallelism, "kwok defaults"
	if k.tuned {
		p = tunedKwokParallelism(n)
		how = fmt.Sprintf("KwokConfiguration raised to nodelet's workers at %d nodes (its node workers for both node options, its podWorkers for pods)", n)
	}
	return agentSetting{
		Summary: fmt.Sprintf("%s, %s: nodeLeaseParallelism %d, nodePlayStageParallelism %d, podPlayStageParallelism %d; client unthrottled",
			how, stages.describe(), p.NodeLease, p.NodePlayStage, p.PodPlayStage),
		Values: map[string]int{"nodeLeaseParallelism": p.NodeLease, "nodePlayStageParallelism": p.NodePlayStage,
			"podPlayStageParallelism": p.PodPlayStage},
	}, nil
}

// nodeletSetting is nodelet's setting with its default pod workers and
// client limit, and workers node workers, after how.
func nodeletSetting(how string, workers int) agentSetting {
	c := config.Default()
	return agentSetting{
		Summary: fmt.Sprintf("%s, podWorkers %d, kubeAPIQPS %g / kubeAPIBurst %d", how, c.PodWorkers, c.KubeAPIQPS, c.KubeAPIBurst),
		Values: map[string]int{"nodeWorkers": workers, "podWorkers": int(c.PodWorkers),
			"kubeAPIQPS": int(c.KubeAPIQPS), "kubeAPIBurst": int(c.KubeAPIBurst)},
	}
}
