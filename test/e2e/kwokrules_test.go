package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodelet/nodelet/test/fault"
)

// kwokCRDs installs kwok's CRDs of the kinds given (by resource) from the
// pinned module sigs.k8s.io/kwok, as kwok's manifests install them, and
// deletes them when the test ends.
func kwokCRDs(t *testing.T, resources ...string) {
	t.Helper()
	out, err := exec.Command("go", "mod", "download", "-json", "sigs.k8s.io/kwok").Output()
	if err != nil {
		t.Fatalf("locate the module sigs.k8s.io/kwok: %v", err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		t.Fatalf("go mod download -json sigs.k8s.io/kwok: %v, %s", err, out)
	}
	var args, names []string
	for _, r := range resources {
		args = append(args, "-f", filepath.Join(mod.Dir, "kustomize", "crd", "bases", "kwok.x-k8s.io_"+r+".yaml"))
		names = append(names, "crd/"+r+".kwok.x-k8s.io")
	}
	t.Cleanup(func() {
		if _, err := kubectlErr(append([]string{"delete", "--ignore-not-found", "--wait=false"}, args...)...); err != nil {
			t.Logf("delete kwok's CRDs: %v", err)
		}
	})
	kubectl(t, append([]string{"apply"}, args...)...)
	kubectl(t, append([]string{"wait", "--for=condition=Established", "--timeout=30s"}, names...)...)
}

// criLines is log lines in the CRI log format, as kwok's logs files are.
func criLines(lines ...string) string {
	var b strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&b, "%s stdout F %s\n", time.Now().UTC().Format(time.RFC3339Nano), l)
	}
	return b.String()
}

