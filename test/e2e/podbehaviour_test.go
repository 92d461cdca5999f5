package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The pods here use only a shell's builtins, sleep, test and touch, so the
// same pod runs on both providers: the process provider runs the host's,
// the cri provider the busybox image's. Each behaviour is checked by one
// function for both.

// probedPod has a container kept unready by its readiness probe until a
// file exists in its emptyDir, and one whose liveness probe always fails,
// behind a Service.
func probedPod(node, image string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: probed
  labels: {app: probed}
spec:
  nodeName: %[1]s
  terminationGracePeriodSeconds: 1
  volumes:
  - name: flags
    emptyDir: {}
  containers:
  - name: ready
    image: %[2]s
    command: ["sleep", "3600"]
    ports: [{containerPort: 8080}]
    volumeMounts: [{name: flags, mountPath: /mnt}]
    readinessProbe:
      exec: {command: ["test", "-f", "/mnt/ready"]}
      periodSeconds: 1
  - name: live
    image: %[2]s
    command: ["sleep", "3600"]
    livenessProbe:
      exec: {command: ["false"]}
      periodSeconds: 1
      failureThreshold: 2
---
apiVersion: v1
kind: Service
metadata:
  name: probed
spec:
  selector: {app: probed}
  ports: [{port: 80, targetPort: 8080}]
`, node, image)
}

// checkProbes runs probedPod: the failing liveness probe restarts its
// container with an Unhealthy Event; the readiness probe keeps the pod
// not Ready and its EndpointSlice entry not ready until the file exists.
func checkProbes(t *testing.T, ns string) {
	t.Helper()
	eventually(t, 2*time.Minute, "liveness failure restarts the container", func() (bool, string) {
		out, _ := kubectlErr("get", "pod", "-n", ns, "probed", "-o", `jsonpath={.status.containerStatuses[?(@.name=="live")].restartCount}`)
		n, _ := strconv.Atoi(out)
		return n >= 1, "restartCount " + out + "\nevents:\n" + podEvents(t, ns, "probed")
	})
	if events := podEvents(t, ns, "probed"); !strings.Contains(events, "Unhealthy: Liveness probe failed") {
		t.Errorf("no Unhealthy event for the liveness probe; events:\n%s", events)
	}
	endpoint := func() string {
		out, _ := kubectlErr("get", "endpointslices", "-n", ns, "-l", "kubernetes.io/service-name=probed", "-o", `jsonpath={.items[*].endpoints[*].conditions.ready}`)
		return out
	}
	eventually(t, 30*time.Second, "EndpointSlice lists the pod not ready", func() (bool, string) {
		out := endpoint()
		return out == "false", out
	})
	if got := kubectl(t, "get", "pod", "-n", ns, "probed", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`); got != "False" {
		t.Errorf("Ready = %s while the readiness probe fails", got)
	}
	kubectl(t, "exec", "-n", ns, "probed", "-c", "ready", "--", "touch", "/mnt/ready")
	eventually(t, 30*time.Second, "EndpointSlice lists the pod ready", func() (bool, string) {
		out := endpoint()
		return out == "true", out
	})
}

// endingPods are a container over its memory limit and one with a preStop
// hook that leaves a line for the container's SIGTERM handler to log.
func endingPods(node, image string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: hog
spec:
  nodeName: %[1]s
  restartPolicy: Never
  containers:
  - name: c
    image: %[2]s
    command: ["sh", "-c", "x=a; while true; do x=$x$x; done"]
    resources:
      limits: {memory: 32Mi}
---
apiVersion: v1
kind: Pod
metadata:
  name: graceful
spec:
  nodeName: %[1]s
  terminationGracePeriodSeconds: 20
  volumes:
  - name: hook
    emptyDir: {}
  containers:
  - name: c
    image: %[2]s
    command: ["sh", "-c", "trap 'cat /mnt/said; echo got TERM; sleep 2; exit 0' TERM; while true; do sleep 1; done"]
    volumeMounts: [{name: hook, mountPath: /mnt}]
    lifecycle:
      preStop:
        exec: {command: ["sh", "-c", "echo prestop > /mnt/said"]}
`, node, image)
}

// checkEndings runs endingPods: the memory hog is OOMKilled, and deleting
// the graceful pod runs its preStop hook before SIGTERM, whose handler
// finishes within the grace period.
func checkEndings(t *testing.T, ns string) {
	t.Helper()
	eventually(t, 3*time.Minute, "OOMKilled", func() (bool, string) {
		out, _ := kubectlErr("get", "pod", "-n", ns, "hog", "-o", "jsonpath={.status.phase} {.status.containerStatuses[0].state.terminated.reason}")
		return out == "Failed OOMKilled", out
	})
	waitPodPhase(t, ns, "graceful", "Running", 3*time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	follow := kubectlCmd(ctx, "logs", "-f", "-n", ns, "graceful")
	var logs syncBuffer
	follow.Stdout = &logs
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	kubectl(t, "delete", "pod", "-n", ns, "graceful", "--wait=true", "--timeout=60s")
	_ = follow.Wait()
	if got := logs.String(); !strings.Contains(got, "prestop\ngot TERM") {
		t.Errorf("the container's log through its deletion: %q, want the preStop hook's line, then TERM", got)
	}
}

// onProcessNode applies the pods that pods makes for a process node of the
// test's own, and returns their namespace. The test runs in parallel.
func onProcessNode(t *testing.T, pods func(node, image string) string) string {
	t.Helper()
	t.Parallel()
	node := uniqueName(t)
	startProcessNodelet(t, node)
	ns := newNamespace(t)
	t.Cleanup(func() { deletePods(t, ns) })
	apply(t, ns, pods(node, "nodelet.io/none"))
	return ns
}

// onCRINode applies them for a cri node of the test's own, with the
// busybox image (the cri tests run one at a time).
func onCRINode(t *testing.T, pods func(node, image string) string) string {
	t.Helper()
	node := uniqueName(t)
	startCRINodelet(t, node)
	ns := criNamespace(t)
	apply(t, ns, pods(node, busyboxImage))
	return ns
}

func TestProcessProbes(t *testing.T) {
	checkProbes(t, onProcessNode(t, probedPod))
}

func TestCRIProbes(t *testing.T) {
	checkProbes(t, onCRINode(t, probedPod))
}

func TestProcessOOMAndPreStop(t *testing.T) {
	checkEndings(t, onProcessNode(t, endingPods))
}

// The termination message is the cri provider's alone: a process
// container runs in the host's filesystem, where no file is mounted at its
// terminationMessagePath.
func TestCRITerminationMessageOOMAndPreStop(t *testing.T) {
	ns := onCRINode(t, func(node, image string) string {
		return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: msg
spec:
  nodeName: %s
  restartPolicy: Never
  containers:
  - name: c
    image: %s
    command: ["sh", "-c", "printf 'all done' > /dev/termination-log"]
---
`, node, image) + endingPods(node, image)
	})
	eventually(t, 3*time.Minute, "termination message", func() (bool, string) {
		out, _ := kubectlErr("get", "pod", "-n", ns, "msg", "-o", "jsonpath={.status.phase} {.status.containerStatuses[0].state.terminated.message}")
		return out == "Succeeded all done", out
	})
	checkEndings(t, ns)
}
