package main

import (
	"bytes"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
)

// retained keeps what TestSummarizeHeap allocates in use.
var retained [][]byte

func allocateForTheProfile() {
	for range 64 {
		retained = append(retained, make([]byte, 64<<10))
	}
}

// allocateLess and allocateLeast give the ranking two more functions
// whose allocations stay in use, whatever else the test binary has
// freed by the time of the profile (with only two, the test failed now
// and then).
func allocateLess()  { retained = append(retained, make([]byte, 1<<20)) }
func allocateLeast() { retained = append(retained, make([]byte, 256<<10)) }

func TestSummarizeHeap(t *testing.T) {
	old := runtime.MemProfileRate
	runtime.MemProfileRate = 1
	defer func() { runtime.MemProfileRate = old }()
	allocateForTheProfile()
	allocateLess()
	allocateLeast()
	runtime.GC()
	var buf bytes.Buffer
	if err := pprof.Lookup("heap").WriteTo(&buf, 0); err != nil {
		t.Fatal(err)
	}
	s, err := summarizeHeap(&buf, 3)
	if err != nil {
		t.Fatal(err)
	}
	if s.InUseMiB < 4 || len(s.ByFunction) != 3 || len(s.ByLine) != 3 {
		t.Fatalf("summary %+v, want at least 4 MiB in use and 3 entries of each", s)
	}
	if f := s.ByFunction[0]; !strings.HasSuffix(f.Name, "allocateForTheProfile") || f.MiB < 4 || f.Percent <= 0 {
		t.Errorf("top function %+v, want allocateForTheProfile with its 4 MiB", f)
	}
	if l := s.ByLine[0]; !strings.Contains(l.Name, "allocateForTheProfile heap_test.go:") {
		t.Errorf("top line %+v, want one of allocateForTheProfile in heap_test.go", l)
	}
	for i := 1; i < len(s.ByFunction); i++ {
		if s.ByFunction[i].MiB > s.ByFunction[i-1].MiB {
			t.Errorf("functions not ranked largest first: %+v", s.ByFunction)
		}
	}
}

func TestDeletionRequests(t *testing.T) {
	before := map[string]float64{"DELETE pods 200": 5, "PATCH pods/status 200": 100, "POST pods 201": 10}
	after := map[string]float64{
		"DELETE pods 200":       5 + 10 + 10, // the bench's 10, the agent's 10
		"DELETE pods 404":       3,
		"PATCH pods/status 200": 110,
		"PATCH pods/status 409": 1,
		"POST pods 201":         10,
	}
	status, deletes, notFound := deletionRequests(before, after, 10)
	if status != 1.1 || deletes != 1.3 || notFound != 0.3 {
		t.Errorf("per pod %.3f status writes, %.3f deletes, %.3f 404; want 1.1, 1.3, 0.3", status, deletes, notFound)
	}
}
