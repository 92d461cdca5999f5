package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestSimLifecycleFromConfig drives the sim provider's configurable
// lifecycle through a config file: every pod completes after a short run,
// so a Job succeeds and a Deployment's pods crash-loop; a node condition
// flips on a schedule and kubectl sees it come and go.
func TestSimLifecycleFromConfig(t *testing.T) {
	t.Parallel()
	node := uniqueName(t)
	cfg := writeFile(t, "nodelet.yaml", fmt.Sprintf(`apiVersion: nodelet.io/v1alpha1
kind: NodeletConfiguration
nodeName: %s
sim:
  startDelay: 500ms
  startJitter: 500ms
  completeRatio: 1
  runDuration: 2s
  nodeConditions:
  - type: MemoryPressure
    every: 8s
    for: 4s
`, node))
	startNodelet(t, node, "--config", cfg)
	ns := newNamespace(t)

	// The condition shows for 4 s out of every 8 s: seen True, then False.
	for _, want := range []string{"True", "False", "True"} {
		eventually(t, 30*time.Second, "MemoryPressure "+want, func() (bool, string) {
			out, _ := kubectlErr("get", "node", node, "-o", `jsonpath={.status.conditions[?(@.type=="MemoryPressure")].status} {.status.conditions[?(@.type=="MemoryPressure")].reason}`)
			return strings.HasPrefix(out, want+" "), out
		})
	}

	apply(t, ns, fmt.Sprintf(`apiVersion: batch/v1
kind: Job
metadata:
  name: once
spec:
  backoffLimit: 0
  template:
    spec:
      nodeName: %s
      restartPolicy: Never
      containers:
      - name: work
        image: nodelet.io/sample:1
        command: ["true"]
`, node))
	kubectl(t, "wait", "-n", ns, "--for=condition=Complete", "job/once", "--timeout=60s")
	out := kubectl(t, "get", "pods", "-n", ns, "-l", "job-name=once", "-o", "jsonpath={.items[0].status.phase} {.items[0].status.containerStatuses[0].state.terminated.reason}")
	if out != "Succeeded Completed" {
		t.Errorf("job pod: %q, want Succeeded Completed", out)
	}

	// restartPolicy Always: the container exits, waits in CrashLoopBackOff
	// and runs again with a restart counted.
	apply(t, ns, deployment("loop", node, 1))
	eventually(t, 60*time.Second, "container in CrashLoopBackOff", func() (bool, string) {
		out, _ := kubectlErr("get", "pods", "-n", ns, "-l", "app=loop", "-o", "jsonpath={.items[0].status.containerStatuses[0].state.waiting.reason}")
		return out == "CrashLoopBackOff", out
	})
	eventually(t, 60*time.Second, "container restarted", func() (bool, string) {
		out, _ := kubectlErr("get", "pods", "-n", ns, "-l", "app=loop", "-o", "jsonpath={.items[0].status.containerStatuses[0].restartCount} {.items[0].status.containerStatuses[0].lastState.terminated.reason}")
		return out == "1 Completed", out
	})
}
