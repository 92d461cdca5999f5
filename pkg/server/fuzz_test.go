package server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/cri-streaming/pkg/streaming/portforward"
	"k8s.io/streaming/pkg/httpstream/wsstream"

	"github.com/nodelet/nodelet/internal/fuzzcheck"
	"github.com/nodelet/nodelet/pkg/provider"
)

// FuzzLogOptions parses arbitrary container log queries. A query that
// parses gives options within bounds (no negative count, a since that
// fits a time.Duration, at most one of sinceSeconds and sinceTime); the
// options, written back as a query, parse to the same options; and parsing
// allocates in proportion to the query.
func FuzzLogOptions(f *testing.F) {
	for _, seed := range []string{
		"",
		"follow=true&previous=1&timestamps=T&tailLines=10&limitBytes=5&sinceSeconds=60",
		"tail=7",
		"tail=all",
		"tailLines=0&follow=true",
		"tailLines=&tail=3",
		"sinceTime=2025-01-02T03:04:05.123456789%2B01:00",
		"sinceSeconds=5&sinceTime=2025-01-02T03:04:05Z",
		"limitBytes=0",
		"tailLines=-1&limitBytes=x&follow=maybe",
		"stream=All",
		"stream=Stdout",
		"tailLines=1;tailLines=2",
		"%zz=1&follow",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, query string) {
		values, _ := url.ParseQuery(query) // as r.URL.Query(): what parses
		var (
			req logRequest
			err error
		)
		if n := fuzzcheck.Allocated(func() { req, err = logOptions(values) }); n > fuzzcheck.Slack+64*uint64(len(query)) {
			t.Errorf("parsing a query of %d bytes allocated %d bytes", len(query), n)
		}
		if err != nil {
			return
		}
		checkLogRequest(t, req)

		again, err := logOptions(logQuery(req))
		if err != nil {
			t.Fatalf("options %+v written as %q do not parse: %v", req, logQuery(req).Encode(), err)
		}
		if !again.SinceTime.Equal(req.SinceTime) {
			t.Fatalf("sinceTime %v written as %q parses as %v", req.SinceTime, logQuery(req).Encode(), again.SinceTime)
		}
		again.SinceTime = req.SinceTime
		if again != req {
			t.Fatalf("options %+v written as %q parse as %+v", req, logQuery(req).Encode(), again)
		}
	})
}

// checkLogRequest fails t unless req is within the bounds the providers
// rely on.
func checkLogRequest(t *testing.T, req logRequest) {
	t.Helper()
	if req.Tail < 0 || req.LimitBytes < 0 || req.SinceSecs < 0 {
		t.Errorf("negative count in %+v", req)
	}
	if req.zeroTail && req.Tail != 0 {
		t.Errorf("tailLines=0 with Tail %d", req.Tail)
	}
	if req.SinceSecs > 0 && !req.SinceTime.IsZero() {
		t.Errorf("both sinceSeconds and sinceTime in %+v", req)
	}
	// Providers subtract SinceSecs seconds from now: it must not wrap.
	if d := time.Duration(req.SinceSecs) * time.Second; int(d/time.Second) != req.SinceSecs {
		t.Errorf("sinceSeconds %d overflows a time.Duration (%v)", req.SinceSecs, d)
	}
}

// logQuery writes req as the query that asks for it.
func logQuery(req logRequest) url.Values {
	q := url.Values{}
	for name, set := range map[string]bool{"follow": req.Follow, "previous": req.Previous, "timestamps": req.Timestamps} {
		if set {
			q.Set(name, "true")
		}
	}
	if req.Tail > 0 || req.zeroTail {
		q.Set("tailLines", strconv.Itoa(req.Tail))
	}
	if req.LimitBytes > 0 {
		q.Set("limitBytes", strconv.Itoa(req.LimitBytes))
	}
	if req.SinceSecs > 0 {
		q.Set("sinceSeconds", strconv.Itoa(req.SinceSecs))
	}
	if !req.SinceTime.IsZero() {
		q.Set("sinceTime", req.SinceTime.Format(time.RFC3339Nano))
	}
	return q
}

