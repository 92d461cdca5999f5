package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
)

// Static pods on a process node: manifests in a directory run as pods of
// the node, each with a mirror pod in the API.

// apiProxy is a TCP proxy to the API server that a test can stop and
// start again: to the agent behind it, the API server goes away and comes
// back while the control plane the other tests share keeps running.
type apiProxy struct {
	t          *testing.T
	addr       string // where it listens
	upstream   string
	kubeconfig string // the kubeconfig it was made from, through the proxy

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]bool
}

func startAPIProxy(t *testing.T, from string) *apiProxy {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(from)
	if err != nil {
		t.Fatal(err)
	}
	p := &apiProxy{t: t, conns: map[net.Conn]bool{}}
	for _, c := range cfg.Clusters {
		u, err := url.Parse(c.Server)
		if err != nil {
			t.Fatal(err)
		}
		p.upstream = u.Host
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	for _, c := range cfg.Clusters {
		c.Server = "https://" + p.addr // the serving certificate names 127.0.0.1
	}
	p.kubeconfig = filepath.Join(t.TempDir(), "proxied.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, p.kubeconfig); err != nil {
		t.Fatal(err)
	}
	p.serve(ln)
	t.Cleanup(p.stop)
	return p
}

func (p *apiProxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", p.upstream)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			p.conns[in], p.conns[out] = true, true
			p.mu.Unlock()
			go func() { _, _ = io.Copy(out, in); out.Close() }()
			go func() { _, _ = io.Copy(in, out); in.Close() }()
		}
	}()
}

// stop closes the listener and every connection through it.
func (p *apiProxy) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	p.conns = map[net.Conn]bool{}
}

// start listens again on the same address.
func (p *apiProxy) start() {
	p.t.Helper()
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		p.t.Fatalf("API proxy: listen again on %s: %v", p.addr, err)
	}
	p.serve(ln)
}

