package server

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"

	"k8s.io/klog/v2/ktesting"
)

// TestConfigz checks /configz as the kubelet serves it: the configuration
// under "kubeletconfig", for users allowed nodes/configz (or nodes/proxy),
// and 404 when the server has no configuration to show.
func TestConfigz(t *testing.T) {
	type cfg struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Port       int32  `json:"port"`
	}
	ts := startServer(t, newBackend(), Options{Configz: cfg{"kubelet.config.k8s.io/v1beta1", "KubeletConfiguration", 10250}}, "alice")
	status, body := ts.do(t, http.MethodGet, "/configz", "alice-token", nil)
	if status != http.StatusOK {
		t.Fatalf("GET /configz = %d %q", status, body)
	}
	var got struct {
		KubeletConfig cfg `json:"kubeletconfig"`
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatalf("decode %q: %v", body, err)
	}
	if got.KubeletConfig.Kind != "KubeletConfiguration" || got.KubeletConfig.Port != 10250 {
		t.Errorf("/configz = %s", body)
	}
	var subs []string
	for _, sar := range ts.reviews.recorded() {
		if sar.ResourceAttributes != nil {
			subs = append(subs, sar.ResourceAttributes.Subresource)
		}
	}
	if !slices.Contains(subs, "configz") {
		t.Errorf("/configz was authorized by %v, want nodes/configz", subs)
	}
	if status, _ := ts.do(t, http.MethodGet, "/configz", "bob-token", nil); status != http.StatusForbidden {
		t.Errorf("GET /configz by bob = %d, want 403", status)
	}

	none := startServer(t, newBackend(), Options{}, "alice")
	if status, _ := none.do(t, http.MethodGet, "/configz", "alice-token", nil); status != http.StatusNotFound {
		t.Errorf("GET /configz without a configuration = %d, want 404", status)
	}
}

// TestReadOnlyPort checks that the read-only port serves health, pods,
// stats and metrics without credentials, over plain HTTP, and nothing
// else: no logs, exec or configuration, and no path confusion.
func TestReadOnlyPort(t *testing.T) {
	rv := &reviews{allowed: map[string]bool{}}
	s, err := New(rv.client(t), newBackend(), Options{NodeName: "node-a", Stats: newStatsBackend(), Metrics: okHandler("metrics"),
		ProbeMetrics: okHandler("probes"), CadvisorMetrics: okHandler("cadvisor"), Configz: struct{}{}, ReadOnlyPort: 1})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ro, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.serve(ctx, ln, ro) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	<-s.Serving()
	get := func(method, path string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+ro.Addr().String()+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	for _, tc := range []struct {
		method, path string
		status       int
		want         string
	}{
		{http.MethodGet, "/healthz", http.StatusOK, "ok"},
		{http.MethodGet, "/pods", http.StatusOK, `"name":"p1"`},
		{http.MethodGet, "/pods/", http.StatusOK, `"name":"p2"`},
		{http.MethodGet, "/stats/summary", http.StatusOK, `"nodeName": "node-a"`},
		{http.MethodPost, "/stats/summary", http.StatusOK, `"nodeName": "node-a"`},
		{http.MethodGet, "/metrics", http.StatusOK, "metrics"},
		{http.MethodGet, "/metrics/probes", http.StatusOK, "probes"},
		{http.MethodGet, "/metrics/cadvisor", http.StatusOK, "cadvisor"},
		{http.MethodGet, "/metrics/resource", http.StatusOK, "node_cpu_usage_seconds_total"},
		{http.MethodGet, "/configz", http.StatusNotFound, ""},
		{http.MethodGet, "/containerLogs/ns/p1/c", http.StatusNotFound, ""},
		{http.MethodPost, "/exec/ns/p1/c?command=echo&output=1", http.StatusNotFound, ""},
		{http.MethodGet, "/runningpods/", http.StatusNotFound, ""},
		{http.MethodGet, "/debug/pprof/", http.StatusNotFound, ""},
		{http.MethodGet, "/stats/..%2Fexec/ns/p1/c", http.StatusBadRequest, "invalid path"},
	} {
		status, body := get(tc.method, tc.path)
		if status != tc.status || !strings.Contains(body, tc.want) {
			t.Errorf("%s %s = %d %.200q, want %d with %q", tc.method, tc.path, status, body, tc.status, tc.want)
		}
	}
	if sars := rv.recorded(); len(sars) != 0 {
		t.Errorf("the read-only port asked for %d access reviews, want none", len(sars))
	}
	// Every read-only route is served there, and only those.
	for _, r := range Routes() {
		if !r.ReadOnly {
			continue
		}
		method := r.Method
		if method == "" {
			method = http.MethodGet
		}
		if status, body := get(method, examplePath(r)); status == http.StatusNotFound {
			t.Errorf("read-only route %s %s = 404 %q on the read-only port", method, r.Path, body)
		}
	}
}

// okHandler answers 200 with body.
func okHandler(body string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, body) })
}
