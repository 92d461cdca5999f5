package main

import (
	"slices"
	"testing"
)

func TestParseScales(t *testing.T) {
	got, err := parseScales("1000/5000, 5000/10000")
	if err != nil {
		t.Fatal(err)
	}
	if want := []scale{{1000, 5000}, {5000, 10000}}; !slices.Equal(got, want) {
		t.Errorf("parseScales = %v, want %v", got, want)
	}
	for _, bad := range []string{"", "1000", "1000/", "x/5", "0/5", "5/-1", "1000/5000,"} {
		if _, err := parseScales(bad); err == nil {
			t.Errorf("parseScales(%q) = nil error, want one", bad)
		}
	}
}

func TestKwokVersion(t *testing.T) {
	for agent, want := range map[string]string{"kwok@v0.7.0": "v0.7.0", "nodelet": "", "kwok": "", "kwok@": ""} {
		if got := kwokVersion(agent); got != want {
			t.Errorf("kwokVersion(%q) = %q, want %q", agent, got, want)
		}
	}
}
