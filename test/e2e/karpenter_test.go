//go:build karpenter

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestKarpenterDrivesNodelet is issue 28's "a real autoscaler drives it":
// Karpenter's kwok provider (bin/karpenter-kwok, pinned in hack/karpenter)
// runs against the control plane; pending pods make it create NodeClaims
// and Nodes (annotated kwok.x-k8s.io/node=fake), a sim agent takes the
// Nodes over and runs the pods; when the pods go, Karpenter consolidates
// the empty Nodes away and the agent lets them go.
func TestKarpenterDrivesNodelet(t *testing.T) {
	const replicas = 3
	fleet := uniqueName(t)
	// Cleanups run last-in first-out: the namespace's pods go first, then
	// the NodePool (Karpenter removes its NodeClaims and Nodes), the agent,
	// Karpenter, and last the CRDs, with whatever Karpenter left.
	installKarpenterCRDs(t, fleet)
	startKarpenter(t)
	a := startTakeover(t, fleet)

	// The NodePool's Nodes carry the test's label, taint and the
	// annotation the agent selects on (beside kwok's, which Karpenter's
	// kwok provider adds); budgets and consolidateAfter let Karpenter
	// remove every empty Node at once, soon after it is empty.
	nodePool := writeFile(t, "nodepool.yaml", fmt.Sprintf(`apiVersion: karpenter.kwok.sh/v1alpha1
kind: KWOKNodeClass
metadata:
  name: %[1]s
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: %[1]s
spec:
  template:
    metadata:
      labels: {e2e/fleet: %[1]s}
      annotations: {e2e/takeover: %[1]s}
    spec:
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: %[1]s}
      requirements:
      - {key: kubernetes.io/os, operator: In, values: [linux]}
      - {key: kubernetes.io/arch, operator: In, values: [amd64]}
      - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
      taints:
      - {key: kwok.x-k8s.io/node, value: fake, effect: NoSchedule}
      expireAfter: Never
  limits: {cpu: "1000"}
  disruption:
    consolidationPolicy: WhenEmptyOrUnderutilized
    consolidateAfter: 5s
    budgets:
    - nodes: "100%%"
`, fleet))
	kubectl(t, "apply", "-f", nodePool)
	t.Cleanup(func() {
		if _, err := kubectlErr("delete", "-f", nodePool, "--ignore-not-found", "--timeout=90s"); err != nil {
			t.Logf("NodePool %s not deleted: %v", fleet, err)
		}
	})
	// A Deployment of one pod a Node (anti-affinity); no Node has the
	// NodePool's label yet, so the pods stay Pending until Karpenter makes
	// some. Then small pods, which the scheduler puts on those Nodes by
	// their allocatable, beside the pods Karpenter made them for.
	deployment := func(name string, replicas int, cpu, affinity string) string {
		return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: %[1]s
spec:
  replicas: %[2]d
  selector:
    matchLabels: {app: %[1]s}
  template:
    metadata:
      labels: {app: %[1]s}
    spec:
      nodeSelector: {e2e/fleet: %[3]s}
      tolerations:
      - {key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}%[5]s
      containers:
      - name: app
        image: nodelet.io/sample:1
        resources:
          requests: {cpu: "%[4]s", memory: 100Mi}
`, name, replicas, fleet, cpu, affinity)
	}
	ns := newNamespace(t)
	start := time.Now()
	apply(t, ns, deployment("work", replicas, "2", `
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
          - labelSelector: {matchLabels: {app: work}}
            topologyKey: kubernetes.io/hostname`))
	eventually(t, 180*time.Second, "the pods Running on Nodes Karpenter made", func() (bool, string) {
		nodes, ready := fleetNodes(t, fleet)
		claims := karpenterClaims(t, fleet)
		return len(runningPods(t, ns)) == replicas && ready == replicas && len(claims) == replicas,
			fmt.Sprintf("%d NodeClaims %v; %d Nodes, %d Ready; pods: %s", len(claims), claims, nodes, ready, podSummary(t, ns))
	})
	t.Logf("%d pods Running on %d Nodes Karpenter made %s after the Deployment was applied", replicas, replicas, time.Since(start).Round(time.Second))
	apply(t, ns, deployment("small", replicas, "100m", ""))
	eventually(t, 60*time.Second, "the small pods Running beside them", func() (bool, string) {
		return len(runningPods(t, ns)) == 2*replicas, "pods: " + podSummary(t, ns)
	})
	taken := a.taken()
	for _, p := range podList(t, ns).Items {
		if taken[p.Spec.NodeName] == 0 {
			t.Errorf("pod %s runs on %s, which the agent did not take over (it took %v)", p.Name, p.Spec.NodeName, taken)
		}
	}

	// No pods: Karpenter removes the empty Nodes, the agent lets them go.
	kubectl(t, "scale", "-n", ns, "deployment", "--all", "--replicas=0")
	start = time.Now()
	eventually(t, 180*time.Second, "Karpenter removes the Nodes and the agent lets them go", func() (bool, string) {
		nodes, _ := fleetNodes(t, fleet)
		claims := karpenterClaims(t, fleet)
		let := strings.Count(a.logText(), `"Let the node go"`)
		leases := 0
		for name := range taken {
			if _, err := client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(t.Context(), name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				leases++
			}
		}
		return nodes == 0 && len(claims) == 0 && let == len(taken) && leases == 0,
			fmt.Sprintf("%d Nodes, NodeClaims %v; the agent let %d of %d go; %d of their Leases left", nodes, claims, let, len(taken), leases)
	})
	t.Logf("the Nodes gone and let go %s after the Deployments were scaled to 0", time.Since(start).Round(time.Second))
}

// karpenterClaims are the names of the NodePool's NodeClaims.
func karpenterClaims(t *testing.T, nodePool string) []string {
	t.Helper()
	return strings.Fields(kubectl(t, "get", "nodeclaims", "-l", "karpenter.sh/nodepool="+nodePool,
		"-o", "jsonpath={.items[*].metadata.name}"))
}

// installKarpenterCRDs applies the CRDs of the release hack/karpenter pins
// (NodePool, NodeClaim … as its kwok chart has them, and KWOKNodeClass).
// When the test ends it strips the finalizers of what Karpenter left
// (its NodeClaims and the fleet's Nodes, if it stopped before removing
// them) and deletes the CRDs.
func installKarpenterCRDs(t *testing.T, fleet string) {
	t.Helper()
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/karpenter")
	cmd.Dir = filepath.Join(root, "hack/karpenter")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("find Karpenter's module (make bin/karpenter-kwok downloads it): %v", err)
	}
	dir := strings.TrimSpace(string(out))
	crds := []string{"-f", filepath.Join(dir, "kwok/charts/crds"), "-f", filepath.Join(dir, "kwok/apis/crds")}
	t.Cleanup(func() {
		for _, kind := range []string{"nodeclaims", "nodes"} {
			names, _ := kubectlErr("get", kind, "-l", "karpenter.sh/nodepool="+fleet, "-o", "name")
			for _, name := range strings.Fields(names) {
				_, _ = kubectlErr("patch", name, "--type=merge", "-p", `{"metadata":{"finalizers":null}}`)
				_, _ = kubectlErr("delete", name, "--ignore-not-found", "--wait=false")
			}
		}
		if _, err := kubectlErr(append([]string{"delete", "--ignore-not-found", "--timeout=60s"}, crds...)...); err != nil {
			t.Logf("Karpenter's CRDs not deleted: %v", err)
		}
	})
	kubectl(t, append([]string{"apply", "--server-side"}, crds...)...)
	kubectl(t, "wait", "--for=condition=Established", "crd/nodepools.karpenter.sh", "crd/nodeclaims.karpenter.sh",
		"crd/kwoknodeclasses.karpenter.kwok.sh")
}

// startKarpenter runs bin/karpenter-kwok against the control plane, as
// one replica without leader election, its metrics and health ports
// picked by the kernel; it is stopped by its PID when the test ends.
func startKarpenter(t *testing.T) {
	t.Helper()
	bin := filepath.Join(root, "bin/karpenter-kwok")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s missing: run make bin/karpenter-kwok first", bin)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "DISABLE_LEADER_ELECTION=true",
		"METRICS_PORT=0", "HEALTH_PROBE_PORT=0", "LOG_LEVEL=debug")
	runUntilCleanup(t, "Karpenter", cmd)
}
