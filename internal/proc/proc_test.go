package proc

import (
	"os"
	"testing"
	"time"
)

// TestThisProcess reads this test's own process: its name, some memory,
// and CPU that grows with work done.
func TestThisProcess(t *testing.T) {
	pid := os.Getpid()
	comm, f, err := Stat(pid)
	if err != nil || comm == "" || len(f) < 13 {
		t.Errorf("Stat = %q, %d fields, %v: want the name and at least 13 fields", comm, len(f), err)
	}
	before, err := CPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		if now, err := CPU(pid); err != nil || now > before {
			break
		}
	}
	after, err := CPU(pid)
	if err != nil || after <= before {
		t.Errorf("CPU %s then %s (%v): want it to grow with a busy loop", before, after, err)
	}
	for _, field := range []string{"VmRSS", "VmHWM"} {
		if kb, err := StatusKB(pid, field); err != nil || kb < 1024 {
			t.Errorf("%s = %d kB (%v): want at least 1 MiB", field, kb, err)
		}
	}
	if _, err := StatusKB(pid, "NoSuchField"); err == nil {
		t.Error("StatusKB of a field /proc does not have: want an error")
	}
}
