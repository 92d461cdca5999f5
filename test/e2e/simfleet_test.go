package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// TestSimFleetStatefulSet deploys deploy/sim-fleet as a user would, with
// nodelet's own image: built here with bin/images (go-containerregistry)
// from a static nodelet, pushed to a registry on loopback that takes pushes,
// and run by a cri node as a StatefulSet of three agents, each the shard of
// its pod index. Together they register every node of the fleet once; a
// deleted agent's pod comes back with the same index and takes its nodes
// back before their Leases expire.
func TestSimFleetStatefulSet(t *testing.T) {
	const nodes, shards = 30, 3
	leaseDuration := 40 * time.Second // the Lease duration of nodelet.yaml's default

	host := uniqueName(t)
	cri := startCRINodelet(t, host) // its cleanup, last, checks that the agents' pods left nothing
	image := buildNodeletImage(t)

	// The agents' pods are on the cri node's bridge; the API server
	// listens on loopback only: a proxy on the host's address, for the
	// pod subnet alone, gets them there.
	apiserver := tcpProxyToAPIServer(t, hostIP(t), cri.env.Subnet())

	ns := uniqueName(t)
	fleet := ns + "-sim" // the nodes: <fleet>-0 … <fleet>-29
	prefix := ns + "-"   // of every object of the manifests
	sts := prefix + "nodelet-sim-fleet"
	cleanupFleet(t, fleet, nodes) // once the agents are gone
	overlay := simFleetOverlay(t, simFleetSettings{
		namespace: ns, prefix: prefix, fleet: fleet, nodes: nodes, host: host,
		image: image, apiserver: apiserver,
	})
	rendered := kubectl(t, "kustomize", overlay)
	manifest := filepath.Join(t.TempDir(), "fleet.yaml")
	if err := os.WriteFile(manifest, []byte(rendered), 0o644); err != nil {
		t.Fatal(err)
	}
	kubectl(t, "apply", "-f", manifest)
	t.Cleanup(func() {
		// The namespace and its StatefulSet, the cluster's RBAC objects and
		// the Lease Role: everything the manifests made.
		if out, err := kubectlErr("delete", "-f", manifest, "--ignore-not-found", "--wait=true", "--timeout=120s"); err != nil {
			t.Logf("fleet manifests not deleted yet: %v\n%s", err, out)
		}
		out, _ := kubectlErr("get", "clusterroles,clusterrolebindings", "-o", "name")
		more, _ := kubectlErr("get", "roles,rolebindings", "-n", corev1.NamespaceNodeLease, "-o", "name")
		for _, name := range strings.Fields(out + " " + more) {
			if strings.Contains(name, "/"+prefix) {
				t.Errorf("left behind: %s", name)
			}
		}
		if t.Failed() {
			for i := range shards {
				out, _ := kubectlErr("logs", "-n", ns, fmt.Sprintf("%s-%d", sts, i), "--tail=40")
				t.Logf("agent %s-%d:\n%s", sts, i, out)
			}
		}
	})

	kubectl(t, "rollout", "status", "-n", ns, "statefulset/"+sts, "--timeout=180s")
	eventually(t, 90*time.Second, "every node of the fleet Ready", func() (bool, string) {
		total, ready := fleetNodes(t, fleet)
		return ready == nodes, fmt.Sprintf("%d of %d nodes, %d Ready", total, nodes, ready)
	})

	// Each node once, by the agent of its shard.
	list, err := client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{LabelSelector: "e2e/fleet=" + fleet})
	if err != nil {
		t.Fatal(err)
	}
	perAgent := map[string]int{}
	for _, n := range list.Items {
		h := fnv.New32a()
		h.Write([]byte(n.Name))
		want := fmt.Sprintf("%s-%d", sts, h.Sum32()%shards)
		if got := n.Labels["e2e.nodelet.io/agent"]; got != want {
			t.Errorf("node %s registered by %q, want %s (its shard)", n.Name, got, want)
		}
		perAgent[n.Labels["e2e.nodelet.io/agent"]]++
	}
	if len(list.Items) != nodes || len(perAgent) != shards {
		t.Fatalf("%d nodes by %d agents (%v), want %d by %d", len(list.Items), len(perAgent), perAgent, nodes, shards)
	}
	t.Logf("nodes per agent: %v", perAgent)

	// The probes' /healthz, and /metrics for a caller allowed nodes/metrics.
	pod1 := getPod(t, ns, sts+"-1")
	checkAgentEndpoints(t, ns, prefix, pod1.Status.PodIP)

	// Delete agent 1: its nodes must keep a live Lease until the
	// StatefulSet's new pod 1 renews them.
	var owned []string
	for _, n := range list.Items {
		if n.Labels["e2e.nodelet.io/agent"] == sts+"-1" {
			owned = append(owned, n.Name)
		}
	}
	watch := watchLeases(t, fleet, nodes)
	deleted := time.Now()
	kubectl(t, "delete", "pod", "-n", ns, sts+"-1", "--wait=false")
	var readyAt time.Time
	eventually(t, 2*time.Minute, "a new agent 1 Ready", func() (bool, string) {
		p, err := client.CoreV1().Pods(ns).Get(context.Background(), sts+"-1", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		readyAt = time.Now()
		return p.UID != pod1.UID && podReady(p), fmt.Sprintf("uid %s, phase %s", p.UID, p.Status.Phase)
	})
	eventually(t, leaseDuration, "agent 1's nodes renewed by the new agent", func() (bool, string) {
		renewed := watch.renewedSince(owned, readyAt)
		return renewed == len(owned), fmt.Sprintf("%d of %d renewed", renewed, len(owned))
	})
	// One more look at every Lease and Node, begun after the renewals:
	// two rounds ended, the second begun after this point.
	round := watch.rounds()
	eventually(t, 30*time.Second, "the watch's next round", func() (bool, string) {
		return watch.rounds() >= round+2, fmt.Sprintf("%d rounds since", watch.rounds()-round)
	})
	oldest, worst := watch.stop()
	t.Logf("agent 1 replaced in %s; the oldest Lease seen was %s old (%s)", time.Since(deleted).Round(time.Second), oldest.Round(100*time.Millisecond), worst)
	if oldest >= leaseDuration {
		t.Errorf("the Lease of %s went %s without renewal: longer than its duration %s", worst, oldest, leaseDuration)
	}
	if d, node := watch.longestNotReady(); d >= leaseDuration {
		t.Errorf("node %s was not Ready for %s: longer than the Lease duration %s", node, d, leaseDuration)
	} else if node != "" {
		t.Logf("node %s was not Ready for %s", node, d)
	}
	total, ready := fleetNodes(t, fleet)
	if total != nodes || ready != nodes {
		t.Errorf("after the replacement: %d nodes, %d Ready; want %d, all Ready", total, ready, nodes)
	}
}

