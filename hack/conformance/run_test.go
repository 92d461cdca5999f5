package main

import (
	"regexp"
	"testing"

	"github.com/nodelet/nodelet/test/conformance"
)

// The node smoke set of make test runs through this runner's --focus,
// ANDed with the node suite's selection: it must select each of its specs
// by their full names, and nothing the selection leaves out.
func TestAndFocusSelectsTheNodeSmokeSet(t *testing.T) {
	focus := regexp.MustCompile(andFocus(conformance.NodeFocus, conformance.NodeSmokeFocus()))
	for _, name := range conformance.NodeSmoke {
		if full := name + " [NodeConformance]"; !focus.MatchString(full) {
			t.Errorf("the focus %s does not select %q", focus, full)
		}
	}
	if focus.MatchString(conformance.NodeSmoke[0] + " [Serial]") {
		t.Errorf("the focus selects a spec outside the selection")
	}
	if got := andFocus(conformance.NodeFocus, ""); got != conformance.NodeFocus {
		t.Errorf("andFocus without an extra focus = %q", got)
	}
}

func TestVerdicts(t *testing.T) {
	ok := report{Provider: "cri", Summary: conformance.Summary{Passed: 3}}
	tests := []struct {
		name string
		r    report
		want int
	}{
		{"all passed", ok, 0},
		{"a spec failed", report{Provider: "cri", Summary: conformance.Summary{Passed: 2, Failed: 1}}, 1},
		{"nothing ran", report{Provider: "cri", Summary: conformance.Summary{Skipped: 40}}, 1},
		{"something left behind", report{Provider: "cri", Summary: conformance.Summary{Passed: 3}, Leaks: []string{"pod x"}}, 1},
	}
	for _, tt := range tests {
		if got := verdicts([]report{tt.r}); len(got) != tt.want {
			t.Errorf("%s: verdicts = %q, want %d", tt.name, got, tt.want)
		}
	}
}
