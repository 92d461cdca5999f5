package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nodelet/nodelet/test/fault"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// The process provider end to end: real processes driven by plain kubectl
// through the agent's kubelet API.

// processAgent is a nodelet running the process provider.
type processAgent struct {
	*agent
	rootDir string
	port    int
}

// startProcessNodelet runs a process-provider node with its own root dir
// and kubelet port, trusting the control plane's CA for the API server's
// kubelet client certificate. When the test ends it checks that nothing of
// the pods is left: no process, mount or cgroup.
func startProcessNodelet(t *testing.T, node string, extra ...string) *processAgent {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the process provider needs root")
	}
	ca := filepath.Join(filepath.Dir(kubeconfig), "pki", "ca.crt")
	if _, err := os.Stat(ca); err != nil {
		t.Skipf("no cluster CA next to the kubeconfig (%v): the API server's kubelet client certificate cannot be verified", err)
	}
	rootDir := t.TempDir()
	port := fault.FreePort(t)
	uids := recordPodUIDs(t, node)
	t.Cleanup(func() { checkNoLeaks(t, rootDir, uids()) })
	args := append([]string{"--provider", "process", "--root-dir", rootDir, "--port", strconv.Itoa(port), "--client-ca-file", ca,
		"--address", hostIP(t), fault.MemoryEvictionOnly}, nodeIdentity(t, node, kubeconfig, rootDir)...)
	args = append(args, extra...)
	a := startNodelet(t, node, args...)
	waitReady(t, node, 30*time.Second)
	return &processAgent{agent: a, rootDir: rootDir, port: port}
}

// hostIP is the machine's first non-loopback IPv4 address: pod IPs are the
// node's, and Endpoints refuse loopback addresses.
func hostIP(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			return n.IP.String()
		}
	}
	t.Skip("no non-loopback IPv4 address for the node")
	return ""
}

// checkNoLeaks fails the test if a pod of the agent left a process, a mount
// or a cgroup behind. It runs after the namespace and its pods are gone.
// podUIDs are the pods the agent was given.
func checkNoLeaks(t *testing.T, rootDir string, podUIDs []string) {
	t.Helper()
	if out, err := exec.Command("pgrep", "-f", rootDir).Output(); err == nil {
		t.Errorf("processes of %s still running after the pods were deleted: %s", rootDir, strings.Fields(string(out)))
	}
	if data, err := os.ReadFile("/proc/self/mountinfo"); err == nil && strings.Contains(string(data), rootDir) {
		for _, line := range strings.Split(string(data), "\n") {
			if strings.Contains(line, rootDir) {
				t.Errorf("mount left behind: %s", line)
			}
		}
	}
	entries, _ := os.ReadDir(filepath.Join(rootDir, "pods"))
	for _, e := range entries {
		t.Errorf("pod directory left behind: %s", filepath.Join(rootDir, "pods", e.Name()))
	}
	for _, dir := range leftoverCgroups(podUIDs) {
		t.Errorf("cgroup left behind: %s", dir)
	}
	t.Logf("leak check of %s: the cgroups of %d pods looked for in %d hierarchies", rootDir, len(podUIDs), len(cgroupMounts()))
}

// recordPodUIDs records the UID of every pod bound to node from now until
// the test ends, so that the leak check can look for their cgroups once the
// pods are gone. The agents of all tests share one parent cgroup
// ("nodelet" in each hierarchy), so a pod's cgroup is told by its UID.
func recordPodUIDs(t *testing.T, node string) func() []string {
	t.Helper()
	var mu sync.Mutex
	seen := map[string]bool{}
	record := func(obj any) {
		if pod, ok := obj.(*corev1.Pod); ok {
			mu.Lock()
			seen[string(pod.UID)] = true
			mu.Unlock()
		}
	}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
		}))
	if _, err := factory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    record,
		UpdateFunc: func(_, obj any) { record(obj) },
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); factory.Shutdown() })
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("pod informer for %s: %v not synced", node, typ)
		}
	}
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		var uids []string
		for uid := range seen {
			uids = append(uids, uid)
		}
		return uids
	}
}

