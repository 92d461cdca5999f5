package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/examples/podservice/fakeservice"
	"github.com/nodelet/nodelet/test/fault"
)

// This command, run in the test against the fake pod service, joins a real
// control plane (the repository's bin/controlplane) as a node, and a pod
// goes through it as the real kubectl sees it: scheduled onto the Ready
// node, Running with the service's address, its log served through the
// node's kubelet API, and deleted within its grace period, from the API and
// from the service. Everything it makes is removed, so it can run again.
func TestPodThroughTheServiceOnARealControlPlane(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	root := fault.RepoRoot(t)
	bin := filepath.Join(root, "bin", "controlplane")
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

	svc := fakeservice.New(fakeservice.Options{})
	srv := httptest.NewServer(svc)
	t.Cleanup(srv.Close)

	// The node, as the command runs it.
	suffix := fault.RandSuffix(t)
	node := "podservice-" + suffix
	args := []string{
		"--kubeconfig", cp.Kubeconfig(), "--node-name", node, "--service-url", srv.URL,
		"--address", "127.0.0.1", "--port", strconv.Itoa(fault.FreePort(t)),
		"--client-ca-file", filepath.Join(cp.Dir, "pki", "ca.crt"),
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, args) }()
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

	fault.Eventually(t, 60*time.Second, "node Ready with the service's capacity", func() (bool, string) {
		out, err := k.Run("", "get", "node", node, "-o",
			`jsonpath={.status.conditions[?(@.type=="Ready")].status} {.status.capacity.pods} {.status.addresses[?(@.type=="InternalIP")].address}`)
		return err == nil && out == "True 110 127.0.0.1", fmt.Sprint(out, err)
	})

	ns := "podservice-e2e-" + suffix
	if _, err := k.Run("", "create", "namespace", ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := k.Run("", "delete", "namespace", ns, "--ignore-not-found", "--timeout=90s"); err != nil {
			t.Errorf("clean up: %v", err)
		}
	})

	// Through the scheduler, onto the node by its hostname label.
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
    command: ["hello"]
    resources:
      requests: {cpu: 100m, memory: 64Mi}
`, ns, node)
	fault.Eventually(t, 30*time.Second, "pod created (once the namespace's service account exists)", func() (bool, string) {
		out, err := k.Run(manifest, "apply", "-f", "-")
		return err == nil, fmt.Sprint(out, err)
	})

	fault.Eventually(t, 60*time.Second, "pod Running", func() (bool, string) {
		out, err := k.Run("", "get", "pod", "-n", ns, "hello", "-o", "jsonpath={.status.phase}")
		return err == nil && out == "Running", fmt.Sprint(out, err)
	})
	out, err := k.Run("", "get", "pod", "-n", ns, "hello", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	if err := json.Unmarshal([]byte(out), &pod); err != nil {
		t.Fatalf("decode the pod: %v", err)
	}
	checkRunning(t, &pod, node, svc)

	fault.Eventually(t, 30*time.Second, "kubectl logs shows the service's log", func() (bool, string) {
		out, err := k.Run("", "logs", "-n", ns, "hello")
		return err == nil && out == fakeservice.LogLine(ns, "hello", "app"), fmt.Sprint(out, err)
	})

	if _, err := k.Run("", "delete", "pod", "-n", ns, "hello", "--timeout=60s"); err != nil {
		t.Fatal(err)
	}
	if out, err := k.Run("", "get", "pod", "-n", ns, "hello"); err == nil || !strings.Contains(err.Error(), "NotFound") {
		t.Errorf("pod after kubectl delete: %q, %v; want NotFound", out, err)
	}
	if _, ok := svc.Pod(ns, "hello"); ok {
		t.Error("the service still holds the deleted pod")
	}
	want := fakeservice.Deletion{Namespace: ns, Name: "hello", Grace: 3 * time.Second}
	if d := svc.Deletions(); len(d) == 0 || d[0] != want {
		t.Errorf("the service's deletions %+v, want first %+v (the pod's grace period)", d, want)
	}
}

// checkRunning checks the status of a running pod as the API has it.
func checkRunning(t *testing.T, pod *corev1.Pod, node string, svc *fakeservice.Service) {
	t.Helper()
	sp, ok := svc.Pod(pod.Namespace, pod.Name)
	if !ok {
		t.Fatal("the service does not hold the running pod")
	}
	s := pod.Status
	if pod.Spec.NodeName != node || sp.Node != node || sp.UID != string(pod.UID) {
		t.Errorf("pod on node %q, in the service for node %q with UID %s; want %s and UID %s",
			pod.Spec.NodeName, sp.Node, sp.UID, node, pod.UID)
	}
	if s.PodIP == "" || s.PodIP != sp.Status.IP || s.HostIP != "127.0.0.1" || s.StartTime == nil {
		t.Errorf("podIP %q, hostIP %q, startTime %v; want the service's %q, 127.0.0.1 and a time",
			s.PodIP, s.HostIP, s.StartTime, sp.Status.IP)
	}
	for _, ct := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		found := false
		for _, c := range s.Conditions {
			if c.Type == ct {
				found = true
				if c.Status != corev1.ConditionTrue {
					t.Errorf("condition %s %s (%s), want True", ct, c.Status, c.Reason)
				}
			}
		}
		if !found {
			t.Errorf("no condition %s", ct)
		}
	}
	if len(s.ContainerStatuses) != 1 || !s.ContainerStatuses[0].Ready || s.ContainerStatuses[0].State.Running == nil {
		t.Errorf("container statuses %+v, want app ready and running", s.ContainerStatuses)
	}
}
