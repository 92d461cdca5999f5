package virtualkubelet_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/adapter/virtualkubelet"
	"github.com/nodelet/nodelet/pkg/agent"
	"github.com/nodelet/nodelet/test/fault"
)

// A provider written for virtual-kubelet (tinyProvider, against
// virtual-kubelet v1.13.0's own interface types) runs on nodelet through
// the adapter, joined to a real control plane (the repository's
// bin/controlplane) by an agent run in this process, and the real kubectl
// sees it: the node Ready with the provider's description, a pod scheduled
// onto it and Running, its log and an exec answered by the provider through
// the kubelet API, and the pod deleted. Everything it makes is removed, so
// it can run again.
func TestVirtualKubeletProviderOnARealControlPlane(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	bin := filepath.Join(fault.RepoRoot(t), "bin", "controlplane")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%v: run make build first", err)
	}
	cp, err := fault.StartControlPlane(bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cp.Close(t.Failed()); err != nil {
			t.Errorf("stop the control plane: %v", err)
		}
		if t.Failed() {
			t.Logf("control plane logs kept in %s", cp.Dir)
		}
	})
	k := &fault.Kubectl{Bin: bin, Kubeconfig: cp.Kubeconfig()}

	suffix := fault.RandSuffix(t)
	node := "vk-" + suffix
	tiny := runAgent(t, k, cp, node)

	fault.Eventually(t, 60*time.Second, "node Ready as the provider describes it", func() (bool, string) {
		out, err := k.Run("", "get", "node", node, "-o",
			`jsonpath={.status.conditions[?(@.type=="Ready")].reason} {.status.capacity.pods} {.status.addresses[?(@.type=="InternalIP")].address} {.status.nodeInfo.containerRuntimeVersion}`)
		return err == nil && out == "TinyProviderReady 110 127.0.0.1 tiny://v1", fmt.Sprintf("%q, %v", out, err)
	})

	ns := "vk-e2e-" + suffix
	if _, err := k.Run("", "create", "namespace", ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := k.Run("", "delete", "namespace", ns, "--ignore-not-found", "--timeout=90s"); err != nil {
			t.Errorf("clean up: %v", err)
		}
	})

	// Through the scheduler, onto the node by the hostname label the
	// provider gives it.
	manifest := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: hello
  namespace: %s
spec:
  nodeSelector:
    kubernetes.io/hostname: %s
  terminationGracePeriodSeconds: 3
  containers:
  - name: app
    image: registry.example/hello:1
    resources:
      requests: {cpu: 100m, memory: 64Mi}
`, ns, node)
	fault.Eventually(t, 30*time.Second, "pod created (once the namespace's service account exists)", func() (bool, string) {
		out, err := k.Run(manifest, "apply", "-f", "-")
		return err == nil, fmt.Sprint(out, err)
	})
	fault.Eventually(t, 60*time.Second, "pod Running on the node, with the provider's status", func() (bool, string) {
		out, err := k.Run("", "get", "pod", "-n", ns, "hello", "-o",
			`jsonpath={.spec.nodeName} {.status.phase} {.status.podIP} {.status.containerStatuses[0].containerID}`)
		want := fmt.Sprintf("%s Running 10.244.0.7 tiny://%s/hello/app", node, ns)
		return err == nil && out == want, fmt.Sprintf("%q, %v", out, err)
	})

	fault.Eventually(t, 30*time.Second, "kubectl logs shows the provider's log", func() (bool, string) {
		out, err := k.Run("", "logs", "-n", ns, "hello")
		return err == nil && out == tinyLogLine(ns, "hello", "app"), fmt.Sprintf("%q, %v", out, err)
	})
	out, err := k.Run("", "exec", "-n", ns, "hello", "--", "echo", "hi")
	if want := tinyExecOutput(ns, "hello", "app", []string{"echo", "hi"}); err != nil || out != want {
		t.Errorf("kubectl exec hello -- echo hi: %q, %v; want %q", out, err, want)
	}

	if _, err := k.Run("", "delete", "pod", "-n", ns, "hello", "--timeout=60s"); err != nil {
		t.Fatal(err)
	}
	if out, err := k.Run("", "get", "pod", "-n", ns, "hello"); err == nil || !strings.Contains(err.Error(), "NotFound") {
		t.Errorf("pod after kubectl delete: %q, %v; want NotFound", out, err)
	}
	if pods, _ := tiny.GetPods(context.Background()); len(pods) != 0 {
		t.Errorf("the provider still runs %d pods after the deletion", len(pods))
	}
}

// runAgent runs a nodelet agent in this process whose one node is the tiny
// provider behind the adapter, with the kubelet API on a free port of
// 127.0.0.1 trusting the control plane's client CA, and returns the
// provider. The agent stops, and its Node and Lease are deleted, when the
// test ends.
func runAgent(t *testing.T, k *fault.Kubectl, cp *fault.ControlPlane, node string) *tinyProvider {
	t.Helper()
	const address = "127.0.0.1"
	port := int32(fault.FreePort(t))
	tiny := newTinyProvider(node, address, port, agent.Version)
	a, err := agent.New(agent.One(node),
		func(*agent.Env) (agent.Provider, error) {
			return virtualkubelet.New(tiny, tiny) // the pods, and the node
		},
		agent.WithKubeconfig(cp.Kubeconfig()),
		agent.WithRootDir(t.TempDir()),
		agent.WithServer(agent.ServerOptions{Address: address, Port: port, ClientCAFile: filepath.Join(cp.Dir, "pki", "ca.crt")}),
	)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("the agent: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("the agent did not stop within 30s")
		}
		for _, args := range [][]string{
			{"delete", "node", node, "--ignore-not-found"},
			{"delete", "lease", "-n", corev1.NamespaceNodeLease, node, "--ignore-not-found"},
		} {
			if _, err := k.Run("", args...); err != nil {
				t.Errorf("clean up: %v", err)
			}
		}
	})
	return tiny
}
