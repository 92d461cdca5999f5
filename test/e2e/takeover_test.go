package e2e

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/pkg/shard"
)

// kwokNodes is a manifest of the Nodes fleet-<from> … fleet-<to-1> as a
// kwok user writes them: kwok's annotation (and one of the test's, so that
// no other agent's selector picks them), kwok's taint, a label, capacity.
func kwokNodes(fleet string, from, to int) string {
	var b strings.Builder
	b.WriteString("apiVersion: v1\nkind: List\nitems:\n")
	for i := from; i < to; i++ {
		fmt.Fprintf(&b, `- apiVersion: v1
  kind: Node
  metadata:
    name: %[1]s-%[2]d
    annotations:
      kwok.x-k8s.io/node: fake
      e2e/takeover: %[1]s
    labels:
      e2e/fleet: %[1]s
      type: kwok
  spec:
    taints:
    - {key: kwok.x-k8s.io/node, value: fake, effect: NoSchedule}
  status:
    capacity: {cpu: "16", memory: 64Gi, pods: "50"}
    allocatable: {cpu: "16", memory: 64Gi, pods: "50"}
`, fleet, i)
	}
	return b.String()
}

// startTakeover runs a bin/nodelet without nodes of its own that takes
// over the fleet's Nodes; it is stopped when the test ends.
func startTakeover(t *testing.T, fleet string, extra ...string) *agent {
	t.Helper()
	logDir, rootDir := t.TempDir(), t.TempDir()
	a := &agent{t: t, node: fleet, logDir: logDir, args: append([]string{
		"--kubeconfig", kubeconfig, "--provider", "sim", "--root-dir", rootDir, "--v=2",
		"--manage-nodes-with-annotation-selector", "kwok.x-k8s.io/node=fake,e2e/takeover=" + fleet,
		"--node-lease-duration-seconds", "10",
	}, extra...)}
	t.Cleanup(func() {
		a.stop()
		if t.Failed() && a.log != "" {
			t.Logf("nodelet log (%s):\n%s", a.log, lastLines(a.logText(), 60))
		}
	})
	a.start()
	return a
}

var tookOver = regexp.MustCompile(`"Took the node over" node="([^"]+)"`)

// taken are the nodes the agent's current log says it took over, with
// how many times.
func (a *agent) taken() map[string]int {
	out := map[string]int{}
	for _, m := range tookOver.FindAllStringSubmatch(a.logText(), -1) {
		out[m[1]]++
	}
	return out
}

// firstLogged is, for each node, when the agent's log first says msg of
// it (klog's header time; the agents of a test share the host's clock).
func (a *agent) firstLogged(t *testing.T, msg string) map[string]time.Time {
	t.Helper()
	line := regexp.MustCompile(`(?m)^[IWE](\d{4} \d\d:\d\d:\d\d\.\d{6}) .*"` + regexp.QuoteMeta(msg) + `" node="([^"]+)"`)
	out := map[string]time.Time{}
	for _, m := range line.FindAllStringSubmatch(a.logText(), -1) {
		at, err := time.Parse("0102 15:04:05.000000", m[1])
		if err != nil {
			t.Fatalf("klog time %q: %v", m[1], err)
		}
		if _, seen := out[m[2]]; !seen {
			out[m[2]] = at
		}
	}
	return out
}