// staticManifest is a pod whose container records each start in
// out/starts and runs until stopped; token tells its process apart.
func staticManifest(name, ns, out, token string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: %s
  labels: {app: static}
spec:
  containers:
  - name: main
    image: nodelet.io/none
    command: ["sh", "-c", "echo $0 >> /out/starts; while true; do sleep 1; done", "%s"]
    volumeMounts:
    - {name: out, mountPath: /out}
  volumes:
  - name: out
    hostPath: {path: %s}
`, name, ns, token, out)
}

// pids are the host PIDs of the processes whose command line has token.
func pids(token string) []string {
	out, _ := exec.Command("pgrep", "-f", token).Output()
	return strings.Fields(string(out))
}

// starts are the lines the static pods wrote to out/starts.
func starts(t *testing.T, out string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(out, "starts"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.Fields(string(data))
}

// waitMirror waits for the mirror pod ns/name of node to be Running with
// the annotations and owner of a mirror pod and its static pod's status,
// and returns it. notUID, when set, is a mirror pod it must replace.
func waitMirror(t *testing.T, ns, name, node, notUID string, timeout time.Duration) *corev1.Pod {
	t.Helper()
	n, err := client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var mirror *corev1.Pod
	eventually(t, timeout, "mirror pod "+ns+"/"+name+" Running", func() (bool, string) {
		p, err := client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		a := p.Annotations
		switch {
		case string(p.UID) == notUID:
			return false, "the old mirror pod " + notUID
		case a["kubernetes.io/config.mirror"] == "" || a["kubernetes.io/config.mirror"] != a["kubernetes.io/config.hash"]:
			return false, fmt.Sprintf("annotations %v", a)
		case a["kubernetes.io/config.source"] != "file" || a["kubernetes.io/config.seen"] == "":
			return false, fmt.Sprintf("annotations %v", a)
		case !metav1.IsControlledBy(p, n) || p.OwnerReferences[0].Kind != "Node":
			return false, fmt.Sprintf("owners %v, want Node %s (%s)", p.OwnerReferences, node, n.UID)
		case p.Spec.NodeName != node:
			return false, "on node " + p.Spec.NodeName
		case p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) != 1 || !p.Status.ContainerStatuses[0].Ready:
			return false, fmt.Sprintf("phase %s, containers %v", p.Status.Phase, p.Status.ContainerStatuses)
		}
		mirror = p
		return true, ""
	})
	return mirror
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func restartCount(p *corev1.Pod) int32 { return p.Status.ContainerStatuses[0].RestartCount }

func TestStaticPodProcess(t *testing.T) {
	t.Parallel()
	node := uniqueName(t)
	manifests, out := t.TempDir(), t.TempDir()
	if err := os.Chmod(out, 0o777); err != nil {
		t.Fatal(err)
	}
	// The agent joins as the node (the bootstrap kubeconfig, when the
	// control plane has one, as startProcessNodelet does) through the proxy.
	rootDirArgs := []string{}
	from := kubeconfig
	if bootstrap := filepath.Join(filepath.Dir(kubeconfig), "bootstrap.kubeconfig"); fileExists(bootstrap) {
		from = bootstrap
	}
	proxy := startAPIProxy(t, from)
	if from == kubeconfig {
		rootDirArgs = append(rootDirArgs, "--kubeconfig", proxy.kubeconfig)
	} else {
		rootDirArgs = append(rootDirArgs, "--bootstrap-kubeconfig", proxy.kubeconfig)
	}
	cfgFile := filepath.Join(t.TempDir(), "nodelet.yaml")
	if err := os.WriteFile(cfgFile, []byte(fmt.Sprintf(
		"apiVersion: nodelet.io/v1alpha1\nkind: NodeletConfiguration\nstaticPodPath: %s\nfileCheckFrequency: 1s\n", manifests)), 0o644); err != nil {
		t.Fatal(err)
	}
	a := startProcessNodelet(t, node, append([]string{"--config", cfgFile}, rootDirArgs...)...)
	ns := newNamespace(t)
	suffix := randSuffix()
	token := func(v string) string { return "static-" + suffix + "-" + v }
	// Before the namespace goes and the agent stops: the static pods go
	// with their manifests, so that nothing of them is left running.
	t.Cleanup(func() {
		entries, _ := os.ReadDir(manifests)
		for _, e := range entries {
			_ = os.Remove(filepath.Join(manifests, e.Name()))
		}
		eventually(t, 60*time.Second, "static pods stopped", func() (bool, string) {
			left := pids("static-" + suffix)
			return len(left) == 0, fmt.Sprint(left)
		})
	})
	write := func(file, data string) {
		t.Helper()
		tmp := filepath.Join(manifests, "."+file+".tmp") // skipped: names beginning with a dot
		if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(manifests, file)); err != nil {
			t.Fatal(err)
		}
	}
	web := "web-" + node

	// A manifest dropped in runs, and its mirror pod appears.
	write("web.yaml", staticManifest("web", ns, out, token("v1")))
	mirror := waitMirror(t, ns, web, node, "", 60*time.Second)
	eventually(t, 10*time.Second, "one process", func() (bool, string) {
		return len(pids(token("v1"))) == 1, fmt.Sprint(pids(token("v1")))
	})
	pid := pids(token("v1"))[0]
	if got := starts(t, out); len(got) != 1 {
		t.Fatalf("starts %v, want one", got)
	}

	// Deleting the mirror pod brings it back; the process runs on.
	kubectl(t, "delete", "pod", "-n", ns, web, "--wait=false")
	mirror = waitMirror(t, ns, web, node, string(mirror.UID), 30*time.Second)
	if got := pids(token("v1")); len(got) != 1 || got[0] != pid || restartCount(mirror) != 0 || len(starts(t, out)) != 1 {
		t.Fatalf("after the mirror pod's deletion: processes %v (was %s), restarts %d, starts %v: want the same process", got, pid, restartCount(mirror), starts(t, out))
	}

	// An agent restart leaves the static pod and its mirror pod alone. A
	// second manifest added meanwhile shows when the new agent has looked.
	a.stop()
	write("other.yaml", staticManifest("other", ns, out, token("other")))
	a.start()
	waitMirror(t, ns, "other-"+node, node, "", 60*time.Second)
	again := waitMirror(t, ns, web, node, "", 10*time.Second)
	if got := pids(token("v1")); len(got) != 1 || got[0] != pid || again.UID != mirror.UID || restartCount(again) != 0 || len(starts(t, out)) != 2 {
		t.Fatalf("after an agent restart: processes %v (was %s), mirror %s (was %s), restarts %d, starts %v: want all unchanged",
			got, pid, again.UID, mirror.UID, restartCount(again), starts(t, out))
	}

	// While the API server is away, static pods keep running, new ones
	// start, and an agent restarted then still finds them: their mirror
	// pods follow when it is back.
	proxy.stop()
	write("offline.yaml", staticManifest("offline", ns, out, token("offline")))
	eventually(t, 30*time.Second, "the offline manifest running", func() (bool, string) {
		return len(pids(token("offline"))) == 1, fmt.Sprint(pids(token("offline")))
	})
	a.stop()
	a.start()
	// The restarted agent has read the manifests at least twice, and run
	// what it read: a manifest dropped in after the restart runs, and a
	// second one dropped in once the first runs does too. Had either read
	// restarted web, it would show by then (its own starts file keeps the
	// count of starts of web, other and offline).
	probes := t.TempDir()
	if err := os.Chmod(probes, 0o777); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"probe-1", "probe-2"} {
		write(p+".yaml", staticManifest(p, ns, probes, token(p)))
		eventually(t, 30*time.Second, "the restarted agent running "+p, func() (bool, string) {
			return len(pids(token(p))) == 1, fmt.Sprint(pids(token(p)))
		})
	}
	if got := pids(token("v1")); len(got) != 1 || got[0] != pid {
		t.Fatalf("without the API server: processes %v, want %s still", got, pid)
	}
	if got := starts(t, out); len(got) != 3 {
		t.Fatalf("starts %v, want web, other and offline once each", got)
	}
	if _, err := client.CoreV1().Pods(ns).Get(context.Background(), "offline-"+node, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("mirror pod of the offline manifest: %v, want none before the API server is back", err)
	}
	proxy.start()
	waitMirror(t, ns, "offline-"+node, node, "", 60*time.Second)
	if again := waitMirror(t, ns, web, node, "", 10*time.Second); restartCount(again) != 0 {
		t.Fatalf("web restarted %d times", restartCount(again))
	}

	// A bad manifest is reported on the Node, naming its file; the others
	// keep running.
	write("bad.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: bad}\nspec: {containers: [{name: c, imagee: x}]}\n")
	eventually(t, 30*time.Second, "an Event on the Node for bad.yaml", func() (bool, string) {
		out, err := kubectlErr("get", "events", "-n", "default", "--field-selector",
			"involvedObject.kind=Node,involvedObject.name="+node+",reason=FailedStaticPodManifest", "-o", "jsonpath={.items[*].message}")
		return err == nil && strings.Contains(out, filepath.Join(manifests, "bad.yaml")) && strings.Contains(out, "imagee"), fmt.Sprint(out, err)
	})
	if got := pids(token("v1")); len(got) != 1 || got[0] != pid {
		t.Fatalf("after a bad manifest: processes %v, want %s still", got, pid)
	}

	// An edited manifest replaces the pod and its mirror pod.
	write("web.yaml", staticManifest("web", ns, out, token("v2")))
	edited := waitMirror(t, ns, web, node, string(mirror.UID), 60*time.Second)
	if edited.Annotations["kubernetes.io/config.hash"] == mirror.Annotations["kubernetes.io/config.hash"] {
		t.Errorf("the edited pod kept its hash %s", mirror.Annotations["kubernetes.io/config.hash"])
	}
	eventually(t, 60*time.Second, "the new version's process only", func() (bool, string) {
		return len(pids(token("v1"))) == 0 && len(pids(token("v2"))) == 1, fmt.Sprint(pids(token("v1")), pids(token("v2")))
	})

	// A removed manifest stops the pod and deletes its mirror pod.
	if err := os.Remove(filepath.Join(manifests, "web.yaml")); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "web and its mirror pod gone", func() (bool, string) {
		_, err := client.CoreV1().Pods(ns).Get(context.Background(), web, metav1.GetOptions{})
		return apierrors.IsNotFound(err) && len(pids(token("v2"))) == 0, fmt.Sprint(err, pids(token("v2")))
	})
}
