package main

import (
	"os"
	"testing"
	"time"
)

// TestUsageOfThisProcess reads this test's own process: some memory, and
// CPU that grows with work done.
func TestUsageOfThisProcess(t *testing.T) {
	pid := os.Getpid()
	before, err := processCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		if now, err := processCPU(pid); err != nil || now > before {
			break
		}
	}
	after, err := processCPU(pid)
	if err != nil || after <= before {
		t.Errorf("CPU %s then %s (%v): want it to grow with a busy loop", before, after, err)
	}
	peak, err := peakRSS(pid)
	if err != nil || peak < 1<<20 {
		t.Errorf("peak RSS %d (%v): want at least 1 MiB", peak, err)
	}
}