// buildNodeletImage builds a static nodelet and hack/images as make image
// does, writes the image to an OCI layout, serves a registry on loopback
// that takes pushes (images serve --writable) and pushes the image there;
// it returns the pushed reference. The cri node's containerd pulls from a
// loopback registry over plain HTTP.
func buildNodeletImage(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	goBuild := func(wd, out, pkg string) {
		t.Helper()
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, pkg)
		cmd.Dir = wd
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, b)
		}
	}
	nodelet, images := filepath.Join(dir, "nodelet"), filepath.Join(dir, "images")
	goBuild(root, nodelet, "./cmd/nodelet")
	goBuild(filepath.Join(root, "hack/images"), images, ".")
	tag := "e2e-" + randSuffix()
	layout := filepath.Join(dir, "oci")
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(images, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("images %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	t.Logf("built %s", run("nodelet", "--dir", layout, "--nodelet", nodelet, "--ref", "nodelet.io/nodelet:"+tag))

	ready := filepath.Join(dir, "registry-addr")
	logFile, err := os.Create(filepath.Join(dir, "registry.log"))
	if err != nil {
		t.Fatal(err)
	}
	reg := exec.Command(images, "serve", "--writable", "--listen", "127.0.0.1:0", "--ready-file", ready)
	reg.Stdout, reg.Stderr = logFile, logFile
	reg.SysProcAttr = stopWithParent()
	if err := reg.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = reg.Wait(); logFile.Close(); close(done) }()
	t.Cleanup(func() {
		_ = reg.Process.Kill()
		<-done
		if t.Failed() {
			out, _ := os.ReadFile(logFile.Name())
			t.Logf("registry log:\n%s", lastLines(string(out), 30))
		}
	})
	var addr string
	eventually(t, 30*time.Second, "the registry serving", func() (bool, string) {
		b, err := os.ReadFile(ready)
		addr = strings.TrimSpace(string(b))
		return err == nil && addr != "", fmt.Sprint(err)
	})
	to := addr + "/nodelet/nodelet:" + tag
	t.Logf("pushed %s", run("push", "--dir", layout, "--to", to))
	return to
}

