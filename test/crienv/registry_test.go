package crienv

import (
	"os"
	"path/filepath"
	"testing"
)

// Stop leaves nothing of the registry behind: its directory (ready file
// and log) went with it, where it once stayed in /tmp after every run.
func TestRegistryStopRemovesItsDirectory(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "registry")
	script := "#!/bin/sh\nwhile [ $# -gt 0 ]; do [ \"$1\" = --ready-file ] && echo 127.0.0.1:1 > \"$2\"; shift; done\nexec sleep 60\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	r, err := StartRegistry(bin, dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(r.dir); err != nil {
		t.Fatalf("the registry's directory while it runs: %v", err)
	}
	r.Stop()
	if _, err := os.Stat(r.dir); !os.IsNotExist(err) {
		t.Errorf("the registry's directory %s after Stop: %v, want it gone", r.dir, err)
	}
}