// FuzzRequest sends arbitrary requests (method, target and headers, as the
// server reads them off a connection) through the authorization filter to
// the kubelet API's routes. Nothing may panic; a request reaches the
// provider about a pod only after it was authorized against that pod's
// node, as nodes/proxy; log options and commands reach the provider as the
// query asked for them, within bounds; and the answer is not larger than a
// constant plus the request.
//
// WebSocket requests are not served (their handlers hijack the connection,
// which a recorder has not): only the ports a WebSocket port-forward asks
// for in its query are checked.
func FuzzRequest(f *testing.F) {
	for _, seed := range [][3]string{
		{"GET", "/containerLogs/ns/p1/c?tailLines=3&limitBytes=4", ""},
		{"GET", "/containerLogs/ns/p2/c?sinceSeconds=10&sinceTime=2025-01-02T03:04:05Z", ""},
		{"GET", "/containerLogs/ns/p1%2F..%2Fp2/c", ""},
		{"GET", "/containerLogs/ns/p1/../p2/c", ""},
		{"GET", "/pods/../containerLogs/ns/p2/c", ""},
		{"GET", "//containerLogs/ns/p2/c", ""},
		{"GET", "/containerLogs/ns%2Fp2/p1/c", ""},
		{"POST", "/run/ns/p2/c?cmd=echo+hello++world", ""},
		{"POST", "/run/ns/p1/uid-1/c?cmd=", ""},
		{"POST", "/exec/ns/p1/c?command=sh&command=-c&command=true&stdout=1", "Connection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io"},
		{"GET", "/exec/ns/p2/c?stdin=1", ""},
		{"POST", "/attach/ns/p1/uid-1/c?stdout=1&tty=1&stderr=1", "Connection: Upgrade\r\nUpgrade: SPDY/3.1"},
		{"POST", "/portForward/ns/p2?port=80,0", "Connection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: portforward.k8s.io"},
		{"GET", "/portForward/ns/p1?port=80", "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-Websocket-Protocol: v4.channel.k8s.io"},
		{"GET", "/portForward/ns/p1?port=80,65535&port=0&port=70000", "Connection: Upgrade\r\nUpgrade: websocket"},
		{"GET", "/pods", ""},
		{"HEAD", "/healthz", ""},
		{"DELETE", "/exec/ns/p1/c", ""},
		{"GET", "/metrics/cadvisor", ""},
		{"POST", "/exec/ns/p1/c?stdout=1&command=ls", "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 9"},
		{"GET", "*", ""},
		{"GET", "http://other/containerLogs/ns/p1/c", ""},
	} {
		f.Add(seed[0], seed[1], seed[2])
	}
	f.Fuzz(func(t *testing.T, method, target, header string) {
		raw := method + " " + target + " HTTP/1.1\r\nHost: node-a\r\n" + header + "\r\n\r\n"
		r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
		if err != nil {
			return
		}
		if wsstream.IsWebSocketRequest(r) {
			// The ports of a WebSocket port-forward are in the query.
			if opts, err := portforward.NewV4Options(r); err == nil {
				if len(opts.Ports) > len(raw) {
					t.Errorf("%d ports from a request of %d bytes", len(opts.Ports), len(raw))
				}
				for _, p := range opts.Ports {
					if p < 1 || p > 65535 {
						t.Errorf("port %d from query %q", p, r.URL.RawQuery)
					}
				}
			}
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r = r.WithContext(ctx)

		backend := &fuzzBackend{nodes: map[string]string{"ns/p1": "node-a", "ns/p2": "node-b"}}
		s, err := New(nil, backend, Options{NodeName: "node-a", AuthorizationMode: AuthorizationModeAlwaysAllow, WebhookAuthentication: new(bool), Anonymous: true})
		if err != nil {
			t.Fatal(err)
		}
		authz := &recordingAuthorizer{}
		a := &auth{
			authn: authenticator.RequestFunc(func(*http.Request) (*authenticator.Response, bool, error) {
				return &authenticator.Response{User: &user.DefaultInfo{Name: "fuzz"}}, true, nil
			}),
			authz: authz, nodeName: "node-a", pods: backend,
		}
		w := httptest.NewRecorder()
		a.filter(s.routes()).ServeHTTP(w, r)

		if limit := 64<<10 + 4*len(raw); w.Body.Len() > limit {
			t.Errorf("answer of %d bytes to a request of %d", w.Body.Len(), len(raw))
		}
		for _, c := range backend.calls {
			node, known := backend.NodeForPod(c.namespace, c.pod)
			if !known {
				t.Errorf("%s reached the provider for pod %s/%s, which does not exist", c.what, c.namespace, c.pod)
			}
			if len(authz.attrs) != 1 || authz.attrs[0].Name != node || authz.attrs[0].Subresource != "proxy" {
				t.Errorf("%s of pod %s/%s on %s reached the provider authorized as %v", c.what, c.namespace, c.pod, node, authz.attrs)
			}
			switch c.what {
			case "logs":
				want, err := logOptions(r.URL.Query())
				if err != nil || want.ContainerLogOpts != c.logs {
					t.Errorf("logs asked with %+v; the query %q gives %+v, %v", c.logs, r.URL.RawQuery, want, err)
				}
				checkLogRequest(t, logRequest{ContainerLogOpts: c.logs})
			case "command":
				if len(c.cmd) == 0 {
					t.Errorf("%s asked to run no command", r.URL.Path)
				}
				if want := strings.Fields(r.URL.Query().Get("cmd")); strings.HasPrefix(r.URL.Path, "/run/") && !reflect.DeepEqual(c.cmd, want) {
					t.Errorf("run asked with %q; the query %q gives %q", c.cmd, r.URL.RawQuery, want)
				}
			}
		}
	})
}

// recordingAuthorizer allows everything and records what it was asked.
type recordingAuthorizer struct {
	mu    sync.Mutex
	attrs []authorizer.AttributesRecord
}

func (a *recordingAuthorizer) Authorize(_ context.Context, attr authorizer.Attributes) (authorizer.Decision, string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.attrs = append(a.attrs, authorizer.AttributesRecord{
		Name: attr.GetName(), Subresource: attr.GetSubresource(), Verb: attr.GetVerb(), Path: attr.GetPath(),
	})
	return authorizer.DecisionAllow, "", nil
}

// fuzzBackend is a provider that records every call about a pod and
// answers at once.
type fuzzBackend struct {
	nodes map[string]string // namespace/name → node

	mu    sync.Mutex
	calls []backendCall
}

type backendCall struct {
	what           string
	namespace, pod string
	logs           provider.ContainerLogOpts
	cmd            []string
}

func (b *fuzzBackend) record(c backendCall) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls = append(b.calls, c)
}

