package chaos

import (
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/test/fault"
)

// TestPartitionDuringChurn: the agents lose the API server for 60 seconds
// (a cut, not a clean close) while pods are deleted and created. No pod
// may leave the API before its containers stopped; every change made
// during the partition lands after it; pods keep running throughout; the
// nodes go NotReady at the grace period and Ready again after.
func TestPartitionDuringChurn(t *testing.T) {
	r := begin(t, "60s partition during deletes and creates")
	prefix := name("partition")
	proxy, kubeconfig, err := fault.ProxyKubeconfig(cp.Kubeconfig(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	sim := startAgent(t, prefix+"-sim", agentOptions{provider: "sim", nodes: 5, kubeconfig: kubeconfig})
	agents := []*node{sim}
	var process *node
	if isRoot() {
		process = startAgent(t, prefix+"-process", agentOptions{provider: "process", kubeconfig: kubeconfig,
			extra: []string{"--address", "127.0.0.1"}})
		agents = append(agents, process)
	}
	waitReady(t, time.Minute, agents...)
	ns := newNamespace(t, "partition")
	out := t.TempDir()

	simNames := podNames("sim", 0, 40)
	for i, n := range simNames {
		create(t, simPod(ns, n, sim.names()[i%sim.nodes]))
	}
	var procNames []string
	if process != nil {
		procNames = podNames("process", 0, 6)
		for _, n := range procNames {
			create(t, processPod(ns, n, process.name, out))
		}
	}
	waitRunning(t, ns, 2*time.Minute, append(append([]string(nil), simNames...), procNames...)...)

	// A process pod that leaves the API while its processes still run was
	// deleted before its containers stopped.
	var mu sync.Mutex
	var early []string
	o := r.observe(ns, prefix, func(p *corev1.Pod) {
		if p.Spec.NodeName == "" || process == nil || p.Spec.NodeName != process.name {
			return
		}
		if pids := hostPIDs(token(p.Namespace, p.Name)); len(pids) > 0 {
			mu.Lock()
			early = append(early, fmt.Sprintf("%s (PIDs %v)", p.Name, pids))
			mu.Unlock()
		}
	})
	pods, _, err := running(ns)
	if err != nil {
		t.Fatal(err)
	}

	proxy.Cut()
	cut := time.Now()
	deletedSim, keptSim := simNames[:20], simNames[20:]
	remove(t, o, ns, deletedSim...)
	newSim := podNames("sim", 40, 20)
	for i, n := range newSim {
		create(t, simPod(ns, n, sim.names()[i%sim.nodes]))
	}
	var deletedProc, keptProc, newProc []string
	if process != nil {
		deletedProc, keptProc = procNames[:3], procNames[3:]
		remove(t, o, ns, deletedProc...)
		newProc = podNames("process", 6, 2)
		for _, n := range newProc {
			create(t, processPod(ns, n, process.name, out))
		}
	}
	ids := containerIDs(pods, append(append([]string(nil), keptSim...), keptProc...)...)

	// Throughout the partition, every process pod — the deleted ones
	// too, whose deletion the agent cannot see yet — keeps running.
	var names []string
	for _, a := range agents {
		names = append(names, a.names()...)
	}
	var notReadyAfter time.Duration
	for time.Since(cut) < time.Minute {
		for _, n := range procNames {
			if len(hostPIDs(token(ns, n))) == 0 {
				t.Fatalf("process pod %s stopped running %s into the partition", n, time.Since(cut).Round(time.Second))
			}
		}
		if notReadyAfter == 0 && len(notReadyNodes(names)) == len(names) {
			notReadyAfter = time.Since(cut)
		}
		time.Sleep(time.Second)
	}
	if notReadyAfter == 0 {
		t.Errorf("the nodes did not all go NotReady during a 60s partition (not Ready now: %v)", notReadyNodes(names))
	}
	proxy.Heal()
	healed := time.Now()

	waitGone(t, ns, 2*time.Minute, append(append([]string(nil), deletedSim...), deletedProc...)...)
	waitRunning(t, ns, 2*time.Minute, append(append(append(append([]string(nil), keptSim...), newSim...), keptProc...), newProc...)...)
	waitReady(t, time.Minute, agents...)
	landed := time.Since(healed)

	pods, _, err = running(ns)
	if err != nil {
		t.Fatal(err)
	}
	if now := containerIDs(pods, append(append([]string(nil), keptSim...), keptProc...)...); !maps.Equal(now, ids) {
		t.Errorf("container IDs of the kept pods changed:\nbefore %v\nafter  %v", ids, now)
	}
	for _, n := range append(keptProc, newProc...) {
		if s := starts(t, out, n); s != 1 {
			t.Errorf("process pod %s started %d times, want once", n, s)
		}
	}
	mu.Lock()
	if len(early) > 0 {
		t.Errorf("pods deleted from the API before their containers stopped: %v", early)
	}
	mu.Unlock()
	// The cut outlasts a lease (40s) and the grace period (20s): each
	// node's lease lapses once, and each node goes NotReady once.
	r.finish(limits{lapses: exactly(len(names)), notReady: exactly(len(names))},
		fmt.Sprintf("%d deletes and %d creates during the cut landed %s after it; nodes NotReady %s into it; %d pods deleted before their containers stopped",
			len(deletedSim)+len(deletedProc), len(newSim)+len(newProc), landed.Round(time.Second), notReadyAfter.Round(time.Second), len(early)))
}
