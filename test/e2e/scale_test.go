package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// fleetNodes lists the nodes labelled e2e/fleet=fleet, and how many are Ready.
func fleetNodes(t *testing.T, fleet string) (total, ready int) {
	t.Helper()
	nodes, err := client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{LabelSelector: "e2e/fleet=" + fleet})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				ready++
			}
		}
	}
	return len(nodes.Items), ready
}

// cleanupFleet deletes the nodes and leases of a fleet of n nodes.
func cleanupFleet(t *testing.T, fleet string, n int) {
	t.Cleanup(func() {
		ctx := context.Background()
		_ = client.CoreV1().Nodes().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "e2e/fleet=" + fleet})
		for i := range n {
			_ = client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(ctx, fmt.Sprintf("%s-%d", fleet, i), metav1.DeleteOptions{})
		}
	})
}

func TestManyNodesRunADeployment(t *testing.T) {
	const nodes, replicas = 200, 2000
	fleet := uniqueName(t)
	cleanupFleet(t, fleet, nodes) // after the agent stopped: cleanups run last-in first-out
	startNodelet(t, fleet, "--nodes", strconv.Itoa(nodes), "--node-labels", "e2e/fleet="+fleet)
	ns := newNamespace(t)
	eventually(t, 60*time.Second, "all nodes Ready", func() (bool, string) {
		total, ready := fleetNodes(t, fleet)
		return ready == nodes, fmt.Sprintf("%d of %d nodes, %d Ready", total, nodes, ready)
	})

	apply(t, ns, fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: big
spec:
  replicas: %d
  selector:
    matchLabels: {app: big}
  template:
    metadata:
      labels: {app: big}
    spec:
      nodeSelector:
        e2e/fleet: %s
      containers:
      - name: app
        image: nodelet.io/sample:1
        command: ["sleep", "infinity"]
`, replicas, fleet))
	if _, err := kubectlErr("rollout", "status", "-n", ns, "deployment/big", "--timeout=300s"); err != nil {
		t.Fatalf("rollout of %d replicas on %d nodes: %v\npods: %s", replicas, nodes, err, podSummary(t, ns))
	}
	if got := kubectl(t, "get", "deployment", "-n", ns, "big", "-o", "jsonpath={.status.availableReplicas}"); got != strconv.Itoa(replicas) {
		t.Fatalf("availableReplicas = %s, want %d", got, replicas)
	}
	spread := map[string]bool{}
	for _, p := range podList(t, ns).Items {
		spread[p.Spec.NodeName] = true
	}
	if len(spread) < nodes/2 {
		t.Errorf("pods landed on %d nodes of %d: the scheduler should spread them", len(spread), nodes)
	}

	kubectl(t, "scale", "-n", ns, "deployment/big", "--replicas=0")
	eventually(t, 180*time.Second, "all pods gone", func() (bool, string) {
		n := len(podList(t, ns).Items)
		return n == 0, fmt.Sprintf("%d pods left", n)
	})
}

var managedRE = regexp.MustCompile(`"Node controller started".* nodes=(\d+)`)

func TestShardsManageEveryNodeOnce(t *testing.T) {
	const nodes = 60
	fleet := uniqueName(t)
	cleanupFleet(t, fleet, nodes) // after the agents stopped: cleanups run last-in first-out
	var agents []*agent
	for i := range 2 {
		agents = append(agents, startNodelet(t, fmt.Sprintf("%s-shard%d", fleet, i), "--node-name", fleet,
			"--nodes", strconv.Itoa(nodes), "--shard", fmt.Sprintf("%d/2", i), "--node-labels", "e2e/fleet="+fleet))
	}
	eventually(t, 60*time.Second, "all nodes Ready", func() (bool, string) {
		total, ready := fleetNodes(t, fleet)
		return ready == nodes, fmt.Sprintf("%d of %d nodes, %d Ready", total, nodes, ready)
	})
	sum := 0
	for i, a := range agents {
		m := managedRE.FindStringSubmatch(a.logText())
		if m == nil {
			t.Fatalf("shard %d did not log how many nodes it manages", i)
		}
		n, _ := strconv.Atoi(m[1])
		if n == 0 || n == nodes {
			t.Errorf("shard %d manages %d of %d nodes: want a share", i, n, nodes)
		}
		sum += n
	}
	if sum != nodes {
		t.Errorf("shards manage %d nodes together, want exactly %d", sum, nodes)
	}
}

// podSummary counts the namespace's pods by phase, and how many are bound.
func podSummary(t *testing.T, ns string) string {
	count := map[string]int{}
	for _, p := range podList(t, ns).Items {
		bound := "unbound"
		if p.Spec.NodeName != "" {
			bound = "bound"
		}
		count[string(p.Status.Phase)+"/"+bound]++
	}
	return fmt.Sprint(count)
}
