package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

func TestChildrenOf(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skipf("no sleep: %v", err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if children := childrenOf(os.Getpid()); !children[cmd.Process.Pid] {
		t.Errorf("childrenOf(self) = %v, want it to hold %d", children, cmd.Process.Pid)
	}
	if children := childrenOf(cmd.Process.Pid); len(children) != 0 {
		t.Errorf("childrenOf(sleep) = %v, want none", children)
	}
}

func TestLoadConfigKeepsTheFileApart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nodelet.yaml")
	content := "apiVersion: nodelet.io/v1alpha1\nkind: NodeletConfiguration\nnodeName: from-file\npingInterval: 20s\n"
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	var o options
	cfg, file, _, err := loadConfig(&o, []string{"--config", path, "--node-name", "from-flag"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NodeName != "from-flag" || cfg.PingInterval.Duration != 20*time.Second || cfg.NodeLeaseDurationSeconds != 40 {
		t.Errorf("config = node %q ping %s lease %d, want the flag over the file over the defaults", cfg.NodeName, cfg.PingInterval.Duration, cfg.NodeLeaseDurationSeconds)
	}
	if file == nil || file.NodeName != "from-file" || file.NodeLeaseDurationSeconds != 0 {
		t.Errorf("file = %+v, want the file as decoded, without flags or defaults", file)
	}
}
