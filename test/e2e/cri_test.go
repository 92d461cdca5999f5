package e2e

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodelet/nodelet/test/crienv"
	"github.com/nodelet/nodelet/test/fault"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Images the tests run, as any cluster names them; the test registry
// mirrors registry.k8s.io and docker.io.
const (
	busyboxImage = "busybox:1.37"
	agnhostImage = "registry.k8s.io/e2e-test-images/agnhost:2.63.0"
)

// getPod reads a pod from the API.
func getPod(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	pod, err := client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get pod %s/%s: %v", ns, name, err)
	}
	return pod
}

// waitContainerWaiting waits until a container of the pod waits with reason.
func waitContainerWaiting(t *testing.T, ns, pod, reason string, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, "pod "+pod+" waiting "+reason, func() (bool, string) {
		out, err := kubectlErr("get", "pod", "-n", ns, pod, "-o", "jsonpath={.status.containerStatuses[*].state.waiting.reason}")
		if err != nil {
			return false, err.Error()
		}
		if strings.Contains(out, reason) {
			return true, out
		}
		status, _ := kubectlErr("get", "pod", "-n", ns, pod, "-o", "jsonpath={.status}")
		return false, status
	})
}

// criNamespace is the test's namespace; its pods are deleted (and, if the
// test failed, shown with their Events first) before the agent stops.
func criNamespace(t *testing.T) string {
	t.Helper()
	ns := newNamespace(t)
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := kubectlErr("get", "pods", "-n", ns, "-o", "yaml")
			t.Logf("pods of %s:\n%s", ns, lastLines(out, 150))
			events, _ := kubectlErr("get", "events", "-n", ns, "-o", "jsonpath={range .items[*]}{.involvedObject.name} {.reason}: {.message}{\"\\n\"}{end}")
			t.Logf("events of %s:\n%s", ns, events)
		}
		deletePods(t, ns)
	})
	return ns
}

// podEvents are the reasons and messages of a pod's Events.
func podEvents(t *testing.T, ns, pod string) string {
	t.Helper()
	out, _ := kubectlErr("get", "events", "-n", ns, "--field-selector", "involvedObject.name="+pod,
		"-o", "jsonpath={range .items[*]}{.reason}: {.message}{\"\\n\"}{end}")
	return out
}

func TestCRIDeploymentPodNetwork(t *testing.T) {
	node := uniqueName(t)
	c := startCRINodelet(t, node)
	ns := criNamespace(t)
	apply(t, ns, fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 3
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      nodeName: %s
      terminationGracePeriodSeconds: 2
      containers:
      - name: netexec
        image: %s
        args: ["netexec", "--http-port=8080"]
        ports:
        - containerPort: 8080
        readinessProbe:
          httpGet: {path: /healthz, port: 8080}
          periodSeconds: 1
`, node, agnhostImage))
	kubectl(t, "rollout", "status", "-n", ns, "deployment/web", "--timeout=180s")
	_, subnet, err := net.ParseCIDR(c.env.Subnet())
	if err != nil {
		t.Fatal(err)
	}
	pods := podList(t, ns)
	ips := map[string]bool{}
	for _, p := range pods.Items {
		ip := net.ParseIP(p.Status.PodIP)
		if ip == nil || !subnet.Contains(ip) {
			t.Errorf("pod %s has IP %q, want one in the CNI range %s", p.Name, p.Status.PodIP, subnet)
		}
		if ips[p.Status.PodIP] {
			t.Errorf("pod IP %s given twice", p.Status.PodIP)
		}
		ips[p.Status.PodIP] = true
		if p.Status.HostIP != hostIP(t) {
			t.Errorf("pod %s hostIP %s, want the node's %s", p.Name, p.Status.HostIP, hostIP(t))
		}
	}
	// The node reports the runtime and the images it has.
	eventually(t, time.Minute, "runtime version and images in node status", func() (bool, string) {
		out, _ := kubectlErr("get", "node", node, "-o", "jsonpath={.status.nodeInfo.containerRuntimeVersion} {.status.images[*].names}")
		return strings.HasPrefix(out, "containerd://") && strings.Contains(out, "agnhost"), out
	})
	// One pod reaches another's HTTP port by its pod IP.
	from, to := pods.Items[0], pods.Items[1]
	out := kubectl(t, "exec", "-n", ns, from.Name, "--", "/agnhost", "connect", net.JoinHostPort(to.Status.PodIP, "8080"), "--timeout=5s")
	t.Logf("connect from %s to %s: %q", from.Name, to.Status.PodIP, out)
	out = kubectl(t, "exec", "-n", ns, from.Name, "--", "wget", "-qO-", "http://"+net.JoinHostPort(to.Status.PodIP, "8080")+"/hostname")
	if strings.TrimSpace(out) != to.Name {
		t.Errorf("GET /hostname of %s from %s = %q, want %q", to.Status.PodIP, from.Name, out, to.Name)
	}

	// A pod that ended has its sandbox stopped, as the kubelet's (its
	// network and IP given back), and keeps its IP in its status and its
	// logs.
	apply(t, ns, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: done}
spec:
  nodeName: %s
  restartPolicy: Never
  containers: [{name: c, image: %s, command: [sh, -c, "echo done"]}]
`, node, busyboxImage))
	eventually(t, time.Minute, "the pod that ended: Succeeded, its IP kept, its sandbox stopped", func() (bool, string) {
		p := getPod(t, ns, "done")
		var states []string
		sbs, _ := c.runtimePods(t)
		for _, sb := range sbs {
			if sb.GetMetadata().GetName() == "done" {
				states = append(states, sb.State.String())
			}
		}
		ok := p.Status.Phase == corev1.PodSucceeded && subnet.Contains(net.ParseIP(p.Status.PodIP)) &&
			slices.Equal(states, []string{runtimeapi.PodSandboxState_SANDBOX_NOTREADY.String()})
		return ok, fmt.Sprintf("%s, IP %q, sandboxes %v", p.Status.Phase, p.Status.PodIP, states)
	})
	if out := kubectl(t, "logs", "-n", ns, "done"); strings.TrimSpace(out) != "done" {
		t.Errorf("kubectl logs of the pod that ended = %q, want done", out)
	}
}

