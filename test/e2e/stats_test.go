package e2e

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/tools/clientcmd"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodelet/nodelet/test/fault"
)

// summaryOf reads a node's /stats/summary through the API server's node
// proxy, as kubectl get --raw does.
func summaryOf(t *testing.T, node string) (*statsv1alpha1.Summary, error) {
	t.Helper()
	out, err := kubectlErr("get", "--raw", "/api/v1/nodes/"+node+"/proxy/stats/summary")
	if err != nil {
		return nil, err
	}
	var s statsv1alpha1.Summary
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		return nil, fmt.Errorf("decode the summary: %w", err)
	}
	return &s, nil
}

// summaryAt reads a node's /stats/summary from the kubelet API at
// address:port directly, with the admin client certificate: the API
// server refuses to proxy to loopback addresses such as the sim nodes'.
func summaryAt(t *testing.T, address string, port int) (*statsv1alpha1.Summary, error) {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	tc := cfg.TLSClientConfig
	cert, err := tls.X509KeyPair(tc.CertData, tc.KeyData)
	if len(tc.CertData) == 0 {
		cert, err = tls.LoadX509KeyPair(tc.CertFile, tc.KeyFile)
	}
	if err != nil {
		t.Fatalf("the admin client certificate: %v", err)
	}
	tlsConfig := insecureTLS()
	tlsConfig.Certificates = []tls.Certificate{cert}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig}}
	resp, err := hc.Get(fmt.Sprintf("https://%s/stats/summary", net.JoinHostPort(address, strconv.Itoa(port))))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", resp.Status, body)
	}
	var s statsv1alpha1.Summary
	if err := json.Unmarshal(body, &s); err != nil {
		return nil, fmt.Errorf("decode the summary: %w", err)
	}
	return &s, nil
}

// topQuantities returns `kubectl top` figures of one object: CPU in
// millicores and memory in bytes.
func topQuantities(args ...string) (cpu, memory int64, err error) {
	out, err := kubectlErr(append([]string{"top"}, append(args, "--no-headers")...)...)
	if err != nil {
		return 0, 0, fmt.Errorf("%v: %s", err, out)
	}
	// Pods: NAME CPU MEMORY; nodes: NAME CPU CPU% MEMORY MEMORY%.
	fields := strings.Fields(out)
	memCol := 2
	if args[0] == "node" {
		memCol = 3
	}
	if len(fields) <= memCol {
		return 0, 0, fmt.Errorf("unexpected kubectl top output %q", out)
	}
	c, err := resource.ParseQuantity(fields[1])
	if err != nil {
		return 0, 0, err
	}
	m, err := resource.ParseQuantity(fields[memCol])
	if err != nil {
		return 0, 0, err
	}
	return c.MilliValue(), m.Value(), nil
}

