package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestGracefulNodeShutdown shuts a process node down with `nodelet
// shutdown`: the low-priority pod gets its preStop hook and SIGTERM before
// the high-priority one, both end Failed with the kubelet's reason and
// message, the node turns NotReady and refuses new pods; an agent restart
// afterwards (the host back up) makes it Ready again.
func TestGracefulNodeShutdown(t *testing.T) {
	t.Parallel()
	node := uniqueName(t)
	high := node + "-high"
	kubectl(t, "create", "priorityclass", high, "--value=100000")
	t.Cleanup(func() { _, _ = kubectlErr("delete", "priorityclass", high, "--ignore-not-found") })
	config := writeFile(t, "shutdown.yaml", `apiVersion: nodelet.io/v1alpha1
kind: NodeletConfiguration
shutdownGracePeriodByPodPriority:
- priority: 0
  shutdownGracePeriodSeconds: 20
- priority: 100000
  shutdownGracePeriodSeconds: 20
`)
	a := startProcessNodelet(t, node, "--config", config)
	ns := newNamespace(t)
	t.Cleanup(func() { deletePods(t, ns) })

	marks := t.TempDir()
	for _, p := range []struct{ name, class string }{{"low", ""}, {"high", high}} {
		class := ""
		if p.class != "" {
			class = "priorityClassName: " + p.class
		}
		apply(t, ns, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %[1]s
spec:
  nodeName: %[2]s
  %[3]s
  terminationGracePeriodSeconds: 30
  containers:
  - name: main
    image: nodelet.io/none
    command: ["sh", "-c", "trap 'date +%%s%%N > /marks/%[1]s-term; exit 0' TERM; while true; do sleep 0.2; done"]
    lifecycle:
      preStop:
        exec:
          command: ["sh", "-c", "date +%%s%%N > /marks/%[1]s-prestop"]
    volumeMounts:
    - name: marks
      mountPath: /marks
  volumes:
  - name: marks
    hostPath:
      path: %[4]s
`, p.name, node, class, marks))
	}
	waitPodPhase(t, ns, "low", "Running", time.Minute)
	waitPodPhase(t, ns, "high", "Running", time.Minute)

	out, err := exec.Command(filepath.Join(root, "bin/nodelet"), "shutdown", "--root-dir", a.rootDir).CombinedOutput()
	if err != nil || !strings.HasSuffix(string(out), "done\n") {
		t.Fatalf("nodelet shutdown: %v\n%s", err, out)
	}
	mark := func(name string) int64 {
		data, err := os.ReadFile(filepath.Join(marks, name))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			return 0
		}
		n, _ := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
		return n
	}
	lowTerm, highPreStop := mark("low-term"), mark("high-prestop")
	if mark("low-prestop") == 0 || mark("high-term") == 0 || lowTerm == 0 || highPreStop == 0 || lowTerm > highPreStop {
		t.Errorf("low pod TERM at %d, high pod's preStop at %d: want both hooks and TERMs, the low pod first", lowTerm, highPreStop)
	}

	const message = "Pod was terminated in response to imminent node shutdown."
	for _, pod := range []string{"low", "high"} {
		eventually(t, 30*time.Second, "pod "+pod+" failed by the shutdown", func() (bool, string) {
			out, _ := kubectlErr("get", "pod", "-n", ns, pod, "-o",
				`jsonpath={.status.phase}|{.status.reason}|{.status.message}|{.status.conditions[?(@.type=="DisruptionTarget")].reason}`)
			return out == "Failed|Terminated|"+message+"|TerminationByKubelet", out
		})
	}
	eventually(t, 30*time.Second, "node NotReady, shutting down", func() (bool, string) {
		out, _ := kubectlErr("get", "node", node, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}|{.status.conditions[?(@.type=="Ready")].message}`)
		return out == "False|node is shutting down", out
	})
	apply(t, ns, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: late
spec:
  nodeName: %s
  containers:
  - name: main
    image: nodelet.io/none
    command: ["sleep", "3600"]
`, node))
	eventually(t, 30*time.Second, "a new pod refused", func() (bool, string) {
		out, _ := kubectlErr("get", "pod", "-n", ns, "late", "-o", "jsonpath={.status.phase}|{.status.reason}")
		return out == "Failed|NodeShutdown", out
	})

	// The host is back: the agent starts again and the node is Ready.
	a.stop()
	a.start()
	waitReadyAgain(t, node, a.agent)
}

// waitReadyAgain waits until the restarted agent has registered its node
// and the node is Ready.
func waitReadyAgain(t *testing.T, node string, a *agent) {
	t.Helper()
	a.waitRegistered(time.Minute)
	waitReady(t, node, time.Minute)
}