func TestCRILogsExecPortForward(t *testing.T) {
	node := uniqueName(t)
	c := startCRINodelet(t, node)
	ns := criNamespace(t)
	apply(t, ns, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: app
spec:
  nodeName: %s
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: %s
    command: ["sh", "-c", "echo hello from $(POD_NAME); i=0; while true; do i=$((i+1)); echo tick $i; sleep 1; done"]
    env:
    - name: POD_NAME
      valueFrom: {fieldRef: {fieldPath: metadata.name}}
  - name: web
    image: %s
    args: ["netexec", "--http-port=8080"]
  - name: crash
    image: %s
    command: ["sh", "-c", "echo run; sleep 1; exit 3"]
`, node, busyboxImage, agnhostImage, busyboxImage))
	waitPodPhase(t, ns, "app", "Running", 3*time.Minute)
	eventually(t, time.Minute, "logs of main", func() (bool, string) {
		out, _ := kubectlErr("logs", "-n", ns, "app", "-c", "main")
		return strings.Contains(out, "hello from app") && strings.Contains(out, "tick 2"), out
	})
	if out := kubectl(t, "logs", "-n", ns, "app", "-c", "main", "--tail=1"); strings.Count(out, "\n") != 1 || !strings.Contains(out, "tick") {
		t.Errorf("logs --tail=1 = %q", out)
	}
	// The log is linked where log shippers look, as the kubelet's
	// /var/log/containers: <pod>_<namespace>_<container>-<id>.log.
	var id string
	for _, cs := range getPod(t, ns, "app").Status.ContainerStatuses {
		if cs.Name == "main" {
			_, id, _ = strings.Cut(cs.ContainerID, "://")
		}
	}
	link := filepath.Join(filepath.Dir(c.logsDir), "containers", fmt.Sprintf("app_%s_main-%s.log", ns, id))
	if data, err := os.ReadFile(link); err != nil || !strings.Contains(string(data), "hello from app") {
		t.Errorf("the log through its link %s: %q, %v", link, data, err)
	}
	// logs -f follows new lines.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	follow := kubectlCmd(ctx, "logs", "-f", "-n", ns, "app", "-c", "main", "--tail=1")
	var followed syncBuffer
	follow.Stdout = &followed
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "logs -f shows new lines", func() (bool, string) {
		return strings.Count(followed.String(), "tick") >= 3, followed.String()
	})
	cancel()
	_ = follow.Wait()

	// The crash-looping container: restarted, and its previous run's log.
	eventually(t, 2*time.Minute, "crash restarted", func() (bool, string) {
		pod := getPod(t, ns, "app")
		for _, cs := range pod.Status.ContainerStatuses {
			if cs.Name == "crash" {
				return cs.RestartCount >= 1 && cs.LastTerminationState.Terminated != nil &&
					cs.LastTerminationState.Terminated.ExitCode == 3, fmt.Sprintf("%+v", cs)
			}
		}
		return false, "no status"
	})
	if out := kubectl(t, "logs", "-n", ns, "app", "-c", "crash", "--previous"); !strings.Contains(out, "run") {
		t.Errorf("logs --previous = %q", out)
	}

	// exec, with the exit code.
	if out := kubectl(t, "exec", "-n", ns, "app", "-c", "main", "--", "sh", "-c", "echo $((6*7))"); strings.TrimSpace(out) != "42" {
		t.Errorf("exec = %q, want 42", out)
	}
	if _, err := kubectlErr("exec", "-n", ns, "app", "-c", "main", "--", "sh", "-c", "exit 7"); err == nil || !strings.Contains(err.Error(), "exit status 7") {
		t.Errorf("exec exit 7: %v, want exit status 7", err)
	}
	// exec -i with stdin.
	in := kubectlCmd(context.Background(), "exec", "-i", "-n", ns, "app", "-c", "main", "--", "cat")
	in.Stdin = strings.NewReader("through stdin\n")
	if out, err := in.Output(); err != nil || string(out) != "through stdin\n" {
		t.Errorf("exec -i cat = %q, %v", out, err)
	}

	// port-forward to the web container.
	local := fault.FreePort(t)
	pf := kubectlCmd(context.Background(), "port-forward", "-n", ns, "pod/app", fmt.Sprintf("%d:8080", local))
	var pfOut syncBuffer
	pf.Stdout, pf.Stderr = &pfOut, &pfOut
	if err := pf.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pf.Process.Kill(); _ = pf.Wait() })
	eventually(t, 30*time.Second, "port-forward answers", func() (bool, string) {
		body, err := httpGet(fmt.Sprintf("http://127.0.0.1:%d/hostname", local))
		if err != nil {
			return false, err.Error() + " " + pfOut.String()
		}
		return strings.TrimSpace(body) == "app", body
	})
}

func TestCRIImagePullErrorsAndSecrets(t *testing.T) {
	node := uniqueName(t)
	startCRINodelet(t, node)
	ns := criNamespace(t)
	pod := func(name, image, secret string) string {
		// Always: the image another pod pulled with its secret must not
		// serve a pod without one.
		pullSecrets := ""
		if secret != "" {
			pullSecrets = "  imagePullSecrets: [{name: " + secret + "}]\n"
		}
		return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  nodeName: %s
  terminationGracePeriodSeconds: 1
%s  containers:
  - name: c
    image: %s
    imagePullPolicy: Always
    command: ["sleep", "3600"]
`, name, node, pullSecrets, image)
	}
	apply(t, ns, pod("missing", "busybox:no-such-tag", ""))
	apply(t, ns, pod("invalid", "Not A Valid/Image::x", ""))
	apply(t, ns, pod("private-denied", "private/busybox:1.37", ""))
	auth := base64.StdEncoding.EncodeToString([]byte(crienv.RegistryUser + ":" + crienv.RegistryPassword))
	kubectl(t, "create", "secret", "generic", "-n", ns, "regcred", "--type=kubernetes.io/dockerconfigjson",
		"--from-literal=.dockerconfigjson="+fmt.Sprintf(`{"auths":{"docker.io":{"auth":%q}}}`, auth))
	apply(t, ns, pod("private-allowed", "private/busybox:1.37", "regcred"))

	waitContainerWaiting(t, ns, "missing", "ErrImagePull", 2*time.Minute)
	waitContainerWaiting(t, ns, "missing", "ImagePullBackOff", time.Minute)
	events := podEvents(t, ns, "missing")
	for _, want := range []string{"Pulling", "Failed", "BackOff"} {
		if !strings.Contains(events, want+":") {
			t.Errorf("pod missing: no %s Event in:\n%s", want, events)
		}
	}
	waitContainerWaiting(t, ns, "invalid", "InvalidImageName", time.Minute)
	waitContainerWaiting(t, ns, "private-denied", "ImagePull", 2*time.Minute) // ErrImagePull or ImagePullBackOff
	if events := podEvents(t, ns, "private-denied"); !strings.Contains(events, "authorization failed") {
		t.Errorf("pod private-denied: no Event says the registry refused it:\n%s", events)
	}
	waitPodPhase(t, ns, "private-allowed", "Running", 2*time.Minute)
	if events := podEvents(t, ns, "private-allowed"); !strings.Contains(events, "Pulled:") {
		t.Errorf("pod private-allowed: no Pulled Event in:\n%s", events)
	}
}