// A process node reports its own and its pods' usage at /stats/summary and
// /metrics/resource, metrics-server scrapes them for kubectl top (a pod
// burning CPU shows about a core, one holding 200 MiB about that), and
// callers without rights are refused.
func TestProcessStatsAndTop(t *testing.T) {
	t.Parallel()
	holdHost(t)
	node := uniqueName(t)
	a := startProcessNodelet(t, node)
	ns := newNamespace(t)
	t.Cleanup(func() { deletePods(t, ns) })
	apply(t, ns, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: burn
spec:
  nodeName: %[1]s
  terminationGracePeriodSeconds: 1
  containers:
  - name: burn
    image: nodelet.io/none
    command: ["sh", "-c", "while :; do :; done"]
---
apiVersion: v1
kind: Pod
metadata:
  name: hold
spec:
  nodeName: %[1]s
  terminationGracePeriodSeconds: 1
  containers:
  - name: hold
    image: nodelet.io/none
    command: ["sh", "-c", "x=$(head -c 200m /dev/zero | tr '\\0' a); sleep 3600"]
`, node))
	waitPodPhase(t, ns, "burn", "Running", 60*time.Second)
	waitPodPhase(t, ns, "hold", "Running", 60*time.Second)

	podCPU := map[string]uint64{}
	podMem := map[string]uint64{}
	eventually(t, 60*time.Second, "the summary shows the burning pod at about a core", func() (bool, string) {
		s, err := summaryOf(t, node)
		if err != nil {
			return false, err.Error()
		}
		if s.Node.NodeName != node || s.Node.CPU == nil || s.Node.Memory == nil || s.Node.Fs == nil {
			return false, fmt.Sprintf("node figures incomplete: %+v", s.Node)
		}
		for _, p := range s.Pods {
			if p.PodRef.Namespace == ns && p.CPU != nil && p.CPU.UsageNanoCores != nil && p.Memory != nil {
				podCPU[p.PodRef.Name], podMem[p.PodRef.Name] = *p.CPU.UsageNanoCores, *p.Memory.WorkingSetBytes
			}
		}
		return podCPU["burn"] > 7e8 && podMem["hold"] > 180<<20, fmt.Sprintf("cpu %v, memory %v", podCPU, podMem)
	})

	metrics := kubectl(t, "get", "--raw", "/api/v1/nodes/"+node+"/proxy/metrics/resource")
	for _, want := range []string{"node_cpu_usage_seconds_total ", "node_memory_working_set_bytes ",
		fmt.Sprintf(`container_cpu_usage_seconds_total{container="burn",namespace="%s",pod="burn"} `, ns),
		fmt.Sprintf(`pod_memory_working_set_bytes{namespace="%s",pod="hold"} `, ns)} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics/resource lacks %q:\n%s", want, metrics)
		}
	}

	eventually(t, 120*time.Second, "kubectl top pod shows the figures", func() (bool, string) {
		bc, _, err1 := topQuantities("pod", "-n", ns, "burn")
		_, hm, err2 := topQuantities("pod", "-n", ns, "hold")
		if err1 != nil || err2 != nil {
			return false, fmt.Sprintf("%v; %v", err1, err2)
		}
		// The burner gets what two loaded cores leave it (550m beside the
		// whole suite): top must show it busy, not how busy.
		return bc > 300 && bc < 1300 && hm > 180<<20 && hm < 400<<20, fmt.Sprintf("burn %dm, hold %d bytes", bc, hm)
	})
	eventually(t, 60*time.Second, "kubectl top node shows the node", func() (bool, string) {
		c, m, err := topQuantities("node", node)
		if err != nil {
			return false, err.Error()
		}
		return c > 700 && m > 200<<20, fmt.Sprintf("cpu %dm, memory %d", c, m)
	})

	// Without credentials, 401; with a token without nodes/stats or
	// nodes/metrics, 403.
	base := fmt.Sprintf("https://127.0.0.1:%d", a.port)
	insecure := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: insecureTLS()}}
	kubectl(t, "create", "serviceaccount", "-n", ns, "nobody")
	token := strings.TrimSpace(kubectl(t, "create", "token", "-n", ns, "nobody"))
	for _, path := range []string{"/stats/summary", "/metrics/resource", "/metrics/probes", "/metrics"} {
		for _, tc := range []struct {
			token string
			want  int
		}{{"", http.StatusUnauthorized}, {token, http.StatusForbidden}} {
			req, _ := http.NewRequest(http.MethodGet, base+path, nil)
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			resp, err := insecure.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("GET %s with token %t: %d %s, want %d", path, tc.token != "", resp.StatusCode, body, tc.want)
			}
		}
	}
}

// Simulated nodes, each on its own address, report their pods' simulated
// usage to metrics-server; an HPA on a Deployment of 10 replicas over 50 of
// them scales up when the pods are annotated busier than the target and
// back down when the annotation goes.
func TestSimUsageDrivesAnHPA(t *testing.T) {
	t.Parallel()
	const nodes = 50
	fleet := uniqueName(t)
	cleanupFleet(t, fleet, nodes)
	ca := filepath.Join(filepath.Dir(kubeconfig), "pki", "ca.crt")
	config := writeFile(t, "config.yaml", `apiVersion: nodelet.io/v1alpha1
kind: NodeletConfiguration
sim:
  nodeAddresses: 127.77.0.0/24
  usage:
    cpuRequestRatio: 0.2
`)
	port := fault.FreePort(t)
	startNodelet(t, fleet, "--config", config, "--nodes", strconv.Itoa(nodes), "--node-labels", "e2e/fleet="+fleet,
		"--enable-server", "--port", strconv.Itoa(port), "--client-ca-file", ca)
	ns := newNamespace(t)
	eventually(t, 60*time.Second, "all nodes Ready", func() (bool, string) {
		total, ready := fleetNodes(t, fleet)
		return ready == nodes, fmt.Sprintf("%d of %d nodes, %d Ready", total, nodes, ready)
	})
	if got := kubectl(t, "get", "node", fleet+"-7", "-o", `jsonpath={.status.addresses[?(@.type=="InternalIP")].address}`); got != "127.77.0.8" {
		t.Errorf("node %s-7 InternalIP %q, want 127.77.0.8", fleet, got)
	}

	apply(t, ns, fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 10
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      nodeSelector:
        e2e/fleet: %s
      containers:
      - name: app
        image: nodelet.io/sample:1
        resources:
          requests: {cpu: 100m, memory: 64Mi}
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: web
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  minReplicas: 5
  maxReplicas: 20
  metrics:
  - type: Resource
    resource:
      name: cpu
      target: {type: Utilization, averageUtilization: 50}
  behavior:
    scaleUp: {stabilizationWindowSeconds: 0}
    scaleDown: {stabilizationWindowSeconds: 0}
`, fleet))
	if _, err := kubectlErr("rollout", "status", "-n", ns, "deployment/web", "--timeout=120s"); err != nil {
		t.Fatalf("rollout: %v\npods: %s", err, podSummary(t, ns))
	}
	// A simulated node's own figures, at its own address.
	pod := podList(t, ns).Items[0]
	s, err := summaryAt(t, pod.Status.HostIP, port)
	if err != nil {
		t.Fatal(err)
	}
	if s.Node.NodeName != pod.Spec.NodeName || len(s.Pods) == 0 || s.Node.CPU == nil || *s.Node.CPU.UsageNanoCores < 1e8 {
		t.Errorf("summary of %s: node %+v with %d pods, want its own figures and pods", pod.Spec.NodeName, s.Node, len(s.Pods))
	}

	replicas := func() (int, string) {
		out, _ := kubectlErr("get", "hpa", "-n", ns, "web", "-o", "jsonpath={.status.desiredReplicas} {.status.currentMetrics[0].resource.current.averageUtilization}")
		f := strings.Fields(out)
		if len(f) == 0 {
			return 0, out
		}
		n, _ := strconv.Atoi(f[0])
		return n, out
	}
	// At 20% of requests, below the 50% target: down to the minimum.
	eventually(t, 180*time.Second, "the HPA scales down to 5 at 20% utilization", func() (bool, string) {
		n, out := replicas()
		return n == 5, "desired and utilization: " + out
	})
	kubectl(t, "annotate", "pods", "-n", ns, "-l", "app=web", "--overwrite", "sim.nodelet.io/cpu-usage=300m")
	eventually(t, 180*time.Second, "the HPA scales up past 10 when the pods run at 300%", func() (bool, string) {
		n, out := replicas()
		return n > 10, "desired and utilization: " + out
	})
	kubectl(t, "annotate", "pods", "-n", ns, "-l", "app=web", "sim.nodelet.io/cpu-usage-")
	eventually(t, 180*time.Second, "the HPA scales back down to 5", func() (bool, string) {
		n, out := replicas()
		return n == 5, "desired and utilization: " + out
	})
	kubectl(t, "delete", "hpa", "-n", ns, "web")
	kubectl(t, "scale", "-n", ns, "deployment/web", "--replicas=0")
	eventually(t, 120*time.Second, "all pods gone", func() (bool, string) {
		n := len(podList(t, ns).Items)
		return n == 0, fmt.Sprintf("%d pods left", n)
	})
}