func (b *fuzzBackend) GetPods(context.Context) ([]*corev1.Pod, error) { return nil, nil }

func (b *fuzzBackend) NodeForPod(namespace, name string) (string, bool) {
	n, ok := b.nodes[namespace+"/"+name]
	return n, ok
}

func (b *fuzzBackend) GetContainerLogs(_ context.Context, namespace, pod, _ string, opts provider.ContainerLogOpts) (io.ReadCloser, error) {
	b.record(backendCall{what: "logs", namespace: namespace, pod: pod, logs: opts})
	return io.NopCloser(strings.NewReader("a log line\n")), nil
}

func (b *fuzzBackend) RunInContainer(_ context.Context, namespace, pod, _ string, cmd []string, sio provider.AttachIO) error {
	b.record(backendCall{what: "command", namespace: namespace, pod: pod, cmd: cmd})
	fmt.Fprintln(sio.Stdout(), "ran")
	return nil
}

func (b *fuzzBackend) AttachToContainer(_ context.Context, namespace, pod, _ string, _ provider.AttachIO) error {
	b.record(backendCall{what: "attach", namespace: namespace, pod: pod})
	return nil
}

func (b *fuzzBackend) PortForward(_ context.Context, namespace, pod string, _ int32, stream io.ReadWriteCloser) error {
	b.record(backendCall{what: "portForward", namespace: namespace, pod: pod})
	return stream.Close()
}
