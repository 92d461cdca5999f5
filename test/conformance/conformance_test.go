package conformance

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestReadJUnit(t *testing.T) {
	const doc = `<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="4">
  <testsuite name="Kubernetes e2e suite" tests="4" time="42.5">
    <testcase name="[SynchronizedBeforeSuite]" status="passed" time="1"></testcase>
    <testcase name="[sig-node] Pods [It] should get a host IP [NodeConformance] [Conformance]" status="passed" time="3.5"></testcase>
    <testcase name="[sig-storage] ConfigMap [It] should be consumable [NodeConformance]" status="failed" time="5">
      <failure message="expected data-1" type="failed">boom</failure>
    </testcase>
    <testcase name="[sig-node] Lease [It] lease API [Conformance]" status="skipped" time="0"><skipped message="skipped"></skipped></testcase>
  </testsuite>
</testsuites>`
	path := filepath.Join(t.TempDir(), "junit_01.xml")
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := ReadJUnit(path)
	if err != nil {
		t.Fatal(err)
	}
	if s.Passed != 1 || s.Failed != 1 || s.Skipped != 1 || s.Duration != 42500*time.Millisecond {
		t.Errorf("summary %+v", s)
	}
	if f := s.Failures(); len(f) != 1 || Group(f[0]) != "[sig-storage] ConfigMap" {
		t.Errorf("failures %v", f)
	}
	if g := Group("[It] [sig-node] Container Runtime blackbox test x"); g != "[sig-node] Container Runtime" {
		t.Errorf("group %q", g)
	}
}

func TestSelection(t *testing.T) {
	skip := regexp.MustCompile(SkipRegexp())
	for name, skipped := range map[string]bool{
		"[sig-node] Pods [It] should get a host IP [NodeConformance] [Conformance]": false,
		"[sig-node] Foo [Disruptive] [It] reboots [NodeConformance]":                false,
		"[sig-node] Foo [Flaky] [It] flakes [NodeConformance]":                      true,
		"[sig-node] Bar [Feature:SidecarContainers] [It] x [NodeConformance]":       true,
		"[sig-node] [FeatureGate:SidecarContainers] Baz [It] x [NodeConformance]":   false,
	} {
		if skip.MatchString(name) != skipped {
			t.Errorf("%q: skipped %v, want %v", name, !skipped, skipped)
		}
	}
	focus := regexp.MustCompile(SmokeFocus())
	for _, name := range Smoke {
		if !focus.MatchString("[sig-x] " + name + " [NodeConformance]") {
			t.Errorf("the smoke focus does not match %q", name)
		}
	}
}

// TestSkipsAreDocumented checks that docs/conformance.md lists exactly the
// skips of Skips and of NodeSkips, with their reasons, each between its
// two markers.
func TestSkipsAreDocumented(t *testing.T) {
	const path = "../../docs/conformance.md"
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	for _, tc := range []struct{ name, start, end, table string }{
		{"Skips", SkipTableStart, SkipTableEnd, SkipTable()},
		{"NodeSkips", NodeSkipTableStart, NodeSkipTableEnd, NodeSkipTable()},
	} {
		start := strings.Index(doc, tc.start)
		end := strings.Index(doc, tc.end)
		if start < 0 || end < start {
			t.Errorf("%s: no table of %s between %q and %q", path, tc.name, tc.start, tc.end)
			continue
		}
		if got, want := doc[start+len(tc.start):end], "\n"+tc.table; got != want {
			t.Errorf("%s: the table of %s is\n%s\nwant\n%s", path, tc.name, got, want)
		}
	}
}

// TestNodeSelection checks the node conformance run's skips against spec
// names of e2e_node.test.
func TestNodeSelection(t *testing.T) {
	focus, skip := regexp.MustCompile(NodeFocus), regexp.MustCompile(NodeSkipRegexp())
	for name, run := range map[string]bool{
		"[sig-node] Summary API [NodeConformance] when querying /stats/summary should report resource usage through the stats api":                                                                                           true,
		"[sig-node] MirrorPod when create a mirror pod should be updated when static pod updated [NodeConformance]":                                                                                                          true,
		"[sig-node] Kubelet Endpoints [NodeConformance] [Serial] should return APIVersion and Kind fields in /configz":                                                                                                       true,
		"[sig-node] Kubelet Endpoints [NodeConformance] [Serial] when config is updated should be reflected in /configz":                                                                                                     false,
		"[sig-node] GarbageCollect [Serial] [NodeConformance] Garbage Collection Test: One Non-restarting Container Should eventually garbage collect containers when we exceed the number of dead containers per container": true,
		"[sig-node] ImageGarbageCollect [Serial] [NodeConformance] when ImageMaximumGCAge is set should GC unused images":                                                                                                    false,
		"[sig-node] MirrorPod [Serial] when kubelet restarts should not change container status [NodeConformance]":                                                                                                           false,
		"[sig-node] [NodeConformance] [Serial] Containers Lifecycle when A node running restartable init containers reboots should restart the containers in right order after the node reboot":                              false,
		"[sig-node] Restart [Serial] [Slow] [Disruptive] Container Runtime should restart all containers [NodeConformance]":                                                                                                  false,
		"[sig-node] MirrorPod with EnvFiles [NodeConformance] [FeatureGate:EnvFiles] [Alpha] [Feature:OffByDefault] should consume":                                                                                          false,
		"[sig-node] Pods should get a host IP [NodeConformance] [Conformance]":                                                                                                                                               true,
		"[sig-node] Lease lease API should be available [Conformance]":                                                                                                                                                       false,
	} {
		if got := focus.MatchString(name) && !skip.MatchString(name); got != run {
			t.Errorf("%q: run %v, want %v", name, got, run)
		}
	}
	// The node smoke set is part of the selection, and its focus selects
	// each of its specs and no other.
	smoke := regexp.MustCompile(NodeSmokeFocus())
	for _, name := range NodeSmoke {
		name += " [NodeConformance]"
		if !focus.MatchString(name) || skip.MatchString(name) || !smoke.MatchString(name) {
			t.Errorf("node smoke spec %q: not run by the selection or not matched by its focus", name)
		}
	}
	if smoke.MatchString("[sig-node] MirrorPod when create a mirror pod should be recreated when mirror pod gracefully deleted [NodeConformance]") {
		t.Errorf("the node smoke focus selects a spec it does not name")
	}
	args := strings.Join(NodeE2EArgs(NodeOptions{Host: "https://127.0.0.1:6443", BearerToken: "t", NodeName: "n"}), " ")
	for _, want := range []string{"--conformance=true", "--start-services=false", "--prepull-images=false", "--host=https://127.0.0.1:6443", "--bearer-token=t"} {
		if !strings.Contains(args, want) {
			t.Errorf("node e2e args %q lack %q", args, want)
		}
	}
}
