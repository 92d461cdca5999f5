package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2/ktesting"

	"github.com/nodelet/nodelet/internal/csrtest"
	"github.com/nodelet/nodelet/pkg/provider"
)

// Tokens the fake TokenReview knows, and the users they stand for.
var testTokens = map[string]authenticationv1.UserInfo{
	"alice-token": {Username: "alice", Groups: []string{"admins"}},
	"bob-token":   {Username: "bob"},
}

// reviews is a fake API server's TokenReview and SubjectAccessReview: it
// allows the users in allowed and records every access review.
type reviews struct {
	allowed map[string]bool

	mu   sync.Mutex
	sars []authorizationv1.SubjectAccessReviewSpec
}

// client returns a client of a fake API server that answers the reviews.
// The delegating authenticator and authorizer post reviews through the
// REST client, which the fake clientset lacks: a real client is used.
func (rv *reviews) client(t *testing.T) kubernetes.Interface {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /apis/authentication.k8s.io/v1/tokenreviews", func(w http.ResponseWriter, r *http.Request) {
		var tr authenticationv1.TokenReview
		if err := json.NewDecoder(r.Body).Decode(&tr); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if u, ok := testTokens[tr.Spec.Token]; ok {
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: u}
		}
		writeJSON(w, &tr)
	})
	mux.HandleFunc("POST /apis/authorization.k8s.io/v1/subjectaccessreviews", func(w http.ResponseWriter, r *http.Request) {
		var sar authorizationv1.SubjectAccessReview
		if err := json.NewDecoder(r.Body).Decode(&sar); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rv.mu.Lock()
		rv.sars = append(rv.sars, sar.Spec)
		rv.mu.Unlock()
		sar.Status.Allowed = rv.allowed[sar.Spec.User]
		if !sar.Status.Allowed {
			sar.Status.Reason = "not in the test's allowed users"
		}
		writeJSON(w, &sar)
	})
	api := httptest.NewServer(mux)
	t.Cleanup(api.Close)
	c, err := kubernetes.NewForConfig(&rest.Config{Host: api.URL})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func writeJSON(w http.ResponseWriter, obj any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(obj)
}

func (rv *reviews) recorded() []authorizationv1.SubjectAccessReviewSpec {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	return slices.Clone(rv.sars)
}

// fakeBackend is a provider for tests: logs record their options, exec
// echoes stdin to stdout, port-forward echoes the connection.
type fakeBackend struct {
	pods  []*corev1.Pod
	nodes map[string]string // namespace/name → node

	mu       sync.Mutex
	logOpts  []provider.ContainerLogOpts
	logs     func() io.ReadCloser
	execCmds [][]string
}

func (b *fakeBackend) GetPods(context.Context) ([]*corev1.Pod, error) { return b.pods, nil }

func (b *fakeBackend) NodeForPod(namespace, name string) (string, bool) {
	n, ok := b.nodes[namespace+"/"+name]
	return n, ok
}

func (b *fakeBackend) GetContainerLogs(_ context.Context, namespace, pod, container string, opts provider.ContainerLogOpts) (io.ReadCloser, error) {
	b.mu.Lock()
	b.logOpts = append(b.logOpts, opts)
	b.mu.Unlock()
	if container == "missing" {
		return nil, fmt.Errorf("container %s: %w", container, provider.ErrNotFound)
	}
	if b.logs != nil {
		return b.logs(), nil
	}
	return io.NopCloser(strings.NewReader(fmt.Sprintf("log of %s/%s/%s\n", namespace, pod, container))), nil
}

// exitCodeError carries an exit code like *os/exec.ExitError.
type exitCodeError int

func (e exitCodeError) Error() string { return fmt.Sprintf("exit status %d", int(e)) }
func (e exitCodeError) ExitCode() int { return int(e) }

