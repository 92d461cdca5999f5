package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodelet/nodelet/test/fault"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"
)

// TestAgentKilledDuringBursts: the process agent is killed with SIGKILL at
// 20 random moments while pods are created and deleted in bursts, and
// started again each time. Afterwards the runtime and the API agree
// exactly: no orphan sandbox, no pod stuck terminating, no container
// started twice.
func TestAgentKilledDuringBursts(t *testing.T) {
	const kills = 20
	r := begin(t, fmt.Sprintf("agent SIGKILL at %d random moments of create/delete bursts", kills))
	if !isRoot() {
		t.Skip("the process provider needs root")
	}
	prefix := name("kill")
	a := startAgent(t, prefix, agentOptions{provider: "process", extra: []string{"--address", "127.0.0.1"}})
	waitReady(t, time.Minute, a)
	ns := newNamespace(t, "kill")
	o := r.observe(ns, prefix, nil)
	out := t.TempDir()

	var live, deleted []string
	next := 0
	start := time.Now()
	for i := 0; i < kills; i++ {
		burst := podNames("p", next, 3)
		next += 3
		for _, n := range burst {
			create(t, processPod(ns, n, a.name, out))
		}
		if len(live) >= 4 {
			remove(t, o, ns, live[:2]...)
			deleted, live = append(deleted, live[:2]...), live[2:]
		}
		live = append(live, burst...)
		<-time.After(rand.N(2500 * time.Millisecond)) // a random moment of the burst's handling
		a.Kill()
		if err := a.Start(); err != nil {
			t.Fatal(err)
		}
	}
	waitGone(t, ns, 3*time.Minute, deleted...)
	waitRunning(t, ns, 3*time.Minute, live...)
	converged := time.Since(start)

	pods, _, err := running(ns)
	if err != nil {
		t.Fatal(err)
	}
	var uids []string
	for _, n := range live {
		uids = append(uids, string(pods[n].UID))
		if s := starts(t, out, n); s != 1 {
			t.Errorf("pod %s: its container started %d times, want once", n, s)
		}
		if len(hostPIDs(token(ns, n))) == 0 {
			t.Errorf("pod %s is Running in the API but has no process", n)
		}
	}
	for _, n := range deleted {
		if pids := hostPIDs(token(ns, n)); len(pids) > 0 {
			t.Errorf("pod %s is gone from the API but its processes run: %v", n, pids)
		}
	}
	// The sandboxes on disk are exactly the live pods'.
	entries, err := os.ReadDir(filepath.Join(a.rootDir, "pods"))
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, e := range entries {
		dirs = append(dirs, e.Name())
	}
	slices.Sort(dirs)
	slices.Sort(uids)
	if !slices.Equal(dirs, uids) {
		t.Errorf("pod directories of the runtime %v, want the live pods' %v", dirs, uids)
	}
	r.finish(limits{}, fmt.Sprintf("%d pods created, %d deleted; API and sandboxes agreed %s after the first burst", next, len(deleted), converged.Round(time.Second)))
}

