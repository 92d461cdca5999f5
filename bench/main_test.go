package main

import (
	"maps"
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

func TestRequestsPer(t *testing.T) {
	before := map[string]float64{"POST pods": 10, "GET nodes": 5}
	after := map[string]float64{"POST pods": 110, "GET nodes": 5, "PATCH pods/status": 150, "GET leases": 0.04}
	got := requestsPer(before, after, 100)
	want := map[string]float64{"POST pods": 1, "PATCH pods/status": 1.5}
	if !maps.Equal(got, want) {
		t.Errorf("requestsPer = %v, want %v (kinds that did not move, or below a thousandth, left out)", got, want)
	}
	if top := topRequests(got, 1); top != "PATCH pods/status 1.500" {
		t.Errorf("topRequests = %q, want the commonest alone", top)
	}
	if top := topRequests(got, 5); top != "PATCH pods/status 1.500, POST pods 1.000" {
		t.Errorf("topRequests = %q", top)
	}
}
