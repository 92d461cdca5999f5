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
