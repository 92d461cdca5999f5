package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/test/fault"
)

func TestCRIAttachTTYAndDebug(t *testing.T) {
	node := uniqueName(t)
	startCRINodelet(t, node)
	ns := criNamespace(t)
	apply(t, ns, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: pipe
spec:
  nodeName: %[1]s
  terminationGracePeriodSeconds: 1
  shareProcessNamespace: false
  containers:
  - name: main
    image: %[2]s
    stdin: true
    command: ["sh", "-c", "echo started; while read l; do echo got:$l; done"]
`, node, busyboxImage))
	waitPodPhase(t, ns, "pipe", "Running", 3*time.Minute)

	// attach -i: lines reach the container's stdin, its stdout comes back.
	s := startSession(t, kubectlArgv("attach", "-i", "-n", ns, "pipe", "-c", "main")...)
	s.write(t, "one")
	s.waitOutput(t, "got:one")
	s.stop()

	// exec -it: a terminal (script gives kubectl one, with our pipe as
	// the keyboard).
	cmdline := strings.Join(kubectlArgv("exec", "-it", "-n", ns, "pipe", "-c", "main", "--", "sh", "-c", "'test -t 0 && echo is-a-tty; read l; echo tty-got:$l'"), " ")
	tty := startSession(t, "script", "-qec", cmdline, "/dev/null")
	tty.waitOutput(t, "is-a-tty")
	tty.write(t, "two")
	tty.waitOutput(t, "tty-got:two")
	tty.stop()

	// kubectl debug: an ephemeral container that shares the target's
	// processes.
	dbg := startSession(t, kubectlArgv("debug", "-i", "-n", ns, "pipe", "--image="+busyboxImage, "--target=main", "--container=dbg", "--", "sh")...)
	dbg.write(t, "echo debug-$((1+1)); ps")
	dbg.waitOutput(t, "debug-2")
	dbg.waitOutput(t, "while read l")
	dbg.stop()
	eventually(t, time.Minute, "ephemeral container status", func() (bool, string) {
		out, _ := kubectlErr("get", "pod", "-n", ns, "pipe", "-o", "jsonpath={.status.ephemeralContainerStatuses[0].name}")
		return out == "dbg", out
	})
}

func TestCRIAgentKillKeepsContainers(t *testing.T) {
	node := uniqueName(t)
	a := startCRINodelet(t, node)
	ns := criNamespace(t)
	apply(t, ns, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: survivor
spec:
  nodeName: %s
  terminationGracePeriodSeconds: 1
  containers:
  - name: web
    image: %s
    args: ["netexec", "--http-port=8080"]
`, node, agnhostImage))
	waitPodPhase(t, ns, "survivor", "Running", 3*time.Minute)
	state := func() string {
		return kubectl(t, "get", "pod", "-n", ns, "survivor", "-o",
			"jsonpath={.status.phase} {.status.containerStatuses[0].containerID} {.status.containerStatuses[0].restartCount} {.status.containerStatuses[0].state.running.startedAt} {.status.podIP}")
	}
	before := state()
	a.kill()
	a.start()
	waitReady(t, node, time.Minute)
	eventually(t, 30*time.Second, "agent reconciled its pods after the restart", func() (bool, string) {
		return strings.Contains(a.logText(), "Start-up reconcile done"), lastLines(a.logText(), 3)
	})
	if after := state(); after != before {
		t.Errorf("after the agent's kill -9: %q, before: %q", after, before)
	}
	// The pod still serves.
	ip := getPod(t, ns, "survivor").Status.PodIP
	if body, err := httpGet("http://" + ip + ":8080/hostname"); err != nil || body != "survivor" {
		t.Errorf("GET /hostname after the restart: %q, %v", body, err)
	}
}

