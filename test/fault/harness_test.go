package fault

import "testing"

// FreePort never returns a port twice in one process, whatever the kernel
// hands out again: the chaos agents once shared a kubelet port.
func TestFreePortNeverRepeats(t *testing.T) {
	seen := map[int]bool{}
	for range 2000 {
		port := FreePort(t)
		if seen[port] {
			t.Fatalf("port %d returned twice", port)
		}
		seen[port] = true
	}
}
