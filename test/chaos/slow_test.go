package chaos

import (
	"fmt"
	"testing"
	"time"

	"github.com/nodelet/nodelet/test/fault"
)

// TestSlowAPIKeepsLeases: for 5 minutes every request of an agent of 1,000
// sim nodes reaches the API server 2 seconds late. Not one lease may lapse.
func TestSlowAPIKeepsLeases(t *testing.T) {
	holdHost(t)
	const nodes, delay, span = 1000, 2 * time.Second, 5 * time.Minute
	prefix := name("slow")
	proxy, kubeconfig, err := fault.ProxyKubeconfig(cp.Kubeconfig(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	sim := startAgent(t, prefix, agentOptions{provider: "sim", nodes: nodes, kubeconfig: kubeconfig})
	waitReady(t, 3*time.Minute, sim)
	ns := newNamespace(t, "slow")
	o := observe(t, ns, prefix, nil)

	proxy.Slow(delay)
	deadline := time.Now().Add(span)
	for time.Now().Before(deadline) {
		if exited, err := sim.Exited(); exited {
			t.Fatalf("the agent exited: %v\n%s", err, lastLines(sim.LogText(), 20))
		}
		time.Sleep(5 * time.Second)
	}
	stale := staleLeases(sim.names(), time.Now().Add(-40*time.Second))
	proxy.Slow(0)
	if len(stale) > 0 {
		t.Errorf("%d leases not renewed in the last 40s of the slow API: %v", len(stale), head(stale, 5))
	}
	expectNone(t, o, false, false, false, true)
	report(t, fmt.Sprintf("slow API (+%s a request) for %s", delay, span), o.Counters(),
		fmt.Sprintf("%d sim nodes", nodes))
}
