package server

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	utilexec "k8s.io/client-go/util/exec"
	"k8s.io/klog/v2/ktesting"

	"github.com/nodelet/nodelet/pkg/provider"
)

func (ts *testServer) restConfig(token string) *rest.Config {
	return &rest.Config{Host: "https://" + ts.addr, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
}

func (ts *testServer) url(t *testing.T, pathAndQuery string) *url.URL {
	t.Helper()
	u, err := url.Parse("https://" + ts.addr + pathAndQuery)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func TestContainerLogsOptions(t *testing.T) {
	since := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		query      string
		want       provider.ContainerLogOpts
		wantStatus int
		wantBody   string
	}{
		{query: "", want: provider.ContainerLogOpts{}, wantStatus: 200, wantBody: "log of ns/p1/c\n"},
		{
			query:      "?follow=true&previous=true&timestamps=true&tailLines=10&limitBytes=5&sinceSeconds=60",
			want:       provider.ContainerLogOpts{Follow: true, Previous: true, Timestamps: true, Tail: 10, LimitBytes: 5, SinceSecs: 60},
			wantStatus: 200, wantBody: "log o",
		},
		{query: "?sinceTime=2025-01-02T03:04:05Z", want: provider.ContainerLogOpts{SinceTime: since}, wantStatus: 200},
		{query: "?tail=7", want: provider.ContainerLogOpts{Tail: 7}, wantStatus: 200},
		{query: "?tail=all", want: provider.ContainerLogOpts{}, wantStatus: 200},
		{query: "?stream=All", want: provider.ContainerLogOpts{}, wantStatus: 200},
		{query: "?sinceSeconds=5&sinceTime=2025-01-02T03:04:05Z", wantStatus: 400},
		{query: "?tailLines=-1", wantStatus: 400},
		{query: "?limitBytes=0", wantStatus: 400},
		{query: "?sinceSeconds=0", wantStatus: 400},
		{query: "?stream=Stdout", wantStatus: 400},
		{query: "?tailLines=ten", wantStatus: 400},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			b := newBackend()
			ts := startServer(t, b, Options{}, "alice")
			status, body := ts.do(t, http.MethodGet, "/containerLogs/ns/p1/c"+tt.query, "alice-token", nil)
			if status != tt.wantStatus {
				t.Fatalf("status = %d %q, want %d", status, body, tt.wantStatus)
			}
			if status != 200 {
				if len(b.logOpts) != 0 {
					t.Errorf("provider asked for logs of a bad request")
				}
				return
			}
			if tt.wantBody != "" && body != tt.wantBody {
				t.Errorf("body = %q, want %q", body, tt.wantBody)
			}
			if len(b.logOpts) != 1 || !b.logOpts[0].SinceTime.Equal(tt.want.SinceTime) {
				t.Fatalf("provider log options = %+v, want %+v", b.logOpts, tt.want)
			}
			got := b.logOpts[0]
			got.SinceTime, tt.want.SinceTime = time.Time{}, time.Time{}
			if got != tt.want {
				t.Errorf("provider log options = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestContainerLogsZeroTail(t *testing.T) {
	b := newBackend()
	ts := startServer(t, b, Options{}, "alice")
	if status, body := ts.do(t, http.MethodGet, "/containerLogs/ns/p1/c?tailLines=0", "alice-token", nil); status != 200 || body != "" {
		t.Errorf("tailLines=0 = %d %q, want 200 and no lines", status, body)
	}
}

func TestContainerLogsNotFound(t *testing.T) {
	ts := startServer(t, newBackend(), Options{}, "alice")
	for _, path := range []string{"/containerLogs/ns/p1/missing", "/containerLogs/ns/nope/c"} {
		if status, body := ts.do(t, http.MethodGet, path, "alice-token", nil); status != http.StatusNotFound {
			t.Errorf("GET %s = %d %q, want 404", path, status, body)
		}
	}
}

func TestContainerLogsFollowStreams(t *testing.T) {
	b := newBackend()
	pr, pw := io.Pipe()
	b.logs = func() io.ReadCloser { return pr }
	ts := startServer(t, b, Options{}, "alice")

	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+ts.addr+"/containerLogs/ns/p1/c?follow=true", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer alice-token")
	client := &http.Client{Transport: ts.restTransport(t)}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	for _, line := range []string{"first\n", "second\n"} {
		// Each line must arrive while the log is still open: it was flushed.
		if _, err := io.WriteString(pw, line); err != nil {
			t.Fatal(err)
		}
		got, err := r.ReadString('\n')
		if err != nil || got != line {
			t.Fatalf("read %q, %v; want %q", got, err, line)
		}
	}
	// The client going away closes the provider's reader: writes keep
	// being taken (the connection's buffers) only until the server sees it.
	cancel()
	written := make(chan error, 1)
	go func() {
		chunk := strings.Repeat("x", 64<<10)
		for {
			if _, err := io.WriteString(pw, chunk); err != nil {
				written <- err
				return
			}
		}
	}()
	select {
	case err := <-written:
		if !errors.Is(err, io.ErrClosedPipe) {
			t.Errorf("write after the client left = %v, want %v", err, io.ErrClosedPipe)
		}
	case <-time.After(30 * time.Second):
		pw.Close()
		t.Error("the provider's reader is still open 30s after the client left")
	}
}

func (ts *testServer) restTransport(t *testing.T) http.RoundTripper {
	t.Helper()
	rt, err := rest.TransportFor(ts.restConfig(""))
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

func TestExecSPDY(t *testing.T) {
	b := newBackend()
	ts := startServer(t, b, Options{}, "alice")
	_, ctx := ktesting.NewTestContext(t)

	ex, err := remotecommand.NewSPDYExecutor(ts.restConfig("alice-token"), http.MethodPost,
		ts.url(t, "/exec/ns/p1/c?command=echo&command=arg&input=1&output=1&error=1"))
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: strings.NewReader("hello"), Stdout: &stdout, Stderr: &stderr})
	if err != nil {
		t.Fatalf("exec: %v", err)
	}
	if stdout.String() != "ns/p1/c:hello" || stderr.String() != "to stderr" {
		t.Errorf("stdout %q stderr %q, want %q and %q", stdout.String(), stderr.String(), "ns/p1/c:hello", "to stderr")
	}
	if len(b.execCmds) != 1 || strings.Join(b.execCmds[0], " ") != "echo arg" {
		t.Errorf("commands run = %q, want [echo arg]", b.execCmds)
	}
}

func TestExecExitCode(t *testing.T) {
	ts := startServer(t, newBackend(), Options{}, "alice")
	_, ctx := ktesting.NewTestContext(t)
	ex, err := remotecommand.NewSPDYExecutor(ts.restConfig("alice-token"), http.MethodPost,
		ts.url(t, "/exec/ns/p1/uid-1/c?command=fail&output=1&error=1"))
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: io.Discard, Stderr: &stderr})
	var exitErr utilexec.CodeExitError
	if !errors.As(err, &exitErr) || exitErr.Code != 3 {
		t.Errorf("exec error = %#v, want exit code 3", err)
	}
	if stderr.String() != "failing\n" {
		t.Errorf("stderr = %q", stderr.String())
	}
}

func TestExecWebSocket(t *testing.T) {
	ts := startServer(t, newBackend(), Options{}, "alice")
	_, ctx := ktesting.NewTestContext(t)
	ex, err := remotecommand.NewWebSocketExecutorForProtocols(ts.restConfig("alice-token"), http.MethodGet,
		ts.url(t, "/exec/ns/p1/c?command=echo&output=1&error=1").String(), "v4.channel.k8s.io")
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr}); err != nil {
		t.Fatalf("exec: %v", err)
	}
	if stdout.String() != "ns/p1/c:" || stderr.String() != "to stderr" {
		t.Errorf("stdout %q stderr %q", stdout.String(), stderr.String())
	}
}

