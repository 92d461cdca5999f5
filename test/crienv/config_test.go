package crienv

import (
	"strings"
	"testing"
)

// The RuntimeClass handler the Kubernetes e2e tests expect preconfigured,
// "test-handler", runs runc as the default handler does (the node e2e
// suite's PodOverhead spec failed with "no runtime for test-handler").
func TestConfigHasTheTestHandler(t *testing.T) {
	cfg := containerdConfig(newLayout("/tmp/x"), Options{Runc: "/usr/sbin/runc"})
	for _, want := range []string{
		`[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.test-handler]`,
		`[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.test-handler.options]`,
	} {
		if !strings.Contains(cfg, want) {
			t.Errorf("config lacks %s", want)
		}
	}
	if n := strings.Count(cfg, `BinaryName = "/usr/sbin/runc"`); n != 2 {
		t.Errorf("runc is the binary of %d handlers, want 2 (runc, test-handler)", n)
	}
}