// A pod's RuntimeClass names the runtime handler its sandbox runs with:
// containerd's runc through a class whose handler is "runc", and a handler
// the runtime does not have fails the sandbox with an Event naming it.
func TestCRIRuntimeClass(t *testing.T) {
	node := uniqueName(t)
	startCRINodelet(t, node)
	ns := criNamespace(t)
	runc, missing := uniqueName(t)+"-runc", uniqueName(t)+"-missing"
	for name, handler := range map[string]string{runc: "runc", missing: "no-such-handler"} {
		kubectl(t, "apply", "-f", writeFile(t, name+".yaml", fmt.Sprintf("apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: %s}\nhandler: %s\n", name, handler)))
		t.Cleanup(func() {
			if out, err := kubectlErr("delete", "runtimeclass", name, "--ignore-not-found"); err != nil {
				t.Errorf("delete runtimeclass %s: %v %s", name, err, out)
			}
		})
	}
	pod := func(name, class string) string {
		return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  nodeName: %s
  runtimeClassName: %s
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: %s
    command: ["sleep", "3600"]
`, name, node, class, busyboxImage)
	}
	apply(t, ns, pod("runc", runc))
	apply(t, ns, pod("missing", missing))
	waitPodPhase(t, ns, "runc", "Running", 2*time.Minute)
	eventually(t, time.Minute, "a FailedCreatePodSandBox Event naming the handler", func() (bool, string) {
		events := podEvents(t, ns, "missing")
		return strings.Contains(events, "FailedCreatePodSandBox:") && strings.Contains(events, "no-such-handler"), events
	})
	if phase := getPod(t, ns, "missing").Status.Phase; phase != corev1.PodPending {
		t.Errorf("pod missing: phase %s, want Pending", phase)
	}
}

func TestCRISecurityContext(t *testing.T) {
	node := uniqueName(t)
	startCRINodelet(t, node)
	ns := criNamespace(t)
	apply(t, ns, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: secure
spec:
  nodeName: %[1]s
  terminationGracePeriodSeconds: 1
  containers:
  - name: user
    image: %[2]s
    command: ["sleep", "3600"]
    securityContext:
      runAsUser: 1000
      runAsGroup: 3000
  - name: readonly
    image: %[2]s
    command: ["sleep", "3600"]
    securityContext:
      readOnlyRootFilesystem: true
  - name: nocaps
    image: %[2]s
    command: ["sleep", "3600"]
    securityContext:
      capabilities: {drop: ["ALL"]}
---
apiVersion: v1
kind: Pod
metadata:
  name: nonroot
spec:
  nodeName: %[1]s
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: %[2]s
    command: ["sleep", "3600"]
    securityContext:
      runAsNonRoot: true
`, node, busyboxImage))
	waitPodPhase(t, ns, "secure", "Running", 3*time.Minute)
	if out := kubectl(t, "exec", "-n", ns, "secure", "-c", "user", "--", "id", "-u"); strings.TrimSpace(out) != "1000" {
		t.Errorf("id -u = %q, want 1000", out)
	}
	if out := kubectl(t, "exec", "-n", ns, "secure", "-c", "user", "--", "id", "-g"); strings.TrimSpace(out) != "3000" {
		t.Errorf("id -g = %q, want 3000", out)
	}
	if _, err := kubectlErr("exec", "-n", ns, "secure", "-c", "readonly", "--", "touch", "/written"); err == nil {
		t.Error("a write to a read-only root filesystem succeeded")
	}
	out := kubectl(t, "exec", "-n", ns, "secure", "-c", "nocaps", "--", "grep", "CapEff", "/proc/self/status")
	if !strings.Contains(out, "0000000000000000") {
		t.Errorf("CapEff with capabilities dropped: %q, want none", out)
	}
	out = kubectl(t, "exec", "-n", ns, "secure", "-c", "readonly", "--", "grep", "CapEff", "/proc/self/status")
	if strings.Contains(out, "0000000000000000") {
		t.Errorf("CapEff with default capabilities: %q, want some", out)
	}
	waitContainerWaiting(t, ns, "nonroot", "CreateContainerConfigError", 2*time.Minute)
	msg := kubectl(t, "get", "pod", "-n", ns, "nonroot", "-o", "jsonpath={.status.containerStatuses[0].state.waiting.message}")
	if !strings.Contains(msg, "runAsNonRoot") {
		t.Errorf("waiting message %q does not say why", msg)
	}
}