// TestTakeOverKwokNodes is issue 28's "Nodes others create", scaled down
// (the figures of a full run are in docs/kwok.md): Nodes applied with
// kwok's annotation become Ready under one agent, keeping what their
// creator wrote; more added later are taken over; deleted ones lose their
// Leases; a second replica (--shard auto) takes about half, and when it is
// killed the first takes its nodes back, with no pod lost.
//
// NODELET_E2E_KWOK_NODES sets how many Nodes are applied first (default
// 150); a fifth as many are added, a tenth deleted. 1000 is the run.
func TestTakeOverKwokNodes(t *testing.T) {
	first, replicas := 150, 40
	if v := os.Getenv("NODELET_E2E_KWOK_NODES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 20 {
			t.Fatalf("NODELET_E2E_KWOK_NODES=%q: want a number of 20 or more", v)
		}
		first = n
	}
	more, deleted := first/5, first/10
	fleet := uniqueName(t)
	total := first + more
	cleanupFleet(t, fleet, total)
	t.Cleanup(func() { // the membership Lease of a replica killed
		_ = client.CoordinationV1().Leases(corev1.NamespaceNodeLease).DeleteCollection(context.Background(), metav1.DeleteOptions{},
			metav1.ListOptions{LabelSelector: shard.GroupLabel + "=" + fleet})
	})
	ctx := context.Background()
	kubectl(t, "apply", "-f", writeFile(t, "nodes.yaml", kwokNodes(fleet, 0, first)))

	start := time.Now()
	a := startTakeover(t, fleet, "--shard", "auto", "--shard-group", fleet)
	eventually(t, 300*time.Second, "the applied Nodes Ready", func() (bool, string) {
		n, ready := fleetNodes(t, fleet)
		return ready == first, fmt.Sprintf("%d of %d nodes Ready", ready, n)
	})
	t.Logf("%d Nodes applied with kwok's annotation Ready %s after the agent started", first, time.Since(start).Round(time.Second))
	n, err := client.CoreV1().Nodes().Get(ctx, fleet+"-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(n.Spec.Taints) != 1 || n.Spec.Taints[0].Key != "kwok.x-k8s.io/node" || n.Labels["type"] != "kwok" ||
		n.Status.Capacity.Cpu().String() != "16" || n.Status.Allocatable.Pods().String() != "50" {
		t.Errorf("node %s: taints %v, labels %v, capacity %v, allocatable %v; want what kubectl applied",
			n.Name, n.Spec.Taints, n.Labels, n.Status.Capacity, n.Status.Allocatable)
	}
	if n.Status.NodeInfo.KubeletVersion == "" || n.Status.DaemonEndpoints.KubeletEndpoint.Port == 0 {
		t.Errorf("node %s: nodeInfo %+v, daemonEndpoints %+v; want the agent's", n.Name, n.Status.NodeInfo, n.Status.DaemonEndpoints)
	}

	ns := newNamespace(t)
	apply(t, ns, fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: work
spec:
  replicas: %d
  selector:
    matchLabels: {app: work}
  template:
    metadata:
      labels: {app: work}
    spec:
      nodeSelector: {e2e/fleet: %s}
      tolerations:
      - {key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}
      containers:
      - name: app
        image: nodelet.io/sample:1
`, replicas, fleet))
	if _, err := kubectlErr("rollout", "status", "-n", ns, "deployment/work", "--timeout=180s"); err != nil {
		t.Fatalf("rollout: %v\npods: %s", err, podSummary(t, ns))
	}
	running := runningPods(t, ns)

	// More Nodes, taken over as they appear.
	kubectl(t, "apply", "-f", writeFile(t, "more.yaml", kwokNodes(fleet, first, total)))
	start = time.Now()
	eventually(t, 120*time.Second, "the added Nodes Ready", func() (bool, string) {
		n, ready := fleetNodes(t, fleet)
		return ready == total, fmt.Sprintf("%d of %d nodes Ready", ready, n)
	})
	t.Logf("%d Nodes added: Ready %s after they were applied", more, time.Since(start).Round(time.Second))

	// Deleted Nodes: their Leases go (the garbage collector follows the
	// owner reference) and are not made again.
	var gone []string
	for i := range deleted {
		name := fmt.Sprintf("%s-%d", fleet, total-1-i)
		gone = append(gone, name)
		if err := client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	total -= deleted
	start = time.Now()
	eventually(t, 60*time.Second, "the deleted Nodes' Leases gone", func() (bool, string) {
		for _, name := range gone {
			if _, err := client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, name + "'s Lease is there"
			}
		}
		return true, ""
	})
	t.Logf("%d Nodes deleted: their Leases gone %s later", deleted, time.Since(start).Round(time.Second))
	renewedTwice(t, fleet+"-0")
	for _, name := range gone {
		if _, err := client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the Lease of deleted node %s came back: %v", name, err)
		}
	}

	// A second replica takes about half; the first lets those go.
	b := startTakeover(t, fleet, "--shard", "auto", "--shard-group", fleet)
	eventually(t, 60*time.Second, "the second replica takes its share", func() (bool, string) {
		took := len(b.taken())
		return took > total/4 && took < total*3/4 && strings.Count(a.logText(), `"Let the node go"`) >= took+deleted,
			fmt.Sprintf("b took %d of %d, a let %d go", took, total, strings.Count(a.logText(), `"Let the node go"`))
	})
	takenByB := b.taken()
	t.Logf("a second replica took %d of %d Nodes", len(takenByB), total)
	// No Node run by both: the first let each go before the second took it.
	letGo, took := a.firstLogged(t, "Let the node go"), b.firstLogged(t, "Took the node over")
	for name := range takenByB {
		if at, ok := letGo[name]; !ok || !at.Before(took[name]) {
			t.Errorf("%s: the second replica took it at %s, the first let it go at %s", name,
				took[name].Format(time.StampMicro), at.Format(time.StampMicro))
		}
	}
	eventually(t, 60*time.Second, "every Node Ready under two replicas", func() (bool, string) {
		n, ready := fleetNodes(t, fleet)
		return ready == total, fmt.Sprintf("%d of %d nodes Ready", ready, n)
	})

	// The second replica dies: its nodes go back to the first once its
	// membership Lease (10s) expires.
	b.kill()
	start = time.Now()
	eventually(t, 60*time.Second, "the first replica takes the dead one's nodes back", func() (bool, string) {
		again := a.taken()
		for name := range takenByB {
			if again[name] < 2 {
				return false, name + " not taken back yet"
			}
		}
		return true, ""
	})
	t.Logf("the replica killed: its Nodes taken back %s later", time.Since(start).Round(time.Second))
	eventually(t, 60*time.Second, "every Node Ready under one replica", func() (bool, string) {
		n, ready := fleetNodes(t, fleet)
		return ready == total, fmt.Sprintf("%d of %d nodes Ready", ready, n)
	})
	if after := runningPods(t, ns); len(running) != replicas || !slices.Equal(after, running) {
		t.Errorf("running pods changed: %d before, %d after (%v → %v)", len(running), len(after), running, after)
	}
}

// runningPods are the UIDs of the namespace's Running pods, sorted.
func runningPods(t *testing.T, ns string) []types.UID {
	t.Helper()
	var out []types.UID
	for _, p := range podList(t, ns).Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			out = append(out, p.UID)
		}
	}
	slices.Sort(out)
	return out
}

// renewedTwice waits until the node's Lease has been renewed twice more.
func renewedTwice(t *testing.T, node string) {
	t.Helper()
	var seen []time.Time
	eventually(t, 60*time.Second, node+"'s Lease renewed twice", func() (bool, string) {
		l, err := client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(context.Background(), node, metav1.GetOptions{})
		if err != nil || l.Spec.RenewTime == nil {
			return false, fmt.Sprint(err)
		}
		if len(seen) == 0 || !seen[len(seen)-1].Equal(l.Spec.RenewTime.Time) {
			seen = append(seen, l.Spec.RenewTime.Time)
		}
		return len(seen) >= 3, fmt.Sprintf("%d renewals seen", len(seen)-1)
	})
}