// TestRuntimeKilledDuringStarts: containerd is killed with SIGKILL while
// containers start, and started again 8 seconds later. Every pod recovers,
// no container runs twice, and every exit that happened meanwhile is seen
// afterwards.
func TestRuntimeKilledDuringStarts(t *testing.T) {
	r := begin(t, "containerd SIGKILL during container starts")
	env := criEnv(t)
	prefix := name("runtime")
	a := startAgent(t, prefix, agentOptions{provider: "cri", extra: []string{"--container-runtime-endpoint", env.Endpoint(),
		"--pod-logs-dir", t.TempDir(), "--address", "127.0.0.1"}})
	waitReady(t, time.Minute, a)
	ns := newNamespace(t, "runtime")
	r.observe(ns, prefix, nil)

	long := podNames("long", 0, 3)
	exiting := podNames("exit", 0, 3)
	for _, n := range long {
		create(t, criPod(ns, n, a.name))
	}
	for _, n := range exiting {
		p := bound(ns, n, a.name, corev1.Container{Name: "main", Image: "busybox", Command: []string{"sh", "-c", "sleep 3; exit 3"}})
		p.Spec.RestartPolicy = corev1.RestartPolicyNever
		create(t, p)
	}
	// Kill it once the first container has started: the others are
	// starting or about to.
	eventually(t, 2*time.Minute, "a container started", func() (bool, string) {
		cs := runtimeContainers(t, a.name)
		return len(cs) > 0, "none yet"
	})
	if err := env.Kill(); err != nil {
		t.Fatal(err)
	}
	<-time.After(8 * time.Second) // the runtime's outage
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := env.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, ns, 3*time.Minute, long...)
	// Every exit during the outage is seen after it: the pod fails with
	// its container's exit code. One exception is containerd's own: on its
	// restart it reaps, as leaked, a container's shim that has no process
	// left (containerd#6860, #6866), which a container that exited while
	// containerd was down is too; its exit status goes with the shim, and
	// the CRI reports it exited with 255, reason Unknown (a kubelet sees
	// the same). Such a pod is counted, and only where containerd's log
	// says it reaped that container's shim.
	lost := map[string]string{}
	unknown := map[string]string{} // pod: its container's ID
	deadline := time.Now().Add(3 * time.Minute)
	for {
		clear(lost)
		clear(unknown)
		for _, n := range exiting {
			p, err := client.CoreV1().Pods(ns).Get(context.Background(), n, metav1.GetOptions{})
			if err != nil {
				lost[n] = err.Error()
				continue
			}
			var code *int32
			if len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].State.Terminated != nil {
				code = ptr.To(p.Status.ContainerStatuses[0].State.Terminated.ExitCode)
			}
			if p.Status.Phase == corev1.PodFailed && code != nil && *code == 255 {
				_, unknown[n], _ = strings.Cut(p.Status.ContainerStatuses[0].ContainerID, "://")
				continue
			}
			if p.Status.Phase != corev1.PodFailed || code == nil || *code != 3 {
				var inRuntime []string
				for _, c := range runtimeContainers(t, a.name) {
					if c.Labels["io.kubernetes.pod.name"] == n {
						inRuntime = append(inRuntime, fmt.Sprintf("%.12s %s", c.Id, c.State))
					}
				}
				lost[n] = fmt.Sprintf("phase %s, exit code %v; in the runtime %v", p.Status.Phase, ptr.Deref(code, -1), inRuntime)
			}
		}
		if len(lost) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	for n, why := range lost {
		t.Errorf("exit status of %s not seen: %s", n, why)
	}
	for n, id := range unknown {
		if id == "" {
			t.Errorf("pod %s failed with the runtime's unknown exit code 255, and its status names no container", n)
			continue
		}
		said := logLinesAbout(env.LogPath(), id)
		if slices.ContainsFunc(said, func(line string) bool { return strings.Contains(line, "cleaning leaked shim process") }) {
			t.Logf("pod %s failed with 255: containerd reaped its container's shim on restart, and its exit status with it", n)
			continue
		}
		t.Errorf("pod %s failed with the runtime's unknown exit code 255, and containerd did not say it reaped the shim of its container %q; what it said of it:\n%s",
			n, id, strings.Join(said, "\n"))
	}
	// No container runs twice: a start the runtime's death cut short may
	// cost an attempt (as it does a kubelet), but never a second running
	// copy beside the first.
	running := map[string]int{}
	for _, c := range runtimeContainers(t, a.name) {
		if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
			running[c.Labels["io.kubernetes.pod.name"]]++
		}
	}
	for _, n := range long {
		if running[n] != 1 {
			t.Errorf("pod %s has %d running containers in the runtime, want 1", n, running[n])
		}
	}
	for _, n := range exiting {
		if running[n] != 0 {
			t.Errorf("pod %s ended but has %d running containers in the runtime", n, running[n])
		}
	}
	// A container whose start the kill cut short is started again (see
	// docs/reliability.md): at most one restart a pod. The node is NotReady at
	// most once, while its runtime does not answer.
	r.finish(limits{restarted: atMost(len(long) + len(exiting)), notReady: atMost(1)},
		fmt.Sprintf("%d pods; exit statuses of containers that ended during the outage: %d of %d seen, %d lost by containerd with the shim it reaped (255)",
			len(long)+len(exiting), len(exiting)-len(lost)-len(unknown), len(exiting), len(unknown)))
}

