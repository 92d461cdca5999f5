package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nodelet/nodelet/pkg/config"
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

func TestEvictionHardFlagReplacesTheSet(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nodelet.yaml")
	content := "apiVersion: nodelet.io/v1alpha1\nkind: NodeletConfiguration\nevictionHard:\n  nodefs.available: 20%\n  pid.available: 10%\n"
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want map[string]string
	}{
		{[]string{"--node-name", "n"}, config.DefaultEvictionHard()},
		{[]string{"--node-name", "n", "--config", path}, map[string]string{"nodefs.available": "20%", "pid.available": "10%"}},
		{[]string{"--node-name", "n", "--config", path, "--eviction-hard", "memory.available<1Gi"}, map[string]string{"memory.available": "1Gi"}},
		{[]string{"--node-name", "n", "--eviction-hard", "memory.available<100Mi, nodefs.available<0%", "--eviction-hard", "memory.available<2Gi"},
			map[string]string{"memory.available": "2Gi", "nodefs.available": "0%"}},
	} {
		var o options
		cfg, _, _, err := loadConfig(&o, tc.args)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if !reflect.DeepEqual(cfg.EvictionHard, tc.want) {
			t.Errorf("%v: evictionHard = %v, want %v", tc.args, cfg.EvictionHard, tc.want)
		}
	}
	var o options
	if _, _, _, err := loadConfig(&o, []string{"--eviction-hard", "memory.available=1Gi"}); err == nil || !strings.Contains(err.Error(), "eviction-hard") {
		t.Errorf("a malformed --eviction-hard: %v, want an error naming the flag", err)
	}
}