// leftoverCgroups finds, in every mounted cgroup hierarchy (v1 controllers
// and v2), the cgroup directories of the pods with the given UIDs: the
// process runtime names them pod<uid>, whatever their parent.
func leftoverCgroups(podUIDs []string) []string {
	want := map[string]bool{}
	for _, uid := range podUIDs {
		want["pod"+uid] = true
	}
	var found []string
	for _, mnt := range cgroupMounts() {
		_ = filepath.WalkDir(mnt, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil // a cgroup of someone else went away while we looked
			}
			if d.IsDir() && want[d.Name()] {
				found = append(found, path)
				return filepath.SkipDir
			}
			return nil
		})
	}
	return found
}

// cgroupMounts are the mount points of the cgroup v1 and v2 hierarchies,
// each once.
func cgroupMounts() []string {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var mounts []string
	seen := map[string]bool{}
	for _, line := range strings.Split(string(data), "\n") {
		// ID parent major:minor root mountpoint options... - fstype source superoptions
		fields := strings.Fields(line)
		sep := slices.Index(fields, "-")
		if sep < 5 || sep+1 >= len(fields) {
			continue
		}
		if typ := fields[sep+1]; (typ == "cgroup" || typ == "cgroup2") && !seen[fields[4]] {
			seen[fields[4]] = true
			mounts = append(mounts, fields[4])
		}
	}
	return mounts
}

// The leak check itself: a pod cgroup left in a hierarchy is found.
func TestProcessLeakCheckFindsCgroups(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("making cgroups needs root")
	}
	mounts := cgroupMounts()
	if len(mounts) == 0 {
		t.Skip("no cgroup hierarchy mounted")
	}
	uid := "leakcheck-" + randSuffix()
	var made []string
	for _, mnt := range mounts {
		parent := filepath.Join(mnt, "nodelet-e2e-"+randSuffix())
		if err := os.Mkdir(parent, 0o755); err != nil {
			continue // e.g. a v2 hierarchy that is read-only here
		}
		dir := filepath.Join(parent, "pod"+uid)
		if err := os.Mkdir(dir, 0o755); err != nil {
			_ = syscall.Rmdir(parent)
			t.Fatal(err)
		}
		made = append(made, dir)
		t.Cleanup(func() { _ = syscall.Rmdir(dir); _ = syscall.Rmdir(parent) })
	}
	if len(made) == 0 {
		t.Skip("no writable cgroup hierarchy")
	}
	found := leftoverCgroups([]string{"other", uid})
	slices.Sort(found)
	slices.Sort(made)
	if !slices.Equal(found, made) {
		t.Errorf("leftoverCgroups = %v, want %v", found, made)
	}
	if found := leftoverCgroups([]string{"other"}); len(found) != 0 {
		t.Errorf("leftoverCgroups of another pod = %v, want none", found)
	}
}

// waitPodPhase waits until a pod reaches phase.
func waitPodPhase(t *testing.T, ns, pod, phase string, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, "pod "+pod+" "+phase, func() (bool, string) {
		out, err := kubectlErr("get", "pod", "-n", ns, pod, "-o", "jsonpath={.status.phase} {.status.containerStatuses[*].state}")
		if err != nil {
			return false, err.Error()
		}
		return strings.HasPrefix(out, phase+" "), out
	})
}

// deletePods deletes every pod of ns and waits until they are gone, so that
// the leak check sees the agent's clean-up.
func deletePods(t *testing.T, ns string) {
	t.Helper()
	kubectl(t, "delete", "pods", "--all", "-n", ns, "--wait=true", "--timeout=90s")
}