// TestKwokRulesFromTheCluster is issue 28's part 3 on the real control
// plane: kwok's CRDs installed, a sim agent with --enable-crds for them,
// and kwok's objects applied with kubectl make kubectl logs (-f,
// --previous), exec, port-forward and top of a simulated pod do what
// they say; a bad object gets an Event; and a Stage from the cluster
// plays the pod.
func TestKwokRulesFromTheCluster(t *testing.T) {
	kwokCRDs(t, "stages", "logs", "clusterlogs", "execs", "clusterexecs", "attaches", "portforwards", "clusterportforwards", "resourceusages", "clusterresourceusages")
	ca := filepath.Join(filepath.Dir(kubeconfig), "pki", "ca.crt")
	if _, err := os.Stat(ca); err != nil {
		t.Skipf("no cluster CA next to the kubeconfig (%v): the API server's kubelet client certificate cannot be verified", err)
	}
	node := uniqueName(t)
	dir := t.TempDir()
	logs, previous := filepath.Join(dir, "web.log"), filepath.Join(dir, "web-previous.log")
	if err := os.WriteFile(logs, []byte(criLines("one", "two")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(previous, []byte(criLines("before the restart")), 0o644); err != nil {
		t.Fatal(err)
	}
	// The target of the port-forward: says hello and echoes a line.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				line, _ := bufio.NewReader(c).ReadString('\n')
				fmt.Fprintf(c, "target got %s", line)
			}()
		}
	}()
	target := l.Addr().(*net.TCPAddr).Port

	a := startNodelet(t, node, "--enable-server", "--port", strconv.Itoa(fault.FreePort(t)), "--client-ca-file", ca, "--address", hostIP(t),
		"--enable-crds", "Stage,Logs,ClusterExec,Attach,PortForward,ResourceUsage", "--v=2")
	ns := newNamespace(t)
	waitReady(t, node, 60*time.Second)

	// A Stage from the cluster plays the pods: Running with an Event, and
	// deleted when they are.
	kubectl(t, "apply", "-f", writeFile(t, "stages.yaml", fmt.Sprintf(`apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: %[1]s-ready}
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - {key: .metadata.deletionTimestamp, operator: DoesNotExist}
    - {key: .status.phase, operator: In, values: [Pending]}
  next:
    event: {type: Normal, reason: E2EStagePlayed, message: played by a Stage of the cluster}
    statusTemplate: |
      phase: Running
      containerStatuses:
      {{ range .spec.containers }}
      - name: {{ .name | Quote }}
        image: {{ .image | Quote }}
        ready: true
        restartCount: 1
        state: {running: {startedAt: {{ Now | Quote }}}}
      {{ end }}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: %[1]s-delete}
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - {key: .metadata.deletionTimestamp, operator: Exists}
  next: {delete: true}
`, node)))
	t.Cleanup(func() { _, _ = kubectlErr("delete", "stage", node+"-ready", node+"-delete", "--ignore-not-found") })
	eventually(t, 30*time.Second, "the agent plays the cluster's two Stages", func() (bool, string) {
		return regexp.MustCompile(`"Stages in force".* cluster=2`).MatchString(a.logText()), "not yet logged"
	})

	kubectl(t, "apply", "-n", ns, "-f", writeFile(t, "kwok.yaml", fmt.Sprintf(`apiVersion: kwok.x-k8s.io/v1alpha1
kind: Logs
metadata: {name: web}
spec:
  logs:
  - containers: [app]
    logsFile: %[1]s
    previousLogsFile: %[2]s
    follow: true
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterExec
metadata: {name: %[3]s}
spec:
  selector: {matchNamespaces: [%[4]s]}
  execs:
  - local:
      workDir: %[5]s
      envs: [{name: GREETING, value: hello}]
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Attach
metadata: {name: web}
spec:
  attaches:
  - containers: [app]
    logsFile: %[1]s
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: PortForward
metadata: {name: web}
spec:
  forwards:
  - ports: [80]
    target: {address: 127.0.0.1, port: %[6]d}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ResourceUsage
metadata: {name: web}
spec:
  usages:
  - usage: # kwok's usage-from-annotation
      cpu:
        expression: |
          "kwok.x-k8s.io/usage-cpu" in pod.metadata.annotations
          ? Quantity(pod.metadata.annotations["kwok.x-k8s.io/usage-cpu"])
          : Quantity("1m")
      memory:
        expression: |
          "kwok.x-k8s.io/usage-memory" in pod.metadata.annotations
          ? Quantity(pod.metadata.annotations["kwok.x-k8s.io/usage-memory"])
          : Quantity("1Mi")
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ResourceUsage
metadata: {name: syntax-error}
spec:
  usages:
  - usage:
      cpu: {expression: 'pod.spec.containers.size() *'}
`, logs, previous, node, ns, dir, target)))
	t.Cleanup(func() { _, _ = kubectlErr("delete", "clusterexec", node, "--ignore-not-found") })
	apply(t, ns, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: web
  annotations: {kwok.x-k8s.io/usage-cpu: 1500m}
spec:
  nodeName: %s
  containers:
  - name: app
    image: nodelet.io/sample:1
`, node))
	eventually(t, 30*time.Second, "the pod Running, played by the cluster's Stage", func() (bool, string) {
		phase, _ := kubectlErr("get", "pod", "-n", ns, "web", "-o", "jsonpath={.status.phase} {.status.containerStatuses[0].restartCount}")
		events, _ := kubectlErr("get", "events", "-n", ns, "--field-selector", "reason=E2EStagePlayed", "-o", "name")
		return phase == "Running 1" && events != "", fmt.Sprintf("phase and restarts %q, events %q", phase, events)
	})

	// kubectl logs: the Logs' file, its previous file.
	eventually(t, 30*time.Second, "kubectl logs shows the Logs' file", func() (bool, string) {
		out, err := kubectlErr("logs", "-n", ns, "web")
		return err == nil && out == "one\ntwo\n", fmt.Sprint(out, err)
	})
	if out := kubectl(t, "logs", "--previous", "-n", ns, "web"); out != "before the restart\n" {
		t.Errorf("kubectl logs --previous = %q, want the previous file", out)
	}

	// kubectl logs -f: a line appended comes through.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	follow := exec.CommandContext(ctx, filepath.Join(root, "bin/controlplane"), "kubectl", "--kubeconfig", kubeconfig, "logs", "-f", "--tail=1", "-n", ns, "web")
	stdout, err := follow.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewReader(stdout)
	if line, err := lines.ReadString('\n'); line != "two\n" {
		t.Fatalf("kubectl logs -f --tail=1 began with %q, %v; want two", line, err)
	}
	f, err := os.OpenFile(logs, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(criLines("three")); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if line, err := lines.ReadString('\n'); line != "three\n" {
		t.Errorf("kubectl logs -f then printed %q, %v; want the line appended", line, err)
	}
	cancel()
	_ = follow.Wait()

	// kubectl attach: the Attach's file from its end, as it grows.
	ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	attach := exec.CommandContext(ctx, filepath.Join(root, "bin/controlplane"), "kubectl", "--kubeconfig", kubeconfig, "attach", "-n", ns, "web", "-c", "app")
	attached, err := attach.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := attach.Start(); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 100)
	go func() {
		r := bufio.NewReader(attached)
		for {
			l, err := r.ReadString('\n')
			if err != nil {
				close(got)
				return
			}
			got <- l
		}
	}()
	// The attach follows once the agent has it: append until a line comes.
	var attachedFirst string
	for attachedFirst == "" && ctx.Err() == nil {
		f, err := os.OpenFile(logs, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, err = f.WriteString(criLines("attached"))
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		select {
		case attachedFirst = <-got:
		case <-time.After(200 * time.Millisecond):
		}
	}
	if attachedFirst != "attached\n" {
		t.Errorf("kubectl attach printed %q first, want a line appended after it attached (not the file's earlier lines)", attachedFirst)
	}
	cancel()
	_ = attach.Wait()

	// kubectl exec: the command runs on the agent's host as the
	// ClusterExec says.
	if out := kubectl(t, "exec", "-n", ns, "web", "--", "sh", "-c", `echo "$GREETING from $(pwd)"`); out != "hello from "+dir+"\n" {
		t.Errorf("kubectl exec = %q, want the ClusterExec's environment and directory", out)
	}
	if _, err := kubectlErr("exec", "-n", ns, "web", "--", "sh", "-c", "exit 3"); err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("kubectl exec of exit 3: %v, want exit status 3", err)
	}

	// kubectl port-forward: to the PortForward's target.
	pf := exec.Command(filepath.Join(root, "bin/controlplane"), "kubectl", "--kubeconfig", kubeconfig, "port-forward", "-n", ns, "pod/web", ":80")
	pf.SysProcAttr = stopWithParent()
	pfOut, err := pf.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := pf.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pf.Process.Kill(); _ = pf.Wait() })
	first, err := bufio.NewReader(pfOut).ReadString('\n')
	m := regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) -> 80`).FindStringSubmatch(first)
	if m == nil {
		t.Fatalf("kubectl port-forward printed %q, %v", first, err)
	}
	conn, err := net.DialTimeout("tcp", "127.0.0.1:"+m[1], 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprint(conn, "ping\n")
	if got, err := bufio.NewReader(conn).ReadString('\n'); got != "target got ping\n" {
		t.Errorf("through kubectl port-forward: %q, %v; want the target's answer", got, err)
	}
	conn.Close()

	// The ResourceUsage's expressions' figures, at /stats/summary and in
	// kubectl top: the annotation's cpu, kwok's default memory.
	s, err := summaryOf(t, node)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range s.Pods {
		if p.PodRef.Name == "web" && p.PodRef.Namespace == ns {
			found = true
			if p.CPU == nil || *p.CPU.UsageNanoCores != 15e8 || p.Memory == nil || *p.Memory.WorkingSetBytes != 1<<20 {
				t.Errorf("summary of the pod: cpu %+v memory %+v; want the annotation's 1500m and the default 1Mi", p.CPU, p.Memory)
			}
		}
	}
	if !found {
		t.Errorf("the pod not in the summary: %+v", s.Pods)
	}
	eventually(t, 40*time.Second, "kubectl top pod shows the expressions' figures", func() (bool, string) {
		cpu, mem, err := topQuantities("pod", "-n", ns, "web")
		return err == nil && cpu == 1500 && mem == 1<<20, fmt.Sprintf("cpu %dm memory %d: %v", cpu, mem, err)
	})

	// The ResourceUsage whose expression does not compile: left out,
	// with an Event naming the field.
	eventually(t, 30*time.Second, "a Warning Event on the bad ResourceUsage", func() (bool, string) {
		out, _ := kubectlErr("get", "events", "-n", ns, "--field-selector", "reason=InvalidResourceUsage,involvedObject.name=syntax-error", "-o", "jsonpath={.items[*].message}")
		return strings.Contains(out, "spec.usages[0].usage[cpu].expression") && strings.Contains(out, "Syntax error"), out
	})

	// The Stage deletes the pod once it is deleted.
	kubectl(t, "delete", "pod", "-n", ns, "web", "--timeout=30s")
}