func (b *fakeBackend) RunInContainer(ctx context.Context, namespace, pod, container string, cmd []string, sio provider.AttachIO) error {
	b.mu.Lock()
	b.execCmds = append(b.execCmds, cmd)
	b.mu.Unlock()
	switch cmd[0] {
	case "fail":
		fmt.Fprintln(sio.Stderr(), "failing")
		return exitCodeError(3)
	case "block":
		<-ctx.Done()
		return ctx.Err()
	case "echo":
		fmt.Fprintf(sio.Stdout(), "%s/%s/%s:", namespace, pod, container)
		if sio.Stdin() != nil {
			if _, err := io.Copy(sio.Stdout(), sio.Stdin()); err != nil {
				return err
			}
		}
		if sio.Stderr() != nil {
			fmt.Fprint(sio.Stderr(), "to stderr")
		}
		return nil
	}
	return fmt.Errorf("unknown command %q", cmd[0])
}

func (b *fakeBackend) PortForward(_ context.Context, _, _ string, port int32, stream io.ReadWriteCloser) error {
	defer stream.Close()
	r := bufio.NewReader(stream)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil
		}
		if _, err := fmt.Fprintf(stream, "%d:%s", port, line); err != nil {
			return err
		}
	}
}

// testServer is a server started on a loopback port.
type testServer struct {
	addr    string
	reviews *reviews
	backend Backend
	done    chan error
	cancel  context.CancelFunc
	// header is sent with every request.
	header http.Header
}

