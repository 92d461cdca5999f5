package chaos

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const rolloutReplicas = 200

// TestAPIServerKilledDuringRollout: the API server is killed (SIGKILL), kept
// down for 10 seconds and started again while a 200-pod Deployment rolls
// out over sim nodes and process and cri pods run.
func TestAPIServerKilledDuringRollout(t *testing.T) {
	outageDuringRollout(t, "apiserver", 10*time.Second)
}

// TestEtcdKilledDuringRollout: the same with etcd, down for 25 seconds (more
// than the node monitor's grace period), its data kept; every node must be
// Ready again within one lease duration of the API answering.
func TestEtcdKilledDuringRollout(t *testing.T) {
	outageDuringRollout(t, "etcd", 25*time.Second)
}

func outageDuringRollout(t *testing.T, component string, down time.Duration) {
	r := begin(t, component+" killed during a rollout")
	prefix := name(component)
	sim := startAgent(t, prefix+"-sim", agentOptions{provider: "sim", nodes: 20, extra: []string{"--node-labels", "chaos/pool=" + prefix}})
	agents := []*node{sim}
	var process, cri *node
	out := t.TempDir()
	var real []string // the process and cri pods
	if isRoot() {
		process = startAgent(t, prefix+"-process", agentOptions{provider: "process", extra: []string{"--address", "127.0.0.1"}})
		agents = append(agents, process)
		env := criEnv(t)
		cri = startAgent(t, prefix+"-cri", agentOptions{provider: "cri", extra: []string{"--container-runtime-endpoint", env.Endpoint(),
			"--pod-logs-dir", t.TempDir(), "--address", "127.0.0.1"}})
		agents = append(agents, cri)
	}
	waitReady(t, 2*time.Minute, agents...)
	ns := newNamespace(t, component) // after the agents: deleted while they run
	if process != nil {
		for _, n := range podNames("process", 0, 3) {
			create(t, processPod(ns, n, process.name, out))
			real = append(real, n)
		}
		for _, n := range podNames("cri", 0, 2) {
			create(t, criPod(ns, n, cri.name))
			real = append(real, n)
		}
		waitRunning(t, ns, 2*time.Minute, real...)
	}
	pods, _, err := running(ns)
	if err != nil {
		t.Fatal(err)
	}
	ids := containerIDs(pods, real...)
	criBefore := criContainers(t, cri)

	r.observe(ns, prefix, nil)
	kubectl(t, fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: rollout, namespace: %s}
spec:
  replicas: %d
  selector: {matchLabels: {app: rollout}}
  template:
    metadata: {labels: {app: rollout}}
    spec:
      nodeSelector: {chaos/pool: %s}
      terminationGracePeriodSeconds: 2
      containers: [{name: main, image: registry.k8s.io/pause:3.10.2}]
`, ns, rolloutReplicas, prefix), "apply", "-f", "-")
	start := time.Now()
	eventually(t, 2*time.Minute, "the rollout under way", func() (bool, string) {
		_, n, err := running(ns)
		if err != nil {
			return false, err.Error()
		}
		return n > len(real), fmt.Sprintf("%d running", n)
	})

	if err := cp.Stop(component, true); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	<-time.After(down) // the outage itself
	if err := cp.Start(component); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "the API answers", func() (bool, string) {
		_, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(context.Background())
		return err == nil, fmt.Sprint(err)
	})
	answering := time.Now()

	var allReady time.Duration
	if component == "etcd" {
		var names []string
		for _, a := range agents {
			names = append(names, a.names()...)
		}
		eventually(t, 2*time.Minute, "every node Ready with its lease renewed since the API answers", func() (bool, string) {
			stale := staleLeases(names, answering)
			notReady := notReadyNodes(names)
			return len(stale) == 0 && len(notReady) == 0, fmt.Sprintf("leases not renewed: %v; not Ready: %v", head(stale, 5), head(notReady, 5))
		})
		allReady = time.Since(answering)
		if allReady > 40*time.Second {
			t.Errorf("every node Ready %s after the API answered again, more than one lease duration (40s)", allReady.Round(time.Second))
		}
	}
	eventually(t, 4*time.Minute, "the rollout completes", func() (bool, string) {
		d, err := client.AppsV1().Deployments(ns).Get(context.Background(), "rollout", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if d.Status.AvailableReplicas == rolloutReplicas {
			return true, ""
		}
		return false, fmt.Sprintf("%d of %d available; %s; %s", d.Status.AvailableReplicas, rolloutReplicas, podSummary(ns), readiness(ns, "app=rollout"))
	})
	rollout := time.Since(start)

	pods, _, err = running(ns)
	if err != nil {
		t.Fatal(err)
	}
	if now := containerIDs(pods, real...); !maps.Equal(now, ids) {
		t.Errorf("container IDs of the process and cri pods changed:\nbefore %v\nafter  %v", ids, now)
	}
	for _, n := range podNames("process", 0, 3) {
		if process != nil && starts(t, out, n) != 1 {
			t.Errorf("process pod %s started %d times, want once", n, starts(t, out, n))
		}
	}
	if after := criContainers(t, cri); !slices.Equal(after, criBefore) {
		t.Errorf("the runtime's containers changed:\nbefore %v\nafter  %v", criBefore, after)
	}
	var nodes int
	for _, a := range agents {
		nodes += len(a.names())
	}
	// The node controller marks nodes NotReady while no lease reaches it
	// for its grace period (20s): after the API server's outage too (its
	// own informers relist), each node at most once. A lease lapses only
	// where etcd's outage (25s) and its restart outlast it (40s), each at
	// most once.
	l := limits{notReady: atMost(nodes)}
	if component == "etcd" {
		l.lapses = atMost(nodes)
	}
	figures := fmt.Sprintf("%s down %s; rollout of %d in %s", component, answering.Sub(killed).Round(time.Second), rolloutReplicas, rollout.Round(time.Second))
	if component == "etcd" {
		figures += fmt.Sprintf("; all nodes Ready %s after the API answered", allReady.Round(time.Second))
	}
	r.finish(l, figures)
}

func isRoot() bool { return euid == 0 }

// podSummary counts the pods of ns by phase, and the pending ones by why
// they are not scheduled or not running, for a failure's message.
func podSummary(ns string) string {
	list, err := client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	counts := map[string]int{}
	for i := range list.Items {
		p := &list.Items[i]
		k := string(p.Status.Phase)
		if p.DeletionTimestamp != nil {
			k += "/deleting"
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status != corev1.ConditionTrue {
				k += "/unscheduled " + c.Reason + ": " + c.Message
			}
		}
		for _, c := range p.Status.ContainerStatuses {
			if c.State.Waiting != nil {
				k += "/waiting " + c.State.Waiting.Reason
			}
		}
		if p.Spec.NodeName == "" && len(p.Status.Conditions) == 0 {
			k += "/not seen by the scheduler"
		}
		counts[k]++
	}
	var out []string
	for k, n := range counts {
		out = append(out, fmt.Sprintf("%d %s", n, k))
	}
	slices.Sort(out)
	return strings.Join(out, "; ")
}

// readiness tells, for a rollout that does not complete, whether its pods
// are not Ready or the controllers have not seen them become so: the
// ReplicaSets' counts beside the pods that a read from etcd finds Ready,
// and the first of those that are not.
func readiness(ns, selector string) string {
	sets, err := client.AppsV1().ReplicaSets(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, rs := range sets.Items {
		out = append(out, fmt.Sprintf("replicaset %s: %d replicas, %d ready, %d available (generation %d observed %d)",
			rs.Name, rs.Status.Replicas, rs.Status.ReadyReplicas, rs.Status.AvailableReplicas, rs.Generation, rs.Status.ObservedGeneration))
	}
	pods, err := client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return err.Error()
	}
	ready := 0
	var not []string
	for i := range pods.Items {
		p := &pods.Items[i]
		if podReady(p) && p.DeletionTimestamp == nil {
			ready++
			continue
		}
		not = append(not, fmt.Sprintf("%s on %s (%s, %s)", p.Name, p.Spec.NodeName, p.Status.Phase, conditionSummary(p)))
	}
	out = append(out, fmt.Sprintf("pods Ready in etcd: %d of %d; not: %v", ready, len(pods.Items), head(not, 5)))
	return strings.Join(out, "; ")
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// conditionSummary is a pod's conditions as type=status, with when the
// last changed.
func conditionSummary(p *corev1.Pod) string {
	var out []string
	for _, c := range p.Status.Conditions {
		out = append(out, fmt.Sprintf("%s=%s@%s", c.Type, c.Status, c.LastTransitionTime.Format("15:04:05")))
	}
	return strings.Join(out, " ")
}

// criContainers are the cri node's containers in the runtime: ID and
// attempt, sorted.
func criContainers(t *testing.T, n *node) []string {
	t.Helper()
	if n == nil {
		return nil
	}
	var out []string
	for _, c := range runtimeContainers(t, n.name) {
		out = append(out, fmt.Sprintf("%s/%d %s", c.Id, c.Metadata.GetAttempt(), c.State))
	}
	slices.Sort(out)
	return out
}

// staleLeases are the nodes of names whose lease was last renewed before
// since (or cannot be read).
func staleLeases(names []string, since time.Time) []string {
	list, err := client.CoordinationV1().Leases(corev1.NamespaceNodeLease).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return []string{err.Error()}
	}
	renewed := map[string]time.Time{}
	for _, l := range list.Items {
		if l.Spec.RenewTime != nil {
			renewed[l.Name] = l.Spec.RenewTime.Time
		}
	}
	var out []string
	for _, n := range names {
		if renewed[n].Before(since) {
			out = append(out, n)
		}
	}
	return out
}
