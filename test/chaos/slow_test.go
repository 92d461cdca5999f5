package chaos

import (
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/nodelet/nodelet/test/fault"
)

// TestSlowAPIKeepsLeases: for 5 minutes every request of an agent of 1,000
// sim nodes reaches the API server 2 seconds late, while it runs 200 pods
// and 50 of them are deleted and 50 created. Not one lease may lapse nor
// node go NotReady; the pods it ran run on, and every delete and create
// lands within the slow span.
func TestSlowAPIKeepsLeases(t *testing.T) {
	const nodes, delay, span = 1000, 2 * time.Second, 5 * time.Minute
	r := begin(t, fmt.Sprintf("slow API (+%s a request) for %s", delay, span))
	prefix := name("slow")
	proxy, kubeconfig, err := fault.ProxyKubeconfig(cp.Kubeconfig(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	sim := startAgent(t, prefix, agentOptions{provider: "sim", nodes: nodes, kubeconfig: kubeconfig})
	waitReady(t, 3*time.Minute, sim)
	ns := newNamespace(t, "slow")
	o := r.observe(ns, prefix, nil)
	// The pods spread over the nodes, one in five.
	on := func(i int) string { return sim.names()[i*5%nodes] }
	first := podNames("sim", 0, 200)
	for i, n := range first {
		create(t, simPod(ns, n, on(i)))
	}
	waitRunning(t, ns, 2*time.Minute, first...)
	pods, _, err := running(ns)
	if err != nil {
		t.Fatal(err)
	}
	deleted, kept := first[:50], first[50:]
	starts := startTimes(pods, kept...)

	proxy.Slow(delay)
	slowed := time.Now()
	remove(t, o, ns, deleted...)
	created := podNames("sim", 200, 50)
	for i, n := range created {
		create(t, simPod(ns, n, on(200+i)))
	}
	for time.Since(slowed) < span {
		if exited, err := sim.Exited(); exited {
			t.Fatalf("the agent exited: %v\n%s", err, lastLines(sim.LogText(), 20))
		}
		time.Sleep(5 * time.Second)
	}
	stale := staleLeases(sim.names(), time.Now().Add(-40*time.Second))
	// Landed within the span: looked at once, still slow.
	pods, _, err = running(ns)
	if err != nil {
		t.Fatal(err)
	}
	var left, notRunning []string
	for _, n := range deleted {
		if pods[n] != nil {
			left = append(left, n)
		}
	}
	for _, n := range append(append([]string(nil), kept...), created...) {
		if pods[n] == nil || !isRunning(pods[n]) {
			notRunning = append(notRunning, n)
		}
	}
	proxy.Slow(0)
	if len(stale) > 0 {
		t.Errorf("%d leases not renewed in the last 40s of the slow API: %v", len(stale), head(stale, 5))
	}
	if len(left) > 0 {
		t.Errorf("%d pods deleted as the API slowed still in it %s later: %v", len(left), span, head(left, 5))
	}
	if len(notRunning) > 0 {
		t.Errorf("%d pods not Running at the end of the slow API (%d created as it slowed): %v", len(notRunning), len(created), head(notRunning, 5))
	}
	if now := startTimes(pods, kept...); !maps.Equal(now, starts) {
		t.Errorf("start times of the kept pods' containers changed:\nbefore %v\nafter  %v", starts, now)
	}
	r.finish(limits{}, fmt.Sprintf("%d sim nodes, %d pods; of %d deletes and %d creates as it slowed, %d and %d landed within it",
		nodes, len(first), len(deleted), len(created), len(deleted)-len(left), len(created)-countIn(notRunning, created)))
}
