package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	kwokconfig "sigs.k8s.io/kwok/pkg/apis/config/v1alpha1"
	"sigs.k8s.io/yaml"
)

func TestParseKwokAgent(t *testing.T) {
	for agent, want := range map[string]struct {
		k  kwokAgent
		ok bool
	}{
		"kwok@v0.7.0":            {kwokAgent{"v0.7.0", false}, true},
		"kwok@v0.8.0-tuned":      {kwokAgent{"v0.8.0", true}, true},
		"kwok@v0.9.0-rc.1":       {kwokAgent{"v0.9.0-rc.1", false}, true},
		"kwok@v0.9.0-rc.1-tuned": {kwokAgent{"v0.9.0-rc.1", true}, true},
		"nodelet":                {},
		"kwok":                   {},
		"kwok-tuned":             {},
		"kwok@":                  {},
		"kwok@-tuned":            {},
	} {
		k, ok := parseKwokAgent(agent)
		if k != want.k || ok != want.ok {
			t.Errorf("parseKwokAgent(%q) = %+v, %v, want %+v, %v", agent, k, ok, want.k, want.ok)
		}
	}
}

func TestNormalizeAgent(t *testing.T) {
	for agent, want := range map[string]string{
		"kwok": "kwok@v0.8.0", "kwok-tuned": "kwok@v0.8.0-tuned", "kwok@v0.7.0-tuned": "kwok@v0.7.0-tuned", "nodelet": "nodelet",
	} {
		if got := normalizeAgent(agent, "v0.8.0"); got != want {
			t.Errorf("normalizeAgent(%q) = %q, want %q", agent, got, want)
		}
	}
}

// TestTunedKwokParallelism checks tuned kwok against nodelet's worker
// counts at the bench's scales: its node workers (one per 4 nodes, 8 to
// 1,024) for both node options, its 64 pod workers for pods.
func TestTunedKwokParallelism(t *testing.T) {
	for nodes, want := range map[int]kwokParallelism{
		20:    {8, 8, 64},
		1000:  {250, 250, 64},
		2500:  {625, 625, 64},
		5000:  {1024, 1024, 64},
		10000: {1024, 1024, 64},
	} {
		if got := tunedKwokParallelism(nodes); got != want {
			t.Errorf("tunedKwokParallelism(%d) = %+v, want %+v", nodes, got, want)
		}
	}
}

// TestKwokConfiguration reads the file the tuned kwok gets as kwok reads
// it: a KwokConfiguration of config.kwok.x-k8s.io/v1alpha1 with the three
// parallelisms under kwok's own names, and every other option already at
// kwok's default (kwok v0.8.0 does not default a file's options, so one
// left out is not at its default).
func TestKwokConfiguration(t *testing.T) {
	for _, version := range []string{"v0.8.0", "v0.7.0"} {
		var got kwokconfig.KwokConfiguration
		if err := yaml.UnmarshalStrict(kwokConfiguration(version, tunedKwokParallelism(1000)), &got); err != nil {
			t.Fatal(err)
		}
		if got.APIVersion != "config.kwok.x-k8s.io/v1alpha1" || got.Kind != "KwokConfiguration" {
			t.Errorf("apiVersion %q, kind %q; want config.kwok.x-k8s.io/v1alpha1 KwokConfiguration", got.APIVersion, got.Kind)
		}
		o := got.Options
		if o.NodeLeaseParallelism != 250 || o.NodePlayStageParallelism != 250 || o.PodPlayStageParallelism != 64 {
			t.Errorf("%s: parallelisms = %d, %d, %d; want 250, 250, 64", version, o.NodeLeaseParallelism, o.NodePlayStageParallelism, o.PodPlayStageParallelism)
		}
		defaulted := got.DeepCopy()
		kwokconfig.SetObjectDefaults_KwokConfiguration(defaulted)
		if diff := cmp.Diff(defaulted, &got); diff != "" {
			t.Errorf("%s: options left to kwok's defaulting, which v0.8.0 does not do for a file (-defaulted +written):\n%s", version, diff)
		}
	}
}

func TestSimAgentSetting(t *testing.T) {
	s, err := simAgentSetting("kwok@v0.8.0-tuned", 2500, fastStages)
	if err != nil {
		t.Fatal(err)
	}
	if s.Values["nodeLeaseParallelism"] != 625 || s.Values["nodePlayStageParallelism"] != 625 || s.Values["podPlayStageParallelism"] != 64 {
		t.Errorf("tuned kwok at 2,500 nodes: %v", s.Values)
	}
	if !strings.Contains(s.Summary, "nodeLeaseParallelism 625") {
		t.Errorf("summary %q does not name the setting", s.Summary)
	}
	s, err = simAgentSetting("kwok@v0.7.0", 2500, fastStages)
	if err != nil {
		t.Fatal(err)
	}
	if s.Values["nodeLeaseParallelism"] != 4 || !strings.HasPrefix(s.Summary, "kwok defaults") {
		t.Errorf("default kwok: %+v", s)
	}
	s, err = simAgentSetting("nodelet", 5000, fastStages)
	if err != nil {
		t.Fatal(err)
	}
	if s.Values["nodeWorkers"] != 1024 || s.Values["podWorkers"] != 64 || s.Values["kubeAPIQPS"] != 5000 {
		t.Errorf("nodelet at 5,000 nodes: %v", s.Values)
	}
	if _, err := simAgentSetting("kubelet", 10, fastStages); err == nil || !strings.Contains(err.Error(), `"kubelet"`) {
		t.Errorf("an unknown agent: error %v, want one naming it", err)
	}
}

func TestCRIAgentSetting(t *testing.T) {
	for agent, want := range map[string][2]int{"kubelet": {50, 100}, "kubelet-matched": {5000, 10000}, "nodelet": {5000, 10000}} {
		s, err := criAgentSetting(agent)
		if err != nil {
			t.Fatal(err)
		}
		// kubeletArgs writes these values under these keys into the
		// kubelet's configuration file.
		if len(s.Values) != 2 || s.Values["kubeAPIQPS"] != want[0] || s.Values["kubeAPIBurst"] != want[1] {
			t.Errorf("%s: %v, want kubeAPIQPS %d and kubeAPIBurst %d", agent, s.Values, want[0], want[1])
		}
	}
	if _, err := criAgentSetting("kwok"); err == nil {
		t.Error("an unknown cri agent: no error")
	}
}