// apiServerEndpoint is where pods reach the API server, and the name its
// certificate is checked against.
type apiServerEndpoint struct {
	server     string // https://<bridge address>:<port>
	serverName string // the host of the admin kubeconfig's server
	caData     []byte
}

// tcpProxyToAPIServer forwards connections from the subnet to
// listenIP:<any port> to the API server of the admin kubeconfig, until the
// test ends; it closes those from anywhere else. TLS passes through.
func tcpProxyToAPIServer(t *testing.T, listenIP, subnet string) apiServerEndpoint {
	t.Helper()
	from, err := netip.ParsePrefix(subnet)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cluster := admin.Clusters[admin.Contexts[admin.CurrentContext].Cluster]
	u, err := url.Parse(cluster.Server)
	if err != nil {
		t.Fatal(err)
	}
	caData := cluster.CertificateAuthorityData
	if len(caData) == 0 && cluster.CertificateAuthority != "" {
		if caData, err = os.ReadFile(cluster.CertificateAuthority); err != nil {
			t.Fatal(err)
		}
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(listenIP, "0"))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if peer, err := netip.ParseAddrPort(c.RemoteAddr().String()); err != nil || !from.Contains(peer.Addr().Unmap()) {
					return
				}
				up, err := net.DialTimeout("tcp", u.Host, 10*time.Second)
				if err != nil {
					return
				}
				defer up.Close()
				go func() { _, _ = io.Copy(up, c); up.(*net.TCPConn).CloseWrite() }()
				_, _ = io.Copy(c, up)
			}()
		}
	})
	return apiServerEndpoint{server: "https://" + ln.Addr().String(), serverName: u.Hostname(), caData: caData}
}

type simFleetSettings struct {
	namespace, prefix string
	fleet             string
	nodes             int
	host              string // the node the agents run on
	image             string // pushed reference, REGISTRY/REPOSITORY:TAG
	apiserver         apiServerEndpoint
}