// TestProcessSandboxesKilledDuringStarts: the process provider's runtime
// is each pod's sandbox, the supervisor of its containers. Every sandbox
// of the node is killed with SIGKILL while containers start. Each pod is
// set up again: its containers run once more, exactly one copy each, and
// the exit the kill caused is in their status, not lost.
func TestProcessSandboxesKilledDuringStarts(t *testing.T) {
	r := begin(t, "process sandboxes SIGKILLed during container starts")
	if !isRoot() {
		t.Skip("the process provider needs root")
	}
	prefix := name("sandbox")
	a := startAgent(t, prefix, agentOptions{provider: "process", extra: []string{"--address", "127.0.0.1"}})
	waitReady(t, time.Minute, a)
	ns := newNamespace(t, "sandbox")
	r.observe(ns, prefix, nil)
	out := t.TempDir()

	long := podNames("long", 0, 3)
	exiting := podNames("exit", 0, 3)
	for _, n := range long {
		create(t, processPod(ns, n, a.name, out))
	}
	for _, n := range exiting {
		p := bound(ns, n, a.name, corev1.Container{Name: "main", Image: "nodelet.io/none",
			Command: []string{"sh", "-c", "sleep 3; exit 3", token(ns, n)}})
		p.Spec.RestartPolicy = corev1.RestartPolicyNever
		create(t, p)
	}
	eventually(t, 2*time.Minute, "a container started", func() (bool, string) {
		return len(hostPIDs(token(ns, long[0]))) > 0, "not yet"
	})
	started := map[string]bool{}
	for _, n := range append(slices.Clone(long), exiting...) {
		started[n] = len(hostPIDs(token(ns, n))) > 0
	}
	// The sandboxes are the agent's children's: found by its root
	// directory on their command lines.
	sandboxes := hostPIDs("runtime-sandbox " + filepath.Join(a.rootDir, "pods") + "/")
	if len(sandboxes) == 0 {
		t.Fatal("no sandbox process found")
	}
	for _, pid := range sandboxes {
		n, _ := strconv.Atoi(pid)
		if err := syscall.Kill(n, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			t.Fatal(err)
		}
	}

	// Running again: those that had started, once more (after the
	// restart back-off).
	eventually(t, 3*time.Minute, "the long pods running again", func() (bool, string) {
		pods, _, err := running(ns)
		if err != nil {
			return false, err.Error()
		}
		var waiting []string
		for _, n := range long {
			p := pods[n]
			if p == nil || !isRunning(p) || started[n] && p.Status.ContainerStatuses[0].RestartCount < 1 {
				waiting = append(waiting, n)
			}
		}
		return len(waiting) == 0, fmt.Sprintf("not running again: %v", waiting)
	})
	var seen int
	eventually(t, 3*time.Minute, "the exiting pods ended with their exit status", func() (bool, string) {
		seen = 0
		var why []string
		for _, n := range exiting {
			p, err := client.CoreV1().Pods(ns).Get(context.Background(), n, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if p.Status.Phase != corev1.PodFailed || len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].State.Terminated == nil {
				why = append(why, fmt.Sprintf("%s: %s (%s)", n, p.Status.Phase, fault.StateSummary(p)))
				continue
			}
			// 3 if it ran after the kill, 137 if the kill ended it.
			if code := p.Status.ContainerStatuses[0].State.Terminated.ExitCode; code != 3 && code != 137 {
				t.Errorf("pod %s ended with exit code %d, want 3 or 137", n, code)
			}
			seen++
		}
		return len(why) == 0, strings.Join(why, "; ")
	})
	pods, _, err := running(ns)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range long {
		cs := pods[n].Status.ContainerStatuses[0]
		if started[n] {
			if last := cs.LastTerminationState.Terminated; cs.RestartCount < 1 || last == nil || last.ExitCode != 137 {
				t.Errorf("pod %s: restart count %d, last state %+v; want the kill's exit (137) there", n, cs.RestartCount, cs.LastTerminationState)
			}
		}
		if pids := hostPIDs(token(ns, n)); len(pids) != 1 {
			t.Errorf("pod %s runs %d copies (%v), want 1", n, len(pids), pids)
		}
	}
	for _, n := range exiting {
		if pids := hostPIDs(token(ns, n)); len(pids) > 0 {
			t.Errorf("pod %s ended but its processes run: %v", n, pids)
		}
	}
	// Restarted: each long pod whose container had started, once; one
	// that was starting as the kill came may be too. An exiting pod never
	// restarts (its policy is Never).
	startedLong := 0
	for _, n := range long {
		if started[n] {
			startedLong++
		}
	}
	r.finish(limits{restarted: between(startedLong, len(long))},
		fmt.Sprintf("%d sandboxes killed, %d pods; every pod set up again; exit statuses of the ended pods: %d of %d seen",
			len(sandboxes), len(long)+len(exiting), seen, len(exiting)))
}

// logLinesAbout returns the lines of the log at path that name id (or
// the error reading it, as the one line).
func logLinesAbout(path, id string) []string {
	data, err := os.ReadFile(path)
	if err != nil {
		return []string{err.Error()}
	}
	var lines []string
	for line := range strings.Lines(string(data)) {
		if strings.Contains(line, id) {
			lines = append(lines, strings.TrimSuffix(line, "\n"))
		}
	}
	return lines
}

// runtimeContainers are node's containers in the shared containerd.
func runtimeContainers(t *testing.T, node string) []*runtimeapi.Container {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := criRT.RuntimeClient().ListContainers(ctx, &runtimeapi.ListContainersRequest{
		Filter: &runtimeapi.ContainerFilter{LabelSelector: map[string]string{"nodelet.io/node": node}}})
	if err != nil {
		t.Fatalf("list containers: %v", err)
	}
	return list.Containers
}