// startServer starts a server for node-a with opts (NodeName, Address and
// Port are set here) and stops it when the test ends.
func startServer(t *testing.T, backend Backend, opts Options, allowed ...string) *testServer {
	t.Helper()
	rv := &reviews{allowed: map[string]bool{}}
	for _, u := range allowed {
		rv.allowed[u] = true
	}
	opts.NodeName = "node-a"
	if len(opts.Hosts) == 0 {
		opts.Hosts = []string{"127.0.0.1", "localhost"}
	}
	s, err := New(rv.client(t), backend, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	ts := &testServer{addr: ln.Addr().String(), reviews: rv, backend: backend, done: make(chan error, 1), cancel: cancel}
	go func() { ts.done <- s.serve(ctx, ln, nil) }()
	t.Cleanup(func() {
		cancel()
		if err := <-ts.done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return ts
}

// get sends a request with an optional bearer token and client certificate.
func (ts *testServer) do(t *testing.T, method, path, token string, cert *tls.Certificate) (int, string) {
	t.Helper()
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
	if cert != nil {
		tr.TLSClientConfig.Certificates = []tls.Certificate{*cert}
	}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequest(method, "https://"+ts.addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range ts.header {
		req.Header[k] = v
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return resp.StatusCode, string(body)
}

func testPods() []*corev1.Pod {
	return []*corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p1", UID: "uid-1"}, Spec: corev1.PodSpec{NodeName: "node-a"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p2", UID: "uid-2"}, Spec: corev1.PodSpec{NodeName: "node-b"}},
	}
}

func newBackend() *fakeBackend {
	return &fakeBackend{pods: testPods(), nodes: map[string]string{"ns/p1": "node-a", "ns/p2": "node-b"}}
}

func TestAuthentication(t *testing.T) {
	ts := startServer(t, newBackend(), Options{}, "alice")
	tests := []struct {
		name, token string
		wantStatus  int
		wantBody    string
	}{
		{name: "anonymous", wantStatus: http.StatusUnauthorized, wantBody: "Unauthorized"},
		{name: "unknown token", token: "nobody", wantStatus: http.StatusUnauthorized, wantBody: "Unauthorized"},
		{name: "denied", token: "bob-token", wantStatus: http.StatusForbidden,
			wantBody: "Forbidden (user=bob, verb=get, resource=nodes, subresource(s)=[pods proxy])"},
		{name: "allowed", token: "alice-token", wantStatus: http.StatusOK, wantBody: `"kind":"PodList"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := ts.do(t, http.MethodGet, "/pods", tt.token, nil)
			if status != tt.wantStatus || !strings.Contains(body, tt.wantBody) {
				t.Errorf("GET /pods = %d %q, want %d containing %q", status, body, tt.wantStatus, tt.wantBody)
			}
		})
	}
}

func TestAnonymousEnabledIsStillAuthorized(t *testing.T) {
	ts := startServer(t, newBackend(), Options{Anonymous: true}, "system:anonymous")
	if status, body := ts.do(t, http.MethodGet, "/healthz", "", nil); status != http.StatusOK || body != "ok" {
		t.Errorf("GET /healthz = %d %q, want 200 ok", status, body)
	}
	sars := ts.reviews.recorded()
	if len(sars) == 0 || sars[0].User != "system:anonymous" || sars[0].ResourceAttributes.Subresource != "healthz" {
		t.Errorf("access reviews = %+v, want system:anonymous on nodes/healthz", sars)
	}
}

func TestAuthorizationAttributes(t *testing.T) {
	tests := []struct {
		method, path string
		wantVerb     string
		wantSubs     []string // in the order they are tried
		wantNode     string
	}{
		{http.MethodGet, "/pods", "get", []string{"pods", "proxy"}, "node-a"},
		{http.MethodGet, "/runningpods/", "get", []string{"pods", "proxy"}, "node-a"},
		{http.MethodGet, "/healthz", "get", []string{"healthz", "proxy"}, "node-a"},
		{http.MethodGet, "/stats/summary", "get", []string{"stats"}, "node-a"},
		{http.MethodGet, "/metrics/resource", "get", []string{"metrics"}, "node-a"},
		{http.MethodGet, "/logs/syslog", "get", []string{"log"}, "node-a"},
		{http.MethodGet, "/containerLogs/ns/p2/c", "get", []string{"proxy"}, "node-b"},
		{http.MethodPost, "/exec/ns/p2/c?command=x", "create", []string{"proxy"}, "node-b"},
		{http.MethodPost, "/exec/ns/unknown/c?command=x", "create", []string{"proxy"}, "node-a"},
		{http.MethodPost, "/portForward/ns/p1", "create", []string{"proxy"}, "node-a"},
		{http.MethodDelete, "/pods", "delete", []string{"pods", "proxy"}, "node-a"},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			ts := startServer(t, newBackend(), Options{}) // nobody allowed: every alternative is tried
			status, _ := ts.do(t, tt.method, tt.path, "alice-token", nil)
			if status != http.StatusForbidden {
				t.Errorf("status = %d, want 403", status)
			}
			var subs []string
			for _, sar := range ts.reviews.recorded() {
				ra := sar.ResourceAttributes
				if sar.User != "alice" || !slices.Equal(sar.Groups, []string{"admins", "system:authenticated"}) {
					t.Errorf("user %q groups %v, want alice [admins system:authenticated]", sar.User, sar.Groups)
				}
				if ra == nil || ra.Verb != tt.wantVerb || ra.Resource != "nodes" || ra.Group != "" || ra.Version != "v1" || ra.Name != tt.wantNode {
					t.Errorf("resource attributes %+v, want verb %s on nodes %s", ra, tt.wantVerb, tt.wantNode)
					continue
				}
				subs = append(subs, ra.Subresource)
			}
			if !slices.Equal(subs, tt.wantSubs) {
				t.Errorf("subresources reviewed = %v, want %v", subs, tt.wantSubs)
			}
		})
	}
}

func TestAlwaysAllow(t *testing.T) {
	ts := startServer(t, newBackend(), Options{AuthorizationMode: AuthorizationModeAlwaysAllow})
	if status, _ := ts.do(t, http.MethodGet, "/healthz", "bob-token", nil); status != http.StatusOK {
		t.Errorf("status = %d, want 200", status)
	}
	if status, _ := ts.do(t, http.MethodGet, "/healthz", "", nil); status != http.StatusUnauthorized {
		t.Errorf("anonymous status = %d, want 401", status)
	}
}

// testCA is a CA that signs client certificates.
func TestClientCertificate(t *testing.T) {
	ca := csrtest.NewCA(t)
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, newBackend(), Options{ClientCAFile: caFile}, "kube-apiserver-kubelet-client")

	good := ca.ClientCert(t, "kube-apiserver-kubelet-client", "system:masters")
	if status, body := ts.do(t, http.MethodGet, "/pods", "", good); status != http.StatusOK {
		t.Errorf("GET /pods with the apiserver's client certificate = %d %q, want 200", status, body)
	}
	sars := ts.reviews.recorded()
	if len(sars) == 0 || sars[0].User != "kube-apiserver-kubelet-client" || !slices.Contains(sars[0].Groups, "system:masters") {
		t.Errorf("access reviews = %+v, want user kube-apiserver-kubelet-client in system:masters", sars)
	}

	other := csrtest.NewCA(t).ClientCert(t, "kube-apiserver-kubelet-client", "system:masters")
	if status, _ := ts.do(t, http.MethodGet, "/pods", "", other); status != http.StatusUnauthorized {
		t.Errorf("GET /pods with a certificate of another CA = %d, want 401", status)
	}
	denied := ca.ClientCert(t, "mallory")
	if status, _ := ts.do(t, http.MethodGet, "/pods", "", denied); status != http.StatusForbidden {
		t.Errorf("GET /pods as mallory = %d, want 403", status)
	}
}

func TestPods(t *testing.T) {
	ts := startServer(t, newBackend(), Options{}, "alice")
	status, body := ts.do(t, http.MethodGet, "/pods", "alice-token", nil)
	if status != http.StatusOK {
		t.Fatalf("status = %d %q", status, body)
	}
	var list corev1.PodList
	if err := json.Unmarshal([]byte(body), &list); err != nil {
		t.Fatal(err)
	}
	if list.Kind != "PodList" || list.APIVersion != "v1" || len(list.Items) != 2 || list.Items[1].Name != "p2" {
		t.Errorf("pod list = %+v", list)
	}
}

func TestNotImplemented(t *testing.T) {
	ts := startServer(t, &fakeBackend{}, Options{}, "alice")
	for _, path := range []string{"/metrics", "/stats/summary", "/metrics/resource"} {
		if status, _ := ts.do(t, http.MethodGet, path, "alice-token", nil); status != http.StatusNotImplemented {
			t.Errorf("GET %s = %d, want 501", path, status)
		}
	}
	if status, _ := ts.do(t, http.MethodGet, "/nothing", "alice-token", nil); status != http.StatusNotFound {
		t.Errorf("GET /nothing = %d, want 404", status)
	}
}

func TestMetricsHandler(t *testing.T) {
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "nodelet_config_ok 1\n")
	})
	probes := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "prober_probe_total 1\n")
	})
	ts := startServer(t, &fakeBackend{}, Options{Metrics: metrics, ProbeMetrics: probes}, "alice")
	status, body := ts.do(t, http.MethodGet, "/metrics/probes", "alice-token", nil)
	if status != http.StatusOK || body != "prober_probe_total 1\n" {
		t.Errorf("GET /metrics/probes = %d %q, want 200 and the probe handler's answer", status, body)
	}
	if status, _ := ts.do(t, http.MethodGet, "/metrics/probes", "bob-token", nil); status != http.StatusForbidden {
		t.Errorf("GET /metrics/probes by a user without nodes/metrics = %d, want 403", status)
	}
	status, body = ts.do(t, http.MethodGet, "/metrics", "alice-token", nil)
	if status != http.StatusOK || body != "nodelet_config_ok 1\n" {
		t.Errorf("GET /metrics = %d %q, want 200 and the handler's answer", status, body)
	}
	if status, _ := ts.do(t, http.MethodGet, "/metrics", "bob-token", nil); status != http.StatusForbidden {
		t.Errorf("GET /metrics by a user without nodes/metrics = %d, want 403", status)
	}
	if status, _ := ts.do(t, http.MethodGet, "/metrics/resource", "alice-token", nil); status != http.StatusNotImplemented {
		t.Errorf("GET /metrics/resource = %d, want 501", status)
	}
}

func TestBackendWithoutCapabilities(t *testing.T) {
	type podsOnly struct{ Backend }
	rv := &reviews{allowed: map[string]bool{"alice": true}}
	s, err := New(rv.client(t), podsOnly{newBackend()}, Options{NodeName: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.serve(ctx, ln, nil) }()
	defer func() { cancel(); <-done }()
	ts := &testServer{addr: ln.Addr().String()}
	for _, tc := range []struct{ method, path, want string }{
		{http.MethodGet, "/containerLogs/ns/p1/c", "container logs"},
		{http.MethodPost, "/exec/ns/p1/c?command=ls&output=1", "exec"},
		{http.MethodPost, "/attach/ns/p1/c?output=1", "attach"},
		{http.MethodPost, "/portForward/ns/p1", "port forwarding"},
	} {
		status, body := ts.do(t, tc.method, tc.path, "alice-token", nil)
		if status != http.StatusNotImplemented || !strings.Contains(body, tc.want) {
			t.Errorf("%s %s = %d %q, want 501 naming %s", tc.method, tc.path, status, body, tc.want)
		}
	}
}

func TestNew(t *testing.T) {
	no := false
	tests := []struct {
		name    string
		opts    Options
		wantErr string
	}{
		{"defaults", Options{NodeName: "n"}, ""},
		{"no node name", Options{}, "node name"},
		{"half a key pair", Options{NodeName: "n", TLSCertFile: "c"}, "tlsPrivateKeyFile"},
		{"bad mode", Options{NodeName: "n", AuthorizationMode: "RBAC"}, "authorization mode"},
		{"no authentication", Options{NodeName: "n", WebhookAuthentication: &no}, "no method enabled"},
		{"bad address", Options{NodeName: "n", Address: "host"}, "not an IP"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(fake.NewClientset(), newBackend(), tt.opts)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("New error = %v, want %q", err, tt.wantErr)
			}
		})
	}
	if _, err := New(nil, newBackend(), Options{NodeName: "n"}); err == nil {
		t.Error("New without a client and with webhooks succeeded")
	}
}

func TestRunPortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	s, err := New(fake.NewClientset(), newBackend(), Options{NodeName: "n", Address: "127.0.0.1", Port: int32(port)})
	if err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	err = s.Run(ctx)
	if want := fmt.Sprintf("127.0.0.1:%d", port); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Run on a port in use = %v, want an error naming %s", err, want)
	}
}

func TestProfiling(t *testing.T) {
	ts := startServer(t, &fakeBackend{}, Options{Profiling: true}, "alice")
	status, body := ts.do(t, http.MethodGet, "/debug/pprof/", "alice-token", nil)
	if status != http.StatusOK || !strings.Contains(body, "goroutine") {
		t.Errorf("GET /debug/pprof/ = %d %q, want 200 and the profiles' index", status, body)
	}
	sars := ts.reviews.recorded()
	if len(sars) == 0 || sars[len(sars)-1].ResourceAttributes.Subresource != "proxy" {
		t.Errorf("access reviews = %+v, want nodes/proxy", sars)
	}
	if status, _ := ts.do(t, http.MethodGet, "/debug/pprof/", "bob-token", nil); status != http.StatusForbidden {
		t.Errorf("GET /debug/pprof/ by a user without nodes/proxy = %d, want 403", status)
	}

	off := startServer(t, &fakeBackend{}, Options{}, "alice")
	if status, _ := off.do(t, http.MethodGet, "/debug/pprof/", "alice-token", nil); status != http.StatusNotFound {
		t.Errorf("GET /debug/pprof/ with profiling off = %d, want 404", status)
	}
}