// simFleetOverlay writes the test's kustomize overlay of deploy/sim-fleet
// and returns its directory. The inner layer moves everything into the
// test's namespace under the test's name prefix, swaps in the test's fleet,
// image and kubeconfig and pins the agents to the cri node; the outer one
// puts the Lease Role and its binding back in kube-node-lease, where
// kustomize's namespace would not leave them.
func simFleetOverlay(t *testing.T, s simFleetSettings) string {
	t.Helper()
	dir := t.TempDir()
	inner := filepath.Join(dir, "fleet")
	if err := os.MkdirAll(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	base, err := filepath.Rel(inner, filepath.Join(root, "deploy", "sim-fleet"))
	if err != nil {
		t.Fatal(err)
	}
	i := strings.LastIndex(s.image, ":")
	repo, tag := s.image[:i], s.image[i+1:]

	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: s.apiserver.server, TLSServerName: s.apiserver.serverName,
		CertificateAuthorityData: s.apiserver.caData}
	kc.AuthInfos["nodelet"] = &clientcmdapi.AuthInfo{TokenFile: "/var/run/secrets/kubernetes.io/serviceaccount/token"}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "nodelet"}
	kc.CurrentContext = "c"
	kcBytes, err := clientcmd.Write(*kc)
	if err != nil {
		t.Fatal(err)
	}

	files := map[string]string{
		filepath.Join(inner, "kubeconfig"): string(kcBytes),
		filepath.Join(inner, "nodelet.yaml"): fmt.Sprintf(`apiVersion: nodelet.io/v1alpha1
kind: NodeletConfiguration
provider: sim
nodeName: %s
nodes: %d
rootDir: /var/lib/nodelet
registerWithTaints:
- key: nodelet.io/simulated
  value: "true"
  effect: NoSchedule
healthzPort: 10248
healthzBindAddress: 0.0.0.0
enableServer: true
port: 10250
`, s.fleet, s.nodes),
		filepath.Join(inner, "kustomization.yaml"): fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: %[1]s
namePrefix: %[2]s
resources:
- %[3]s
configMapGenerator:
- name: nodelet-sim-fleet
  namespace: nodelet-system
  behavior: replace
  files:
  - nodelet.yaml
- name: nodelet-kubeconfig
  namespace: nodelet-system
  files:
  - kubeconfig
images:
- name: nodelet.io/nodelet
  newName: %[4]s
  newTag: %[5]s
patches:
- target: {kind: StatefulSet, name: nodelet-sim-fleet}
  patch: |-
    - op: add
      path: /spec/template/spec/containers/0/args/-
      value: --kubeconfig=/etc/nodelet-kubeconfig/kubeconfig
    - op: add
      path: /spec/template/spec/containers/0/args/-
      value: --node-labels=e2e/fleet=%[6]s,e2e.nodelet.io/agent=$(POD_NAME)
- target: {kind: StatefulSet, name: nodelet-sim-fleet}
  patch: |-
    apiVersion: apps/v1
    kind: StatefulSet
    metadata:
      name: nodelet-sim-fleet
    spec:
      template:
        spec:
          nodeSelector:
            kubernetes.io/hostname: %[7]s
          containers:
          - name: nodelet
            env:
            - name: POD_NAME
              valueFrom:
                fieldRef:
                  fieldPath: metadata.name
            volumeMounts:
            - name: kubeconfig
              mountPath: /etc/nodelet-kubeconfig
              readOnly: true
          volumes:
          - name: kubeconfig
            configMap:
              name: nodelet-kubeconfig
`, s.namespace, s.prefix, base, repo, tag, s.fleet, s.host),
		filepath.Join(dir, "kustomization.yaml"): fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- fleet
patches:
- target: {kind: Role, name: %[1]snodelet}
  patch: |-
    - op: replace
      path: /metadata/namespace
      value: kube-node-lease
- target: {kind: RoleBinding, name: %[1]snodelet}
  patch: |-
    - op: replace
      path: /metadata/namespace
      value: kube-node-lease
    - op: replace
      path: /subjects/0
      value: {kind: ServiceAccount, name: %[1]snodelet, namespace: %[2]s}
`, s.prefix, s.namespace),
	}
	for path, content := range files {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// checkAgentEndpoints checks an agent's /healthz (plain, unauthenticated)
// and its /metrics (the kubelet API: 401 without a token, 200 with that of
// a ServiceAccount bound to the nodelet-metrics-reader ClusterRole).
func checkAgentEndpoints(t *testing.T, ns, prefix, podIP string) {
	t.Helper()
	resp, err := http.Get("http://" + net.JoinHostPort(podIP, "10248") + "/healthz")
	if err != nil {
		t.Fatalf("GET /healthz: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "ok" {
		t.Errorf("GET /healthz = %d %q, want 200 ok", resp.StatusCode, body)
	}

	kubectl(t, "create", "serviceaccount", "-n", ns, "scraper")
	binding := prefix + "scraper"
	kubectl(t, "create", "clusterrolebinding", binding, "--clusterrole="+prefix+"nodelet-metrics-reader", "--serviceaccount="+ns+":scraper")
	t.Cleanup(func() { _, _ = kubectlErr("delete", "clusterrolebinding", binding, "--ignore-not-found") })
	token := strings.TrimSpace(kubectl(t, "create", "token", "-n", ns, "scraper", "--duration=10m"))

	// The agent's serving certificate is self-signed, as a kubelet's
	// usually is: Prometheus scrapes it with insecure_skip_verify.
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	metricsURL := "https://" + net.JoinHostPort(podIP, "10250") + "/metrics"
	get := func(token string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, metricsURL, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get(""); code != http.StatusUnauthorized {
		t.Errorf("GET /metrics without a token = %d, want 401", code)
	}
	// The binding reaches the authorizer's cache within a moment.
	eventually(t, 30*time.Second, "/metrics for the scraper", func() (bool, string) {
		code, body := get(token)
		return code == http.StatusOK && strings.Contains(body, "kubelet_running_pods"), fmt.Sprintf("%d %s", code, lastLines(body, 3))
	})
}

// leaseWatch polls the fleet's Leases and Nodes and remembers, for each
// Lease, the longest time it was seen without a renewal and its latest
// renewal, and for each Node since when it is not Ready and the longest
// it was so.
type leaseWatch struct {
	mu       sync.Mutex
	oldest   time.Duration
	worst    string
	renewed  map[string]time.Time
	notReady map[string]time.Time // since when, while it lasts
	longest  time.Duration        // the longest a node was seen not Ready
	longName string
	looks    int // the rounds that read every Lease and Node
	cancel   context.CancelFunc
	done     chan struct{}
}

func watchLeases(t *testing.T, fleet string, n int) *leaseWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &leaseWatch{renewed: map[string]time.Time{}, notReady: map[string]time.Time{}, cancel: cancel, done: make(chan struct{})}
	t.Cleanup(func() { _, _ = w.stop() })
	go func() {
		defer close(w.done)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			list, err := client.CoordinationV1().Leases(corev1.NamespaceNodeLease).List(ctx, metav1.ListOptions{})
			if err == nil {
				now := time.Now()
				seen := 0
				w.mu.Lock()
				for _, l := range list.Items {
					if !strings.HasPrefix(l.Name, fleet+"-") || l.Spec.RenewTime == nil {
						continue
					}
					seen++
					renewed := l.Spec.RenewTime.Time
					w.renewed[l.Name] = renewed
					if age := now.Sub(renewed); age > w.oldest {
						w.oldest, w.worst = age, l.Name
					}
				}
				if seen < n && w.worst == "" {
					w.worst = fmt.Sprintf("only %d of %d Leases", seen, n)
				}
				w.mu.Unlock()
			}
			leasesRead := err == nil
			if nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "e2e/fleet=" + fleet}); err == nil {
				now := time.Now()
				w.mu.Lock()
				for _, n := range nodes.Items {
					ready := false
					for _, c := range n.Status.Conditions {
						ready = ready || c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
					}
					since, was := w.notReady[n.Name]
					switch {
					case ready:
						delete(w.notReady, n.Name)
					case !was:
						w.notReady[n.Name] = now
					case now.Sub(since) > w.longest:
						w.longest, w.longName = now.Sub(since), n.Name
					}
				}
				if leasesRead {
					w.looks++
				}
				w.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

// rounds is how many rounds have read every Lease and Node.
func (w *leaseWatch) rounds() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.looks
}

// renewedSince counts the nodes whose Lease was renewed after since.
func (w *leaseWatch) renewedSince(nodes []string, since time.Time) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, name := range nodes {
		if w.renewed[name].After(since) {
			n++
		}
	}
	return n
}

// stop ends the watch and returns the longest time a Lease went without
// renewal, and which.
func (w *leaseWatch) stop() (time.Duration, string) {
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.oldest, w.worst
}

// longestNotReady is the longest time a node was seen not Ready, and which;
// call it after stop.
func (w *leaseWatch) longestNotReady() (time.Duration, string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.longest, w.longName
}