func TestProcessPodLogsExecPortForward(t *testing.T) {
	t.Parallel()
	node := uniqueName(t)
	startProcessNodelet(t, node)
	ns := newNamespace(t)
	t.Cleanup(func() { deletePods(t, ns) })
	kubectl(t, "create", "configmap", "-n", ns, "app", "--from-literal=key=value-from-configmap")
	httpPort := fault.FreePort(t)
	apply(t, ns, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: app
spec:
  nodeName: %s
  containers:
  - name: main
    image: nodelet.io/none
    command: ["sh", "-c", "echo hello; i=0; while true; do i=$((i+1)); echo tick $i; sleep 1; done"]
    volumeMounts:
    - name: config
      mountPath: /etc/config
  - name: web
    image: nodelet.io/none
    command: ["python3", "-m", "http.server", "--bind", "0.0.0.0", "%d"]
    workingDir: /etc/config
    volumeMounts:
    - name: config
      mountPath: /etc/config
  volumes:
  - name: config
    configMap:
      name: app
`, node, httpPort))
	waitPodPhase(t, ns, "app", "Running", 60*time.Second)

	eventually(t, 30*time.Second, "kubectl logs prints hello", func() (bool, string) {
		out, err := kubectlErr("logs", "-n", ns, "app", "-c", "main")
		return err == nil && strings.HasPrefix(out, "hello\n"), fmt.Sprint(out, err)
	})

	// kubectl logs -f streams lines written after it started.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	follow := exec.CommandContext(ctx, filepath.Join(root, "bin/controlplane"), "kubectl", "--kubeconfig", kubeconfig, "logs", "-f", "--tail=1", "-n", ns, "app", "-c", "main")
	stdout, err := follow.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 0, 4096)
	for strings.Count(string(buf), "tick") < 3 {
		chunk := make([]byte, 1024)
		n, err := stdout.Read(chunk)
		if err != nil {
			t.Fatalf("kubectl logs -f ended after %q: %v", buf, err)
		}
		buf = append(buf, chunk[:n]...)
	}
	cancel()
	_ = follow.Wait()

	if out := kubectl(t, "exec", "-n", ns, "app", "-c", "main", "--", "cat", "/etc/config/key"); out != "value-from-configmap" {
		t.Errorf("kubectl exec cat /etc/config/key = %q, want the configMap's value", out)
	}
	if out := kubectl(t, "exec", "-n", ns, "app", "-c", "main", "--", "hostname"); strings.TrimSpace(out) != "app" {
		t.Errorf("hostname in the pod = %q, want the pod name", out)
	}
	// A failing command's exit code comes back through kubectl.
	if _, err := kubectlErr("exec", "-n", ns, "app", "-c", "main", "--", "sh", "-c", "exit 3"); err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("kubectl exec of exit 3: %v, want exit status 3", err)
	}

	// kubectl exec -it: the command sees a terminal.
	out, err := exec.Command("script", "-qec",
		filepath.Join(root, "bin/controlplane")+" kubectl --kubeconfig "+kubeconfig+" exec -it -n "+ns+" app -c main -- sh -c 'test -t 0 && test -t 1 && echo is-a-tty'", "/dev/null").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "is-a-tty") {
		t.Errorf("kubectl exec -it: %v, output %q; want the command to see a TTY", err, out)
	}

	// kubectl port-forward reaches the pod's HTTP server.
	local := fault.FreePort(t)
	pf := exec.Command(filepath.Join(root, "bin/controlplane"), "kubectl", "--kubeconfig", kubeconfig, "port-forward", "-n", ns, "pod/app", fmt.Sprintf("%d:%d", local, httpPort))
	pf.SysProcAttr = stopWithParent()
	if err := pf.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pf.Process.Kill(); _ = pf.Wait() }()
	eventually(t, 30*time.Second, "HTTP through kubectl port-forward", func() (bool, string) {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/key", local))
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == 200 && string(body) == "value-from-configmap", fmt.Sprintf("%d %q", resp.StatusCode, body)
	})
}

func TestProcessCrashLoopAndPreviousLogs(t *testing.T) {
	t.Parallel()
	node := uniqueName(t)
	startProcessNodelet(t, node)
	ns := newNamespace(t)
	t.Cleanup(func() { deletePods(t, ns) })
	apply(t, ns, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: crash
spec:
  nodeName: %s
  containers:
  - name: main
    image: nodelet.io/none
    command: ["sh", "-c", "echo run at $(date +%%s%%N); exit 1"]
`, node))
	eventually(t, 60*time.Second, "CrashLoopBackOff after a restart", func() (bool, string) {
		out, _ := kubectlErr("get", "pod", "-n", ns, "crash", "-o", "jsonpath={.status.containerStatuses[0].restartCount} {.status.containerStatuses[0].state.waiting.reason} {.status.containerStatuses[0].lastState.terminated.exitCode}")
		f := strings.Fields(out)
		events, _ := kubectlErr("get", "events", "-n", ns, "-o", `jsonpath={range .items[*]}{.reason}: {.message}{"\n"}{end}`)
		return len(f) == 3 && f[0] != "0" && f[1] == "CrashLoopBackOff" && f[2] == "1", out + "\nevents:\n" + events
	})
	prev := kubectl(t, "logs", "--previous", "-n", ns, "crash")
	if !strings.HasPrefix(prev, "run at ") {
		t.Errorf("kubectl logs --previous = %q, want the last run's output", prev)
	}
	events := kubectl(t, "get", "events", "-n", ns, "--field-selector", "involvedObject.name=crash", "-o", `jsonpath={range .items[*]}{.reason}{"\n"}{end}`)
	if !strings.Contains(events, "BackOff") {
		t.Errorf("no BackOff event; events: %s", events)
	}
}