func TestCRIDNSAndHostAliases(t *testing.T) {
	node := uniqueName(t)
	startCRINodelet(t, node, "--cluster-dns", "10.96.0.10", "--cluster-domain", "cluster.local")
	ns := criNamespace(t)
	apply(t, ns, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: dns
spec:
  nodeName: %s
  terminationGracePeriodSeconds: 1
  hostAliases:
  - ip: "10.1.2.3"
    hostnames: ["foo.remote", "bar.remote"]
  containers:
  - name: c
    image: %s
    command: ["sleep", "3600"]
`, node, busyboxImage))
	waitPodPhase(t, ns, "dns", "Running", 3*time.Minute)
	resolv := kubectl(t, "exec", "-n", ns, "dns", "--", "cat", "/etc/resolv.conf")
	for _, want := range []string{"nameserver 10.96.0.10", "search " + ns + ".svc.cluster.local svc.cluster.local cluster.local", "ndots:5"} {
		if !strings.Contains(resolv, want) {
			t.Errorf("/etc/resolv.conf lacks %q:\n%s", want, resolv)
		}
	}
	hosts := kubectl(t, "exec", "-n", ns, "dns", "--", "cat", "/etc/hosts")
	pod := getPod(t, ns, "dns")
	for _, want := range []string{"10.1.2.3\tfoo.remote\tbar.remote", pod.Status.PodIP + "\tdns", "# Kubernetes-managed hosts file"} {
		if !strings.Contains(hosts, want) {
			t.Errorf("/etc/hosts lacks %q:\n%s", want, hosts)
		}
	}
}

// kubectlCmd is a kubectl command of the control plane's, not started.
func kubectlCmd(ctx context.Context, args ...string) *exec.Cmd {
	argv := kubectlArgv(args...)
	return exec.CommandContext(ctx, argv[0], argv[1:]...)
}

// httpGet returns the body of a GET.
func httpGet(url string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", resp.Status, body)
	}
	return string(body), nil
}

func TestCRIHostNetworkSysctlsSeccomp(t *testing.T) {
	node := uniqueName(t)
	startCRINodelet(t, node)
	ns := criNamespace(t)
	apply(t, ns, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: hostnet
spec:
  nodeName: %[1]s
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: %[2]s
    command: ["sleep", "3600"]
---
apiVersion: v1
kind: Pod
metadata:
  name: tuned
spec:
  nodeName: %[1]s
  terminationGracePeriodSeconds: 1
  securityContext:
    sysctls:
    - name: net.ipv4.ip_unprivileged_port_start
      value: "1000"
    seccompProfile: {type: RuntimeDefault}
  containers:
  - name: c
    image: %[2]s
    command: ["sleep", "3600"]
`, node, busyboxImage))
	waitPodPhase(t, ns, "hostnet", "Running", 3*time.Minute)
	waitPodPhase(t, ns, "tuned", "Running", 3*time.Minute)
	if ip := getPod(t, ns, "hostnet").Status.PodIP; ip != hostIP(t) {
		t.Errorf("hostNetwork pod IP %s, want the node's %s", ip, hostIP(t))
	}
	if out := kubectl(t, "exec", "-n", ns, "tuned", "--", "cat", "/proc/sys/net/ipv4/ip_unprivileged_port_start"); strings.TrimSpace(out) != "1000" {
		t.Errorf("sysctl in the pod = %q, want 1000", out)
	}
	if out := kubectl(t, "exec", "-n", ns, "tuned", "--", "grep", "^Seccomp:", "/proc/self/status"); !strings.Contains(out, "2") {
		t.Errorf("seccomp RuntimeDefault: %q, want filter mode 2", out)
	}
	if out := kubectl(t, "exec", "-n", ns, "hostnet", "--", "grep", "^Seccomp:", "/proc/self/status"); strings.Contains(out, "2") {
		t.Errorf("seccomp without a profile: %q, want none (Unconfined is the default)", out)
	}
}