func TestExecUnauthorizedStream(t *testing.T) {
	ts := startServer(t, newBackend(), Options{}, "alice")
	_, ctx := ktesting.NewTestContext(t)
	ex, err := remotecommand.NewSPDYExecutor(ts.restConfig("bob-token"), http.MethodPost,
		ts.url(t, "/exec/ns/p1/c?command=echo&output=1"))
	if err != nil {
		t.Fatal(err)
	}
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: io.Discard})
	if err == nil || !strings.Contains(err.Error(), "Forbidden") {
		t.Errorf("exec as bob = %v, want Forbidden", err)
	}
}

func TestPortForwardSPDY(t *testing.T) {
	ts := startServer(t, newBackend(), Options{}, "alice")
	cfg := ts.restConfig("alice-token")
	transport, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, ts.url(t, "/portForward/ns/p1"))
	checkPortForward(t, dialer)
}

func TestPortForwardTunneledInWebSocket(t *testing.T) {
	ts := startServer(t, newBackend(), Options{}, "alice")
	dialer, err := portforward.NewSPDYOverWebsocketDialer(ts.url(t, "/portForward/ns/p1"), ts.restConfig("alice-token"))
	if err != nil {
		t.Fatal(err)
	}
	checkPortForward(t, dialer)
}

// checkPortForward forwards a local port to port 8080 of the pod and checks
// that two connections are echoed.
func checkPortForward(t *testing.T, dialer httpstream.Dialer) {
	t.Helper()
	stop, ready := make(chan struct{}), make(chan struct{})
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{"0:8080"}, stop, ready, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- fw.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("port forward ended before it was ready: %v", err)
	}
	defer func() {
		close(stop)
		if err := <-done; err != nil {
			t.Errorf("ForwardPorts: %v", err)
		}
	}()
	ports, err := fw.GetPorts()
	if err != nil || len(ports) != 1 {
		t.Fatalf("ports %v, %v", ports, err)
	}
	for i := range 2 {
		conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", ports[0].Local))
		if err != nil {
			t.Fatal(err)
		}
		msg := fmt.Sprintf("ping %d\n", i)
		if _, err := io.WriteString(conn, msg); err != nil {
			t.Fatal(err)
		}
		got, err := bufio.NewReader(conn).ReadString('\n')
		conn.Close()
		if want := "8080:" + msg; err != nil || got != want {
			t.Errorf("connection %d read %q, %v; want %q", i, got, err, want)
		}
	}
}