func TestProcessGracefulTermination(t *testing.T) {
	t.Parallel()
	node := uniqueName(t)
	startProcessNodelet(t, node)
	ns := newNamespace(t)
	marker := filepath.Join(t.TempDir(), "got-term")
	apply(t, ns, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: trap
spec:
  nodeName: %[1]s
  terminationGracePeriodSeconds: 30
  containers:
  - name: main
    image: nodelet.io/none
    command: ["sh", "-c", "trap 'echo term > %[2]s; exit 0' TERM; while true; do sleep 0.2; done"]
---
apiVersion: v1
kind: Pod
metadata:
  name: stubborn
spec:
  nodeName: %[1]s
  terminationGracePeriodSeconds: 3
  containers:
  - name: main
    image: nodelet.io/none
    command: ["sh", "-c", "trap '' TERM; while true; do sleep 0.2; done"]
`, node, marker))
	waitPodPhase(t, ns, "trap", "Running", 60*time.Second)
	waitPodPhase(t, ns, "stubborn", "Running", 60*time.Second)

	kubectl(t, "delete", "pod", "-n", ns, "trap", "--wait=true", "--timeout=60s")
	if data, err := os.ReadFile(marker); err != nil || strings.TrimSpace(string(data)) != "term" {
		t.Errorf("the trapping container did not get SIGTERM: %v %q", err, data)
	}

	start := time.Now()
	kubectl(t, "delete", "pod", "-n", ns, "stubborn", "--wait=true", "--timeout=60s")
	// The grace period was given: the pod was not gone before it passed.
	if took := time.Since(start); took < 3*time.Second {
		t.Errorf("a container ignoring SIGTERM was gone after %s, before its 3s grace period", took)
	}
}

// runSurvivor runs the pod "survivor" (sleep 3600) on node and returns a
// function reading its process's PID in the pod's PID namespace (a
// restarted process would get another) and its container's start time.
func runSurvivor(t *testing.T, ns, node string) (pidOf func() string, startedAt string) {
	t.Helper()
	apply(t, ns, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: survivor
spec:
  nodeName: %s
  containers:
  - name: main
    image: nodelet.io/none
    command: ["sleep", "3600"]
`, node))
	waitPodPhase(t, ns, "survivor", "Running", 60*time.Second)
	pidOf = func() string {
		return strings.TrimSpace(kubectl(t, "exec", "-n", ns, "survivor", "--", "sh", "-c",
			`for p in /proc/[0-9]*; do [ "$(head -c 5 $p/cmdline)" = sleep ] && echo ${p#/proc/}; done; true`))
	}
	startedAt = kubectl(t, "get", "pod", "-n", ns, "survivor", "-o", "jsonpath={.status.containerStatuses[0].state.running.startedAt}")
	return pidOf, startedAt
}

func TestProcessAgentRestartKeepsContainers(t *testing.T) {
	t.Parallel()
	node := uniqueName(t)
	a := startProcessNodelet(t, node)
	ns := newNamespace(t)
	t.Cleanup(func() { deletePods(t, ns) })
	pidOf, started := runSurvivor(t, ns, node)
	before := pidOf()

	a.kill()
	a.start()
	waitReady(t, node, 30*time.Second)
	eventually(t, 30*time.Second, "agent reconciled its pods after the restart", func() (bool, string) {
		return strings.Contains(a.logText(), "Start-up reconcile done"), lastLines(a.logText(), 3)
	})
	if after := pidOf(); after != before {
		t.Errorf("container process %s before the agent's kill -9, %s after", before, after)
	}
	out := kubectl(t, "get", "pod", "-n", ns, "survivor", "-o", "jsonpath={.status.phase} {.status.containerStatuses[0].restartCount} {.status.containerStatuses[0].state.running.startedAt}")
	if out != "Running 0 "+started {
		t.Errorf("after the agent restart: %q, want Running, restartCount 0, startedAt %s", out, started)
	}
}

