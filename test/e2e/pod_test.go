package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// deployment returns a Deployment manifest pinned to node.
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

func apply(t *testing.T, ns, manifest string) {
	t.Helper()
	path := t.TempDir() + "/manifest.yaml"
	if err := writeFile(path, manifest); err != nil {
		t.Fatal(err)
	}
	kubectl(t, "apply", "-n", ns, "-f", path)
}

func podList(t *testing.T, ns string) []corev1.Pod {
	t.Helper()
	pods, err := client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

func TestDeploymentLifecycle(t *testing.T) {
	t.Parallel()
	node := uniqueName(t)
	ns := newNamespace(t)
	startNodelet(t, node)
	waitReady(t, node, 10*time.Second)

	apply(t, ns, deployment("web", node, 3))
	kubectl(t, "rollout", "status", "-n", ns, "deployment/web", "--timeout=60s")
	if got := kubectl(t, "get", "deployment", "-n", ns, "web", "-o", "jsonpath={.status.availableReplicas}"); got != "3" {
		t.Fatalf("availableReplicas = %q, want 3", got)
	}
	for _, p := range podList(t, ns) {
		if p.Spec.NodeName != node || p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
			t.Errorf("pod %s: node %s phase %s ip %q, want Running on %s with an IP", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.PodIP, node)
		}
	}

	// A pod deleted with the default grace period disappears.
	victim := podList(t, ns)[0].Name
	kubectl(t, "delete", "pod", "-n", ns, victim, "--timeout=30s")
	if _, err := client.CoreV1().Pods(ns).Get(context.Background(), victim, metav1.GetOptions{}); !isNotFound(err) {
		t.Errorf("pod %s after delete: %v, want NotFound", victim, err)
	}
	kubectl(t, "rollout", "status", "-n", ns, "deployment/web", "--timeout=60s")

	kubectl(t, "scale", "-n", ns, "deployment/web", "--replicas=0")
	eventually(t, 30*time.Second, "all pods gone", func() (bool, string) {
		pods := podList(t, ns)
		return len(pods) == 0, fmt.Sprintf("%d pods left", len(pods))
	})
}

type podRecord struct {
	uid, started string
	restarts     int32
}

func recordPods(t *testing.T, ns string) map[string]podRecord {
	out := map[string]podRecord{}
	for _, p := range podList(t, ns) {
		r := podRecord{uid: string(p.UID)}
		for _, cs := range p.Status.ContainerStatuses {
			r.restarts += cs.RestartCount
			if cs.State.Running != nil {
				r.started = cs.State.Running.StartedAt.String()
			}
		}
		out[p.Name] = r
	}
	return out
}

func TestRestartKeepsPods(t *testing.T) {
	t.Parallel()
	node := uniqueName(t)
	ns := newNamespace(t)
	a := startNodelet(t, node)
	waitReady(t, node, 10*time.Second)
	apply(t, ns, deployment("keep", node, 3))
	kubectl(t, "rollout", "status", "-n", ns, "deployment/keep", "--timeout=60s")
	before := recordPods(t, ns)

	// Any pod added or deleted during the restart fails the test.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var churn []string
	go func() {
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			if ev.Type == watch.Deleted || (ev.Type == watch.Added && before[p.Name].uid != string(p.UID)) {
				mu.Lock()
				churn = append(churn, fmt.Sprintf("%s %s", ev.Type, p.Name))
				mu.Unlock()
			}
		}
	}()

	a.stop()
	a.start()
	waitReady(t, node, 20*time.Second)
	eventually(t, 20*time.Second, "agent synced its pods", func() (bool, string) {
		return strings.Contains(a.logText(), "Start-up reconcile done"), "no start-up reconcile yet"
	})
	// Let the restarted agent make its status reports, then compare.
	kubectl(t, "rollout", "status", "-n", ns, "deployment/keep", "--timeout=60s")
	after := recordPods(t, ns)
	if fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("pods changed across the restart:\nbefore %v\nafter  %v", before, after)
	}
	for name, r := range after {
		if r.restarts != 0 {
			t.Errorf("pod %s restarted %d times", name, r.restarts)
		}
	}
	w.Stop()
	mu.Lock()
	defer mu.Unlock()
	if len(churn) > 0 {
		t.Errorf("pods added or deleted during the restart: %v", churn)
	}
}

func TestRejectedPodFailsWithReason(t *testing.T) {
	t.Parallel()
	node := uniqueName(t)
	ns := newNamespace(t)
	startNodelet(t, node)
	waitReady(t, node, 10*time.Second)

	apply(t, ns, fmt.Sprintf(`apiVersion: v1
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
`, node))
	eventually(t, 20*time.Second, "pod failed as OutOfcpu", func() (bool, string) {
		out, _ := kubectlErr("get", "pod", "-n", ns, "huge", "-o", "jsonpath={.status.phase} {.status.reason}")
		return out == "Failed OutOfcpu", out
	})
	eventually(t, 20*time.Second, "a Warning event says why", func() (bool, string) {
		out, _ := kubectlErr("get", "events", "-n", ns, "--field-selector", "involvedObject.name=huge", "-o", "jsonpath={range .items[*]}{.type} {.reason}: {.message}{\"\\n\"}{end}")
		return strings.Contains(out, "Warning OutOfcpu: Node didn't have enough resource: cpu"), out
	})
}
