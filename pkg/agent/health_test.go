package agent

import (
	"strings"
	"testing"
)

func TestHealthCheck(t *testing.T) {
	open, done := make(chan struct{}), make(chan struct{})
	close(done)
	for _, tc := range []struct {
		name               string
		registered, synced chan struct{}
		serving            chan struct{} // nil: no kubelet API
		want               []string      // parts of the error; none: healthy
	}{
		{name: "starting", registered: open, synced: open, want: []string{"nodes not registered", "pods not synced"}},
		{name: "registered", registered: done, synced: open, want: []string{"pods not synced"}},
		{name: "synced first", registered: open, synced: done, want: []string{"nodes not registered"}},
		{name: "healthy", registered: done, synced: done},
		{name: "kubelet API not serving", registered: done, synced: done, serving: open, want: []string{"kubelet API not serving"}},
		{name: "kubelet API serving", registered: done, synced: done, serving: done},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := health{registered: tc.registered, synced: tc.synced, serving: tc.serving}.check()
			if len(tc.want) == 0 {
				if err != nil {
					t.Errorf("check = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("check = nil, want an error naming %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("check = %v, want it to say %q", err, w)
				}
			}
		})
	}
}