func TestShutdownEndsStreams(t *testing.T) {
	b := newBackend()
	ts := startServer(t, b, Options{}, "alice")
	_, ctx := ktesting.NewTestContext(t)
	ex, err := remotecommand.NewSPDYExecutor(ts.restConfig("alice-token"), http.MethodPost,
		ts.url(t, "/exec/ns/p1/c?command=block&input=1&output=1"))
	if err != nil {
		t.Fatal(err)
	}
	stdinR, stdinW := io.Pipe()
	defer stdinW.Close()
	ended := make(chan error, 1)
	go func() {
		ended <- ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdinR, Stdout: io.Discard})
	}()
	// Wait for the session to reach the provider.
	deadline := time.Now().Add(30 * time.Second)
	for {
		b.mu.Lock()
		started := len(b.execCmds) == 1
		b.mu.Unlock()
		if started {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("exec never reached the provider")
		}
		time.Sleep(10 * time.Millisecond)
	}
	ts.cancel()
	select {
	case <-ended:
	case <-time.After(30 * time.Second):
		t.Fatal("the exec session outlived the server")
	}
}

func TestExecWebSocketV5(t *testing.T) {
	b := newBackend()
	ts := startServer(t, b, Options{}, "alice")
	_, ctx := ktesting.NewTestContext(t)
	// As kubectl 1.36 does: WebSocket (v5.channel.k8s.io, which closes
	// stdin) first, SPDY if the upgrade fails.
	u := ts.url(t, "/exec/ns/p1/c?command=echo&input=1&output=1&error=1")
	ws, err := remotecommand.NewWebSocketExecutor(ts.restConfig("alice-token"), http.MethodGet, u.String())
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if err := ws.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: strings.NewReader("over websocket"), Stdout: &stdout, Stderr: &stderr}); err != nil {
		t.Fatalf("exec: %v", err)
	}
	if stdout.String() != "ns/p1/c:over websocket" || stderr.String() != "to stderr" {
		t.Errorf("stdout %q stderr %q", stdout.String(), stderr.String())
	}

	fail, err := remotecommand.NewWebSocketExecutor(ts.restConfig("alice-token"), http.MethodGet,
		ts.url(t, "/exec/ns/p1/c?command=fail&output=1&error=1").String())
	if err != nil {
		t.Fatal(err)
	}
	err = fail.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: io.Discard, Stderr: io.Discard})
	var exitErr utilexec.CodeExitError
	if !errors.As(err, &exitErr) || exitErr.Code != 3 {
		t.Errorf("exec error over websocket = %#v, want exit code 3", err)
	}
}
