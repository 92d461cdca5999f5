package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// statsBackend is a fakeBackend with summaries: each node's has the node's
// name and one pod; addrs names the node of a local address.
type statsBackend struct {
	*fakeBackend
	err   error
	addrs map[netip.Addr]string

	mu    sync.Mutex
	asked []string // the nodes whose summary was asked for
}

func newStatsBackend() *statsBackend { return &statsBackend{fakeBackend: newBackend()} }

func (b *statsBackend) Summary(_ context.Context, node string) (*statsv1alpha1.Summary, error) {
	b.mu.Lock()
	b.asked = append(b.asked, node)
	b.mu.Unlock()
	if b.err != nil {
		return nil, b.err
	}
	at := metav1.NewTime(time.Unix(1700000100, 0))
	usage, workingSet, capacity := uint64(12_500_000_000), uint64(4096), uint64(1<<30)
	return &statsv1alpha1.Summary{
		Node: statsv1alpha1.NodeStats{
			NodeName: node,
			CPU:      &statsv1alpha1.CPUStats{Time: at, UsageCoreNanoSeconds: &usage},
			Memory:   &statsv1alpha1.MemoryStats{Time: at, WorkingSetBytes: &workingSet},
			Fs:       &statsv1alpha1.FsStats{Time: at, CapacityBytes: &capacity},
		},
		Pods: []statsv1alpha1.PodStats{{
			PodRef:           statsv1alpha1.PodReference{Namespace: "ns", Name: "p1", UID: "uid-1"},
			CPU:              &statsv1alpha1.CPUStats{Time: at, UsageCoreNanoSeconds: &usage},
			EphemeralStorage: &statsv1alpha1.FsStats{Time: at, CapacityBytes: &capacity},
			Containers: []statsv1alpha1.ContainerStats{{
				Name: "c", Memory: &statsv1alpha1.MemoryStats{Time: at, WorkingSetBytes: &workingSet},
			}},
		}},
	}, nil
}

func (b *statsBackend) NodeForAddress(ip netip.Addr) (string, bool) {
	n, ok := b.addrs[ip]
	return n, ok
}

func (b *statsBackend) askedFor() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.asked)
}

func TestStatsSummary(t *testing.T) {
	b := newStatsBackend()
	ts := startServer(t, b, Options{Stats: b, Addresses: b}, "alice")

	status, body := ts.do(t, http.MethodGet, "/stats/summary", "alice-token", nil)
	if status != http.StatusOK {
		t.Fatalf("GET /stats/summary = %d %q, want 200", status, body)
	}
	var full statsv1alpha1.Summary
	if err := json.Unmarshal([]byte(body), &full); err != nil {
		t.Fatalf("decode %q: %v", body, err)
	}
	if full.Node.NodeName != "node-a" || full.Node.Fs == nil || len(full.Pods) != 1 || full.Pods[0].EphemeralStorage == nil {
		t.Errorf("summary %s, want node-a's with its filesystem and its pod's storage", body)
	}

	status, body = ts.do(t, http.MethodGet, "/stats/summary?only_cpu_and_memory=true", "alice-token", nil)
	if status != http.StatusOK {
		t.Fatalf("GET /stats/summary?only_cpu_and_memory=true = %d %q, want 200", status, body)
	}
	var small statsv1alpha1.Summary
	if err := json.Unmarshal([]byte(body), &small); err != nil {
		t.Fatalf("decode %q: %v", body, err)
	}
	if small.Node.CPU == nil || small.Node.Fs != nil || len(small.Pods) != 1 || small.Pods[0].CPU == nil ||
		small.Pods[0].EphemeralStorage != nil || len(small.Pods[0].Containers) != 1 || small.Pods[0].Containers[0].Memory == nil {
		t.Errorf("CPU and memory summary %s, want CPU and memory without filesystems", body)
	}
	if got := b.askedFor(); !slices.Equal(got, []string{"node-a", "node-a"}) {
		t.Errorf("summaries asked for %v, want node-a twice", got)
	}

	if status, body := ts.do(t, http.MethodGet, "/stats/summary", "bob-token", nil); status != http.StatusForbidden ||
		!strings.Contains(body, "subresource(s)=[stats]") {
		t.Errorf("GET /stats/summary by a user without nodes/stats = %d %q, want 403", status, body)
	}

	b.err = errors.New("runtime is down")
	if status, body := ts.do(t, http.MethodGet, "/stats/summary", "alice-token", nil); status != http.StatusInternalServerError ||
		!strings.Contains(body, "runtime is down") {
		t.Errorf("GET /stats/summary with a failing backend = %d %q, want 500 with the error", status, body)
	}
}

