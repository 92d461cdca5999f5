package server

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
)

// examplePath fills a route's wildcards with sample names.
func examplePath(r Route) string {
	return strings.NewReplacer("{node}", "node-a", "{namespace}", "ns", "{pod}", "p1", "{uid}", "uid-1", "{container}", "c").Replace(r.Path)
}

// TestRoutes checks the route table against the ServeMux it built and
// against the authorizer: every route is served by its own pattern, and a
// request to it is authorized by exactly the subresources it declares. A
// new endpoint is in the table by construction, so it cannot be left out of
// this test or of the end-to-end authorization matrix that walks Routes.
func TestRoutes(t *testing.T) {
	full := Routes()
	if len(full) == 0 {
		t.Fatal("Routes() is empty")
	}
	configs := map[string]*Server{
		"every option": {opts: Options{Metrics: http.NotFoundHandler(), ProbeMetrics: http.NotFoundHandler(), CadvisorMetrics: http.NotFoundHandler(),
			Stats: noSummary{}, Profiling: true, Configz: struct{}{}}},
		"no option": {opts: Options{}},
	}
	a := &auth{nodeName: "node-a"}
	u := &user.DefaultInfo{Name: "alice"}
	for name, s := range configs {
		t.Run(name, func(t *testing.T) {
			table := s.routeTable()
			seen := map[string]bool{}
			for _, r := range table.routes {
				pattern := strings.TrimSpace(r.Method + " " + r.Path)
				if seen[pattern] {
					t.Errorf("pattern %q registered twice", pattern)
				}
				seen[pattern] = true
				method := r.Method
				if method == "" {
					method = http.MethodGet
				}
				req := httptest.NewRequest(method, "https://node-a:10250"+examplePath(r), nil)
				if _, got := table.mux.Handler(req); got != pattern {
					t.Errorf("%s %s is served by pattern %q, want %q", method, req.URL.Path, got, pattern)
				}
				if err := checkPath(req.URL); err != nil {
					t.Errorf("%s %s: %v", method, req.URL.Path, err)
				}
				var subs []string
				for _, attr := range a.attributes(u, req) {
					subs = append(subs, attr.Subresource)
				}
				if !slices.Equal(subs, r.Subresources) {
					t.Errorf("%s %s is authorized by %v, the table says %v", method, req.URL.Path, subs, r.Subresources)
				}
			}
		})
	}
	// The table of every option holds every pattern of the other.
	var all []string
	for _, r := range full {
		all = append(all, r.Path)
	}
	for _, r := range configs["no option"].routeTable().routes {
		if !slices.Contains(all, r.Path) {
			t.Errorf("%s is served without options but missing from Routes()", r.Path)
		}
	}
}

// TestPathConfusionRefused sends paths whose decoded form reads differently
// from their escaped segments: each is refused with 400 before it is
// authorized or reaches the backend, and an anonymous request still gets
// 401 first.
func TestPathConfusionRefused(t *testing.T) {
	backend := newBackend()
	ts := startServer(t, backend, Options{AuthorizationMode: AuthorizationModeAlwaysAllow})
	for _, tc := range []struct{ method, path string }{
		{http.MethodGet, "/containerLogs/ns/p1/%2e%2e"},
		{http.MethodGet, "/containerLogs/ns/p1/%2E%2E%2F%2E%2E%2Fetc%2Fpasswd"},
		{http.MethodGet, "/containerLogs/ns/p1/..%2f..%2fetc%2fpasswd"},
		{http.MethodGet, "/containerLogs/ns/%2e%2e/c"},
		{http.MethodGet, "/containerLogs/ns/p1/c/.."},
		{http.MethodGet, "/containerLogs/ns/p1/../p2/c"},
		{http.MethodGet, "/stats/..%2Fexec/ns/p1/c?command=echo"},
		{http.MethodPost, "/stats/..%2Fexec/ns/p1/c?command=echo"},
		{http.MethodPost, "/exec/ns/p1%2Fx/c?command=echo&output=1"},
		{http.MethodGet, "//pods"},
		{http.MethodGet, "/pods/./"},
	} {
		status, body := ts.do(t, tc.method, tc.path, "", nil)
		if status != http.StatusUnauthorized {
			t.Errorf("anonymous %s %s = %d %q, want 401", tc.method, tc.path, status, body)
		}
		status, body = ts.do(t, tc.method, tc.path, "alice-token", nil)
		if status != http.StatusBadRequest || !strings.Contains(body, "invalid path") {
			t.Errorf("%s %s = %d %q, want 400 invalid path", tc.method, tc.path, status, body)
		}
	}
	backend.mu.Lock()
	defer backend.mu.Unlock()
	if len(backend.logOpts) != 0 || len(backend.execCmds) != 0 {
		t.Errorf("the backend was reached: %d log reads, exec %v", len(backend.logOpts), backend.execCmds)
	}
}
