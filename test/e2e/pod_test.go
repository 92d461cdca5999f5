package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// deployment is a Deployment manifest whose pods go to node.
func deployment(name, node string, replicas int) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: %[1]s
spec:
  replicas: %[3]d
  selector:
    matchLabels: {app: %[1]s}
  template:
    metadata:
      labels: {app: %[1]s}
    spec:
      nodeSelector:
        kubernetes.io/hostname: %[2]s
      containers:
      - name: app
        image: nodelet.io/sample:1
        command: ["sleep", "infinity"]
`, name, node, replicas)
}

// apply runs kubectl apply on a manifest in namespace ns.
func apply(t *testing.T, ns, manifest string) {
	t.Helper()
	kubectl(t, "apply", "-n", ns, "-f", writeFile(t, "manifest.yaml", manifest))
}

// podList lists the pods of namespace ns.
func podList(t *testing.T, ns string) *corev1.PodList {
	t.Helper()
	pods, err := client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pods
}

func TestDeploymentLifecycle(t *testing.T) {
	t.Parallel()
	node := uniqueName(t)
	startNodelet(t, node)
	ns := newNamespace(t)
	waitReady(t, node, 10*time.Second)

	apply(t, ns, deployment("web", node, 3))
	kubectl(t, "rollout", "status", "-n", ns, "deployment/web", "--timeout=60s")
	if got := kubectl(t, "get", "deployment", "-n", ns, "web", "-o", "jsonpath={.status.availableReplicas}"); got != "3" {
		t.Fatalf("availableReplicas = %q, want 3", got)
	}
	pods := podList(t, ns).Items
	for _, p := range pods {
		if p.Spec.NodeName != node || p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
			t.Errorf("pod %s: node %s phase %s IP %q, want Running on %s with an IP", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.PodIP, node)
		}
	}

	// A pod deleted with the default grace period is gone from the API once
	// kubectl returns.
	victim := pods[0].Name
	kubectl(t, "delete", "pod", "-n", ns, victim, "--wait=true", "--timeout=60s")
	if _, err := client.CoreV1().Pods(ns).Get(context.Background(), victim, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("pod %s after kubectl delete: %v, want NotFound", victim, err)
	}
	kubectl(t, "rollout", "status", "-n", ns, "deployment/web", "--timeout=60s")

	kubectl(t, "scale", "-n", ns, "deployment/web", "--replicas=0")
	eventually(t, 60*time.Second, "all pods gone", func() (bool, string) {
		n := len(podList(t, ns).Items)
		return n == 0, fmt.Sprintf("%d pods left", n)
	})
}

// podRecord is what must not change about a pod across an agent restart.
type podRecord struct {
	uid, startedAt string
	restarts       int32
}

func recordPods(t *testing.T, ns string) (map[string]podRecord, string) {
	t.Helper()
	list := podList(t, ns)
	out := map[string]podRecord{}
	for _, p := range list.Items {
		r := podRecord{uid: string(p.UID)}
		for _, cs := range p.Status.ContainerStatuses {
			r.restarts += cs.RestartCount
			if cs.State.Running != nil {
				r.startedAt += cs.State.Running.StartedAt.UTC().Format(time.RFC3339)
			}
		}
		out[p.Name] = r
	}
	return out, list.ResourceVersion
}

func TestRestartKeepsPods(t *testing.T) {
	t.Parallel()
	node := uniqueName(t)
	a := startNodelet(t, node)
	ns := newNamespace(t)
	waitReady(t, node, 10*time.Second)
	apply(t, ns, deployment("keep", node, 3))
	kubectl(t, "rollout", "status", "-n", ns, "deployment/keep", "--timeout=60s")
	before, rv := recordPods(t, ns)
	for name, r := range before {
		if r.startedAt == "" {
			t.Fatalf("pod %s has no running container before the restart", name)
		}
	}

	// Any pod added or deleted from now on fails the test.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var churn []string
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for ev := range w.ResultChan() {
			switch ev.Type {
			case watch.Added, watch.Deleted:
				p, _ := ev.Object.(*corev1.Pod)
				mu.Lock()
				churn = append(churn, fmt.Sprintf("%s %s", ev.Type, p.GetName()))
				mu.Unlock()
			case watch.Error:
				mu.Lock()
				churn = append(churn, fmt.Sprintf("watch error %v", ev.Object))
				mu.Unlock()
			}
		}
	}()

	a.stop()
	a.start()
	waitReady(t, node, 20*time.Second)
	// Ready says nothing about pods: wait until the agent has compared the
	// API with its provider, which is when it would delete or recreate.
	eventually(t, 30*time.Second, "agent reconciled its pods after the restart", func() (bool, string) {
		return strings.Contains(a.logText(), "Start-up reconcile done"), lastLines(a.logText(), 3)
	})
	kubectl(t, "rollout", "status", "-n", ns, "deployment/keep", "--timeout=60s")

	after, _ := recordPods(t, ns)
	for name, b := range before {
		if got, ok := after[name]; !ok || got != b {
			t.Errorf("pod %s across the restart: before %+v, after %+v (present %v)", name, b, got, ok)
		}
	}
	for name, r := range after {
		if r.restarts != 0 {
			t.Errorf("pod %s restartCount %d, want 0", name, r.restarts)
		}
	}
	mu.Lock()
	seen := churn
	mu.Unlock()
	if len(seen) > 0 {
		t.Errorf("pods added or deleted during the restart: %v", seen)
	}
	cancel() // ends the watch, with an error nobody needs to read
	<-watched
}

func TestRejectedPodFailsWithReason(t *testing.T) {
	t.Parallel()
	node := uniqueName(t)
	startNodelet(t, node)
	ns := newNamespace(t)
	waitReady(t, node, 10*time.Second)

	apply(t, ns, hugePod(node))
	eventually(t, 20*time.Second, "pod Failed with reason OutOfcpu", func() (bool, string) {
		out, _ := kubectlErr("get", "pod", "-n", ns, "huge", "-o", "jsonpath={.status.phase} {.status.reason}")
		return out == "Failed OutOfcpu", out
	})
	eventually(t, 20*time.Second, "a Warning event on the pod says why", func() (bool, string) {
		out, _ := kubectlErr("get", "events", "-n", ns, "--field-selector", "involvedObject.name=huge",
			"-o", `jsonpath={range .items[*]}{.type} {.reason}: {.message}{"\n"}{end}`)
		return strings.Contains(out, "Warning OutOfcpu:"), out
	})
}

// A pod someone else marks not Ready while its containers run is made Ready
// again, each time, as the kubelet does after the node lifecycle
// controller marked the pods of a node it took for NotReady: that
// controller marks again a pod made Ready while it still takes the node
// for NotReady, and nodelet once left the pod not Ready from the second
// time on (the status to write was the one it had last written).
func TestPodMarkedNotReadyIsMadeReadyAgain(t *testing.T) {
	t.Parallel()
	node := uniqueName(t)
	startNodelet(t, node)
	ns := newNamespace(t)
	waitReady(t, node, 10*time.Second)
	apply(t, ns, deployment("marked", node, 1))
	kubectl(t, "rollout", "status", "-n", ns, "deployment/marked", "--timeout=60s")
	pod := podList(t, ns).Items[0].Name
	ready := func() (bool, string) {
		out, _ := kubectlErr("get", "pod", "-n", ns, pod, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
		return out == "True", "Ready " + out
	}
	for i := range 3 {
		kubectl(t, "patch", "pod", "-n", ns, pod, "--subresource=status",
			"-p", `{"status":{"conditions":[{"type":"Ready","status":"False","reason":"NodeNotReady"}]}}`)
		eventually(t, 30*time.Second, fmt.Sprintf("the pod Ready again after marking %d", i+1), ready)
	}
}

// hugePod is a pod named huge, bound to node, that asks for more cpu than
// any node has.
func hugePod(node string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: huge
spec:
  nodeName: %s
  restartPolicy: Never
  containers:
  - name: app
    image: nodelet.io/sample:1
    command: ["sleep", "infinity"]
    resources:
      requests:
        cpu: "1000"
`, node)
}