func TestResourceMetrics(t *testing.T) {
	b := newStatsBackend()
	ts := startServer(t, b, Options{Stats: b, Addresses: b}, "alice")

	status, body := ts.do(t, http.MethodGet, "/metrics/resource", "alice-token", nil)
	if status != http.StatusOK {
		t.Fatalf("GET /metrics/resource = %d %q, want 200", status, body)
	}
	for _, line := range []string{
		"node_cpu_usage_seconds_total 12.5 1700000100000\n",
		"node_memory_working_set_bytes 4096 1700000100000\n",
		`pod_cpu_usage_seconds_total{namespace="ns",pod="p1"} 12.5 1700000100000` + "\n",
		`container_memory_working_set_bytes{container="c",namespace="ns",pod="p1"} 4096 1700000100000` + "\n",
		"resource_scrape_error 0\n",
	} {
		if !strings.Contains(body, line) {
			t.Errorf("GET /metrics/resource lacks %q:\n%s", line, body)
		}
	}

	if status, body := ts.do(t, http.MethodGet, "/metrics/resource", "bob-token", nil); status != http.StatusForbidden ||
		!strings.Contains(body, "subresource(s)=[metrics]") {
		t.Errorf("GET /metrics/resource by a user without nodes/metrics = %d %q, want 403", status, body)
	}

	b.err = errors.New("runtime is down")
	status, body = ts.do(t, http.MethodGet, "/metrics/resource", "alice-token", nil)
	if status != http.StatusOK || !strings.Contains(body, "resource_scrape_error 1\n") || strings.Contains(body, "node_cpu_usage_seconds_total") {
		t.Errorf("GET /metrics/resource with a failing backend = %d %q, want 200 with only resource_scrape_error 1", status, body)
	}
}

func TestStatsPathsNotServed(t *testing.T) {
	b := newStatsBackend()
	ts := startServer(t, b, Options{Stats: b, Addresses: b}, "alice")
	for _, path := range []string{"/metrics/probes", "/metrics/cadvisor", "/stats/container", "/stats/", "/metrics"} {
		if status, _ := ts.do(t, http.MethodGet, path, "alice-token", nil); status != http.StatusNotImplemented {
			t.Errorf("GET %s = %d, want 501", path, status)
		}
	}
}

func TestStatsOfTheAddressedNode(t *testing.T) {
	tests := []struct {
		name     string
		addrs    map[netip.Addr]string
		wantNode string
	}{
		{"local address of node-c", map[netip.Addr]string{netip.MustParseAddr("127.0.0.1"): "node-c"}, "node-c"},
		{"unknown local address", map[netip.Addr]string{netip.MustParseAddr("10.0.0.9"): "node-c"}, "node-a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newStatsBackend()
			b.addrs = tt.addrs
			ts := startServer(t, b, Options{Stats: b, Addresses: b}, "alice")

			status, body := ts.do(t, http.MethodGet, "/stats/summary", "alice-token", nil)
			var s statsv1alpha1.Summary
			if status != http.StatusOK || json.Unmarshal([]byte(body), &s) != nil || s.Node.NodeName != tt.wantNode {
				t.Errorf("GET /stats/summary = %d %q, want %s's summary", status, body, tt.wantNode)
			}
			if status, _ := ts.do(t, http.MethodGet, "/metrics/resource", "alice-token", nil); status != http.StatusOK {
				t.Errorf("GET /metrics/resource = %d, want 200", status)
			}
			if got := b.askedFor(); !slices.Equal(got, []string{tt.wantNode, tt.wantNode}) {
				t.Errorf("summaries asked for %v, want %s for both", got, tt.wantNode)
			}
		})
	}
}

func TestAuthorizationAttributesOfTheAddressedNode(t *testing.T) {
	tests := []struct {
		method, path string
		wantSubs     []string
		wantNode     string
	}{
		{http.MethodGet, "/stats/summary", []string{"stats"}, "node-c"},
		{http.MethodGet, "/stats/summary?only_cpu_and_memory=true", []string{"stats"}, "node-c"},
		{http.MethodGet, "/metrics/resource", []string{"metrics"}, "node-c"},
		{http.MethodGet, "/metrics/probes", []string{"metrics"}, "node-c"},
		{http.MethodGet, "/metrics", []string{"metrics"}, "node-c"},
		// The rest keeps its node: the pod's, else the primary one.
		{http.MethodGet, "/pods", []string{"pods", "proxy"}, "node-a"},
		{http.MethodPost, "/exec/ns/p2/c?command=x", []string{"proxy"}, "node-b"},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			b := newStatsBackend()
			b.addrs = map[netip.Addr]string{netip.MustParseAddr("127.0.0.1"): "node-c"}
			ts := startServer(t, b, Options{Stats: b, Addresses: b}) // nobody allowed: every alternative is tried
			if status, _ := ts.do(t, tt.method, tt.path, "alice-token", nil); status != http.StatusForbidden {
				t.Errorf("status = %d, want 403", status)
			}
			var subs []string
			for _, sar := range ts.reviews.recorded() {
				ra := sar.ResourceAttributes
				if ra == nil || ra.Resource != "nodes" || ra.Name != tt.wantNode {
					t.Errorf("resource attributes %+v, want nodes %s", ra, tt.wantNode)
					continue
				}
				subs = append(subs, ra.Subresource)
			}
			if !slices.Equal(subs, tt.wantSubs) {
				t.Errorf("subresources reviewed = %v, want %v", subs, tt.wantSubs)
			}
			if got := b.askedFor(); len(got) != 0 {
				t.Errorf("summaries asked for %v before authorization, want none", got)
			}
		})
	}
}