func TestProcessKubeletAPIAuth(t *testing.T) {
	t.Parallel()
	node := uniqueName(t)
	a := startProcessNodelet(t, node)
	ns := newNamespace(t)
	base := fmt.Sprintf("https://127.0.0.1:%d", a.port)
	insecure := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: insecureTLS()}}

	resp, err := insecure.Post(base+"/exec/"+ns+"/x/c?command=true&stdout=1", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("anonymous exec: %d, want 401", resp.StatusCode)
	}

	// A ServiceAccount with no rights on nodes/proxy is authenticated and
	// then forbidden.
	kubectl(t, "create", "serviceaccount", "-n", ns, "nobody")
	token := strings.TrimSpace(kubectl(t, "create", "token", "-n", ns, "nobody"))
	req, _ := http.NewRequest(http.MethodPost, base+"/exec/"+ns+"/x/c?command=true&stdout=1", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err = insecure.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("exec with a token without nodes/proxy: %d %s, want 403", resp.StatusCode, body)
	}
}

// insecureTLS trusts any serving certificate: the kubelet API serves a
// self-signed one.
func insecureTLS() *tls.Config { return &tls.Config{InsecureSkipVerify: true} }

func TestProcessInitContainersAndDeadline(t *testing.T) {
	t.Parallel()
	node := uniqueName(t)
	startProcessNodelet(t, node)
	ns := newNamespace(t)
	t.Cleanup(func() { deletePods(t, ns) })
	// The volume hides, inside the containers, the directory of nodelet's
	// own binaries: the supervisor must still start the containers.
	work := filepath.Join(root, "bin")
	apply(t, ns, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: staged
spec:
  nodeName: %[1]s
  initContainers:
  - name: first
    image: nodelet.io/none
    command: ["sh", "-c", "echo one > %[2]s/log"]
    volumeMounts: [{name: work, mountPath: %[2]s}]
  - name: second
    image: nodelet.io/none
    command: ["sh", "-c", "echo two >> %[2]s/log"]
    volumeMounts: [{name: work, mountPath: %[2]s}]
  containers:
  - name: main
    image: nodelet.io/none
    command: ["sh", "-c", "cat %[2]s/log; sleep 3600"]
    volumeMounts: [{name: work, mountPath: %[2]s}]
  volumes:
  - name: work
    emptyDir: {}
---
apiVersion: v1
kind: Pod
metadata:
  name: bounded
spec:
  nodeName: %[1]s
  activeDeadlineSeconds: 3
  containers:
  - name: main
    image: nodelet.io/none
    command: ["sleep", "3600"]
`, node, work))
	waitPodPhase(t, ns, "staged", "Running", 60*time.Second)
	eventually(t, 30*time.Second, "init containers ran in order before the main one", func() (bool, string) {
		out, err := kubectlErr("logs", "-n", ns, "staged", "-c", "main")
		return err == nil && out == "one\ntwo\n", fmt.Sprint(out, err)
	})
	if out := kubectl(t, "get", "pod", "-n", ns, "staged", "-o", `jsonpath={.status.initContainerStatuses[*].state.terminated.reason} {.status.conditions[?(@.type=="Initialized")].status}`); out != "Completed Completed True" {
		t.Errorf("init container states and Initialized: %q, want both Completed and True", out)
	}
	eventually(t, 60*time.Second, "pod past its active deadline fails", func() (bool, string) {
		out, _ := kubectlErr("get", "pod", "-n", ns, "bounded", "-o", "jsonpath={.status.phase} {.status.reason}")
		return out == "Failed DeadlineExceeded", out
	})
}

// A process node pulls no image, so it refuses a pod with an image volume
// at admission: the pod fails with a reason and a message naming the field.
func TestProcessImageVolumeRefused(t *testing.T) {
	t.Parallel()
	node := uniqueName(t)
	startProcessNodelet(t, node)
	ns := newNamespace(t)
	t.Cleanup(func() { deletePods(t, ns) })
	apply(t, ns, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: tools
spec:
  nodeName: %s
  volumes:
  - name: scratch
    emptyDir: {}
  - name: tools
    image: {reference: busybox:1.37}
  containers:
  - name: c
    image: busybox:1.37
    command: ["sleep", "3600"]
    volumeMounts:
    - {name: tools, mountPath: /vol}
`, node))
	eventually(t, 30*time.Second, "pod Failed with reason ImageVolumeNotSupported", func() (bool, string) {
		out, _ := kubectlErr("get", "pod", "-n", ns, "tools", "-o", "jsonpath={.status.phase} {.status.reason}: {.status.message}")
		return strings.HasPrefix(out, "Failed ImageVolumeNotSupported: ") && strings.Contains(out, "spec.volumes[1].image"), out
	})
}
