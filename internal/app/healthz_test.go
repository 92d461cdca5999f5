package app

import (
	"strings"
	"testing"
)

func TestAgentHealth(t *testing.T) {
	open, done := make(chan struct{}), make(chan struct{})
	close(done)
	for _, tc := range []struct {
		name               string
		registered, synced chan struct{}
		want               []string // parts of the error; none: healthy
	}{
		{name: "starting", registered: open, synced: open, want: []string{"nodes not registered", "pods not synced"}},
		{name: "registered", registered: done, synced: open, want: []string{"pods not synced"}},
		{name: "synced first", registered: open, synced: done, want: []string{"nodes not registered"}},
		{name: "healthy", registered: done, synced: done},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := agentHealth(tc.registered, tc.synced, nil)
			if len(tc.want) == 0 {
				if err != nil {
					t.Errorf("agentHealth = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("agentHealth = nil, want an error naming %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("agentHealth = %v, want it to say %q", err, w)
				}
			}
		})
	}
}