// namedStatsBackend serves the nodes of names too, by name: the Nodes an
// agent takes over, which share its address.
type namedStatsBackend struct {
	*statsBackend
	names []string
}

func (b namedStatsBackend) HasNode(node string) bool { return slices.Contains(b.names, node) }

// A request the API server proxied for a node the agent serves (its
// X-Forwarded-Uri names it) is served for, and authorized against, that
// node whatever address it came to; one for a node the agent does not
// serve, or not proxied, falls back to the address, then the primary node.
func TestStatsOfTheProxiedNode(t *testing.T) {
	tests := []struct {
		name, forwarded string
		names           []string
		wantNode        string
	}{
		{"proxied for a node taken over", "/api/v1/nodes/kwok-1/proxy/stats/summary", []string{"kwok-0", "kwok-1"}, "kwok-1"},
		{"with a port and scheme", "/api/v1/nodes/https:kwok-0:10250/proxy/stats/summary", []string{"kwok-0", "kwok-1"}, "kwok-0"},
		{"proxied for a node not served", "/api/v1/nodes/other/proxy/stats/summary", []string{"kwok-0"}, "node-c"},
		{"not the node proxy", "/api/v1/namespaces/ns/services/kwok-0/proxy/stats/summary", []string{"kwok-0"}, "node-c"},
		{"not proxied", "", []string{"kwok-0"}, "node-c"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newStatsBackend()
			b.addrs = map[netip.Addr]string{netip.MustParseAddr("127.0.0.1"): "node-c"}
			named := namedStatsBackend{b, tt.names}
			ts := startServer(t, b, Options{Stats: named, Addresses: named}, "alice")
			if tt.forwarded != "" {
				ts.header = http.Header{"X-Forwarded-Uri": {tt.forwarded}}
			}
			status, body := ts.do(t, http.MethodGet, "/stats/summary", "alice-token", nil)
			var s statsv1alpha1.Summary
			if status != http.StatusOK || json.Unmarshal([]byte(body), &s) != nil || s.Node.NodeName != tt.wantNode {
				t.Errorf("GET /stats/summary = %d %q, want %s's summary", status, body, tt.wantNode)
			}
			for _, sar := range ts.reviews.recorded() {
				if ra := sar.ResourceAttributes; ra == nil || ra.Name != tt.wantNode || ra.Subresource != "stats" {
					t.Errorf("authorized %+v, want nodes/stats of %s", ra, tt.wantNode)
				}
			}
		})
	}
}

// kwok's path of a node's resource metrics, which a Node names in its
// metrics.k8s.io/resource-metrics-path annotation for metrics-server,
// serves and authorizes the node it names: the Nodes an agent takes over
// share its address, so metrics-server reaches them all at one address.
func TestResourceMetricsOfTheNodeInThePath(t *testing.T) {
	tests := []struct {
		name, node string
		wantStatus int
	}{
		{"a node taken over", "kwok-1", http.StatusOK},
		{"the server's node", "node-a", http.StatusOK},
		{"a node not served", "other", http.StatusNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newStatsBackend()
			b.addrs = map[netip.Addr]string{netip.MustParseAddr("127.0.0.1"): "node-c"}
			named := namedStatsBackend{b, []string{"kwok-0", "kwok-1"}}
			ts := startServer(t, b, Options{Stats: named, Addresses: named}, "alice")
			path := ResourceMetricsPath(tt.node)
			if path != "/metrics/nodes/"+tt.node+"/metrics/resource" {
				t.Fatalf("ResourceMetricsPath(%q) = %q, want kwok's path", tt.node, path)
			}
			status, body := ts.do(t, http.MethodGet, path, "alice-token", nil)
			if status != tt.wantStatus {
				t.Fatalf("GET %s = %d %q, want %d", path, status, body, tt.wantStatus)
			}
			b.mu.Lock()
			asked := slices.Clone(b.asked)
			b.mu.Unlock()
			if tt.wantStatus == http.StatusOK && (!slices.Equal(asked, []string{tt.node}) || !strings.Contains(body, "node_cpu_usage_seconds_total")) {
				t.Errorf("GET %s asked the summaries of %v and answered %q, want %s's resource metrics", path, asked, body, tt.node)
			}
			if tt.wantStatus != http.StatusOK && len(asked) > 0 {
				t.Errorf("GET %s asked the summaries of %v, want none", path, asked)
			}
			for _, sar := range ts.reviews.recorded() {
				if ra := sar.ResourceAttributes; ra == nil || ra.Name != tt.node || ra.Subresource != "metrics" {
					t.Errorf("authorized %+v, want nodes/metrics of %s", ra, tt.node)
				}
			}
		})
	}
}