func TestCRIRuntimeDownAndBack(t *testing.T) {
	node := uniqueName(t)
	a := startCRINodelet(t, node, "--node-lease-duration-seconds", "10")
	ns := criNamespace(t)
	apply(t, ns, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: steady
spec:
  nodeName: %s
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: %s
    command: ["sleep", "3600"]
`, node, busyboxImage))
	waitPodPhase(t, ns, "steady", "Running", 3*time.Minute)
	before := kubectl(t, "get", "pod", "-n", ns, "steady", "-o", "jsonpath={.status.containerStatuses[0].containerID} {.status.containerStatuses[0].restartCount}")
	if err := a.env.Kill(); err != nil {
		t.Fatal(err)
	}
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = a.env.Restart(context.Background())
		}
	})
	eventually(t, time.Minute, "node NotReady naming the runtime", func() (bool, string) {
		c, err := nodeCondition(node, "Ready")
		if err != nil || c == nil {
			return false, fmt.Sprint(err)
		}
		return c.Status == "False" && strings.Contains(c.Message, "container runtime"), c.Message
	})
	if err := a.env.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	restarted = true
	waitReady(t, node, time.Minute)
	after := kubectl(t, "get", "pod", "-n", ns, "steady", "-o", "jsonpath={.status.containerStatuses[0].containerID} {.status.containerStatuses[0].restartCount}")
	if after != before {
		t.Errorf("after the runtime's restart: %q, before: %q", after, before)
	}
	if out := kubectl(t, "exec", "-n", ns, "steady", "--", "echo", "alive"); strings.TrimSpace(out) != "alive" {
		t.Errorf("exec after the runtime's restart: %q", out)
	}
}

func TestCRINoRuntimeAtEndpoint(t *testing.T) {
	criEnv(t)
	node := uniqueName(t)
	socket := t.TempDir() + "/none.sock"
	ca := filepath.Join(filepath.Dir(kubeconfig), "pki", "ca.crt")
	a := startNodelet(t, node, "--provider", "cri", "--container-runtime-endpoint", "unix://"+socket,
		"--root-dir", t.TempDir(), "--pod-logs-dir", t.TempDir(), "--port", fmt.Sprint(fault.FreePort(t)),
		"--client-ca-file", ca, "--address", hostIP(t))
	eventually(t, time.Minute, "node NotReady naming the socket", func() (bool, string) {
		c, err := nodeCondition(node, "Ready")
		if err != nil || c == nil {
			return false, fmt.Sprint(err)
		}
		return c.Status == "False" && strings.Contains(c.Message, socket), c.Message
	})
	if done, err := a.exited(); done {
		t.Fatalf("the agent exited: %v", err)
	}
}

func TestCRICrashLoopKeepsOneDeadContainer(t *testing.T) {
	node := uniqueName(t)
	c := startCRINodelet(t, node)
	ns := criNamespace(t)
	apply(t, ns, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: crash
spec:
  nodeName: %s
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: %s
    command: ["sh", "-c", "echo attempt; exit 1"]
    terminationMessagePolicy: FallbackToLogsOnError
`, node, busyboxImage))
	eventually(t, 3*time.Minute, "three restarts", func() (bool, string) {
		pod := getPod(t, ns, "crash")
		if len(pod.Status.ContainerStatuses) == 0 {
			return false, "no status"
		}
		cs := pod.Status.ContainerStatuses[0]
		return cs.RestartCount >= 3 && cs.State.Waiting != nil && cs.State.Waiting.Reason == "CrashLoopBackOff",
			fmt.Sprintf("%+v", cs)
	})
	cs := getPod(t, ns, "crash").Status.ContainerStatuses[0]
	if last := cs.LastTerminationState.Terminated; last == nil || last.ExitCode != 1 || !strings.Contains(last.Message, "attempt") {
		t.Errorf("last state %+v, want exit 1 with the log's end as the message", cs.LastTerminationState)
	}
	// While it waits to restart, its latest attempt is the one dead
	// container kept: its status and its logs, --previous too, read it.
	eventually(t, 30*time.Second, "one dead container in the runtime", func() (bool, string) {
		_, containers := c.runtimePods(t)
		var dead []string
		for _, ct := range containers {
			if ct.State == runtimeapi.ContainerState_CONTAINER_EXITED {
				dead = append(dead, fmt.Sprintf("attempt %d", ct.GetMetadata().GetAttempt()))
			}
		}
		return len(dead) == 1, fmt.Sprintf("%d restarts, dead: %v", cs.RestartCount, dead)
	})
	if out := kubectl(t, "logs", "-n", ns, "crash", "--previous"); !strings.Contains(out, "attempt") {
		t.Errorf("logs --previous while waiting to restart: %q", out)
	}
}

func TestCRILogRotation(t *testing.T) {
	node := uniqueName(t)
	const maxSize, maxFiles = 4096, 3
	cfg := writeFile(t, "nodelet.yaml", fmt.Sprintf(`apiVersion: nodelet.io/v1alpha1
kind: NodeletConfiguration
containerLogMaxSize: "%d"
containerLogMaxFiles: %d
`, maxSize, maxFiles))
	c := startCRINodelet(t, node, "--config", cfg)
	ns := criNamespace(t)
	apply(t, ns, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: chatty
spec:
  nodeName: %s
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: %s
    command: ["sh", "-c", "i=0; while true; do echo line $i; i=$((i+1)); sleep 0.01; done"]
`, node, busyboxImage))
	waitPodPhase(t, ns, "chatty", "Running", 3*time.Minute)
	pod := getPod(t, ns, "chatty")
	dir := filepath.Join(c.logsDir, ns+"_chatty_"+string(pod.UID), "main")
	eventually(t, time.Minute, "the log rotated, keeping "+fmt.Sprint(maxFiles-1)+" old files", func() (bool, string) {
		files, _ := filepath.Glob(filepath.Join(dir, "0.log*"))
		return len(files) == maxFiles, fmt.Sprint(files)
	})
	// kubectl logs reads the current file, which the runtime writes again.
	eventually(t, 30*time.Second, "logs after a rotation", func() (bool, string) {
		out, _ := kubectlErr("logs", "-n", ns, "chatty", "--tail=1")
		return strings.HasPrefix(out, "line "), out
	})
}
