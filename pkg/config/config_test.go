package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestDefaultsAreValid(t *testing.T) {
	c := Default()
	c.NodeName = "n"
	if errs := c.Validate(); len(errs) != 0 {
		t.Errorf("defaults with a node name: %v", errs)
	}
	if c.NodeLeaseDurationSeconds != 40 || c.NodeStatusReportFrequency.Duration != 5*time.Minute || c.PingInterval.Duration != 10*time.Second {
		t.Errorf("timing defaults = %d s, %s, %s; want 40 s, 5m, 10s", c.NodeLeaseDurationSeconds, c.NodeStatusReportFrequency.Duration, c.PingInterval.Duration)
	}
	if c.Sim.Capacity.Cpu().String() != "32" || c.Sim.Capacity.Memory().String() != "256Gi" || c.Sim.Capacity.Pods().String() != "110" {
		t.Errorf("sim capacity defaults = %v", c.Sim.Capacity)
	}
}

func TestValidateNamesEveryField(t *testing.T) {
	c := Default()
	c.NodeName = "Bad_Name"
	c.NodeLeaseDurationSeconds = -1
	c.PingInterval.Duration = -time.Second
	c.Port = 70000
	c.Shard = "2/2"
	c.Provider = "docker"
	c.Sim.PodCIDR = "nope"
	errs := c.Validate()
	msg := errs.ToAggregate().Error()
	for _, field := range []string{"nodeName", "nodeLeaseDurationSeconds", "pingInterval", "port", "shard", "provider", "sim.podCIDR"} {
		if !strings.Contains(msg, field) {
			t.Errorf("validation errors do not name %s: %s", field, msg)
		}
	}
}

func TestParseShard(t *testing.T) {
	for _, tt := range []struct {
		in      string
		i, n    int
		wantErr bool
	}{
		{"0/1", 0, 1, false},
		{"1/2", 1, 2, false},
		{"2/2", 0, 0, true},
		{"-1/2", 0, 0, true},
		{"1/0", 0, 0, true},
		{"1/2x", 0, 0, true},
		{"a/b", 0, 0, true},
	} {
		i, n, err := ParseShard(tt.in)
		if (err != nil) != tt.wantErr || i != tt.i || n != tt.n {
			t.Errorf("ParseShard(%q) = %d, %d, %v", tt.in, i, n, err)
		}
	}
}

func TestLoadFileIsStrict(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte("apiVersion: nodelet.io/v1alpha1\nkind: NodeletConfiguration\nnodeName: a\nnodes: 3\nsim:\n  startDelay: 2s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := LoadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	if c.NodeName != "a" || c.Nodes != 3 || c.Sim.StartDelay.Duration != 2*time.Second {
		t.Errorf("loaded %+v", c)
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("nodeName: a\nnodeLables: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadFile(bad); err == nil || !strings.Contains(err.Error(), "nodeLables") || !strings.Contains(err.Error(), bad) {
		t.Errorf("unknown field: %v, want an error naming the field and the file", err)
	}
	if _, err := LoadFile(filepath.Join(dir, "missing.yaml")); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing file: %v", err)
	}
}
