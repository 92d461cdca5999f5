package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodelet/nodelet/test/fault"
)

// TestKubeletAPIOfNodesTakenOver: an agent that takes over Nodes applied
// with kwok's annotation serves their kubelet API, so that kubectl logs,
// exec and the node proxy's stats of their pods work as on the agent's
// own nodes, with kwok's Logs and Exec from its --sim-stages file. The
// two Nodes have no address: the agent adds its own, and its port, and
// one listener serves both, each request for the node it is about.
func TestKubeletAPIOfNodesTakenOver(t *testing.T) {
	ca := filepath.Join(filepath.Dir(kubeconfig), "pki", "ca.crt")
	if _, err := os.Stat(ca); err != nil {
		t.Skipf("no cluster CA next to the kubeconfig (%v): the API server's kubelet client certificate cannot be verified", err)
	}
	fleet := uniqueName(t)
	cleanupFleet(t, fleet, 2) // after the agent stopped: cleanups run last-in first-out
	kubectl(t, "apply", "-f", writeFile(t, "nodes.yaml", kwokNodes(fleet, 0, 2)))
	node := fleet + "-1" // the pod's; fleet-0 runs none

	// kwok's Logs and Exec for the pod, from the agent's --sim-stages file.
	ns, dir := uniqueName(t), t.TempDir()
	logs := filepath.Join(dir, "web.log")
	if err := os.WriteFile(logs, []byte(criLines("one", "two")), 0o644); err != nil {
		t.Fatal(err)
	}
	rules := writeFile(t, "kwok.yaml", fmt.Sprintf(`apiVersion: kwok.x-k8s.io/v1alpha1
kind: Logs
metadata: {name: web, namespace: %[1]s}
spec:
  logs:
  - containers: [app]
    logsFile: %[2]s
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Exec
metadata: {name: web, namespace: %[1]s}
spec:
  execs:
  - local:
      workDir: %[3]s
      envs: [{name: GREETING, value: hello}]
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ResourceUsage
metadata: {name: web, namespace: %[1]s}
spec:
  usages:
  - usage:
      cpu: {value: 250m}
      memory: {value: 40Mi}
`, ns, logs, dir))
	// Not a loopback address: the API server's node proxy refuses those.
	port, address := fault.FreePort(t), hostIP(t)
	startTakeover(t, fleet, "--enable-server", "--address", address, "--port", strconv.Itoa(port), "--client-ca-file", ca, "--sim-stages", rules)
	kubectl(t, "create", "namespace", ns) // after the agent: its pods are deleted while the agent runs them
	t.Cleanup(func() {
		if _, err := kubectlErr("delete", "namespace", ns, "--ignore-not-found", "--timeout=90s"); err != nil {
			t.Logf("namespace %s not deleted yet: %v", ns, err)
		}
	})
	for _, n := range []string{fleet + "-0", node} {
		waitReady(t, n, 60*time.Second)
	}

	// The API server reaches the agent at the Node's InternalIP and its
	// kubelet endpoint port, which the agent added.
	n, err := client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := n.Status.DaemonEndpoints.KubeletEndpoint.Port; got != int32(port) {
		t.Errorf("node %s: kubelet endpoint port %d, want the agent's %d", node, got, port)
	}
	if !slices.ContainsFunc(n.Status.Addresses, func(a corev1.NodeAddress) bool {
		return a.Type == corev1.NodeInternalIP && a.Address == address
	}) {
		t.Errorf("node %s: addresses %v, want the agent's %s as InternalIP", node, n.Status.Addresses, address)
	}

	apply(t, ns, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  nodeName: %s
  tolerations:
  - {key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}
  containers:
  - name: app
    image: nodelet.io/sample:1
`, node))
	if _, err := kubectlErr("wait", "-n", ns, "pod/web", "--for=condition=Ready", "--timeout=30s"); err != nil {
		t.Fatalf("pod web not Ready: %v", err)
	}

	if out, err := kubectlErr("logs", "-n", ns, "web"); err != nil || out != "one\ntwo\n" {
		t.Errorf("kubectl logs = %q, %v; want the Logs' file", out, err)
	}
	if out, err := kubectlErr("exec", "-n", ns, "web", "--", "sh", "-c", `echo "$GREETING from $(pwd)"`); err != nil || out != "hello from "+dir+"\n" {
		t.Errorf("kubectl exec = %q, %v; want the Exec's environment and directory", out, err)
	}

	// Both Nodes share the agent's address: the node proxy's stats are
	// each the node's own, the pod on its node only.
	for _, tt := range []struct {
		node    string
		withPod bool
	}{{node, true}, {fleet + "-0", false}} {
		s, err := summaryOf(t, tt.node)
		if err != nil {
			t.Errorf("stats summary of %s: %v", tt.node, err)
			continue
		}
		hasPod := slices.ContainsFunc(s.Pods, func(p statsv1alpha1.PodStats) bool { return p.PodRef.Namespace == ns && p.PodRef.Name == "web" })
		if s.Node.NodeName != tt.node || hasPod != tt.withPod {
			t.Errorf("stats summary of %s: node %q, pod web in it %v; want %s's, with the pod %v", tt.node, s.Node.NodeName, hasPod, tt.node, tt.withPod)
		}
	}

	// metrics-server scrapes each Node at the path the agent annotated it
	// with, which names the node: kubectl top shows the ResourceUsage's
	// figures for the pod, and each Node's own.
	for _, n := range []string{fleet + "-0", node} {
		got, err := client.CoreV1().Nodes().Get(context.Background(), n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if path, want := got.Annotations["metrics.k8s.io/resource-metrics-path"], "/metrics/nodes/"+n+"/metrics/resource"; path != want {
			t.Errorf("node %s: resource metrics path annotation %q, want %q", n, path, want)
		}
	}
	eventually(t, 60*time.Second, "kubectl top pod shows the ResourceUsage's figures", func() (bool, string) {
		cpu, mem, err := topQuantities("pod", "-n", ns, "web")
		return err == nil && cpu == 250 && mem == 40<<20, fmt.Sprintf("cpu %dm memory %d: %v", cpu, mem, err)
	})
	for _, n := range []string{fleet + "-0", node} {
		eventually(t, 30*time.Second, "kubectl top node shows "+n, func() (bool, string) {
			cpu, mem, err := topQuantities("node", n)
			return err == nil && cpu > 0 && mem > 0, fmt.Sprintf("cpu %dm memory %d: %v", cpu, mem, err)
		})
	}

	kubectl(t, "delete", "pod", "-n", ns, "web", "--timeout=30s")
}
