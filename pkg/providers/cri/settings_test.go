package cri

import (
	"strings"
	"testing"
	"time"
)

func TestNodeSettingsDefaults(t *testing.T) {
	s := nodeSettings{NodeName: "n", MemoryCapacity: 1}.withDefaults()
	if s.PodLogsDir != "/var/log/pods" || s.CPUCFSQuotaPeriod != 100*time.Millisecond || s.SeccompProfileRoot != "/var/lib/nodelet/seccomp" {
		t.Errorf("defaults: %+v", s)
	}
	if err := s.validate(); err != nil {
		t.Errorf("defaulted settings invalid: %v", err)
	}
	kept := nodeSettings{PodLogsDir: "/logs", CPUCFSQuotaPeriod: 50 * time.Millisecond, SeccompProfileRoot: "/sc"}.withDefaults()
	if kept.PodLogsDir != "/logs" || kept.CPUCFSQuotaPeriod != 50*time.Millisecond || kept.SeccompProfileRoot != "/sc" {
		t.Errorf("set fields overwritten: %+v", kept)
	}
}

func TestNodeSettingsValidate(t *testing.T) {
	tests := []struct {
		name   string
		change func(*nodeSettings)
		want   []string
	}{
		{"no node name", func(s *nodeSettings) { s.NodeName = "" }, []string{"node name"}},
		{"no memory", func(s *nodeSettings) { s.MemoryCapacity = 0 }, []string{"memory capacity"}},
		{"relative paths", func(s *nodeSettings) { s.PodLogsDir, s.SeccompProfileRoot = "logs", "sc" }, []string{`"logs"`, `"sc"`}},
		{"period", func(s *nodeSettings) { s.CPUCFSQuotaPeriod = 2 * time.Second }, []string{"CPU CFS quota period"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := nodeSettings{NodeName: "n", MemoryCapacity: 1}.withDefaults()
			tt.change(&s)
			err := s.validate()
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}
