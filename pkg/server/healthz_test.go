package server

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestHealthz(t *testing.T) {
	var unhealthy atomic.Pointer[error]
	h := NewHealthz("127.0.0.1:0", func() error {
		if err := unhealthy.Load(); err != nil {
			return *err
		}
		return nil
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.serve(ctx, ln) }()
	base := "http://" + ln.Addr().String()

	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}

	notYet := errors.New("3 of 10 nodes registered")
	unhealthy.Store(&notYet)
	if code, body := get("/healthz"); code != http.StatusInternalServerError || !strings.Contains(body, "3 of 10 nodes registered") {
		t.Errorf("GET /healthz while unhealthy = %d %q, want 500 naming the reason", code, body)
	}
	unhealthy.Store(nil)
	if code, body := get("/healthz"); code != http.StatusOK || body != "ok" {
		t.Errorf("GET /healthz = %d %q, want 200 ok", code, body)
	}
	for _, path := range []string{"/metrics", "/pods", "/"} {
		if code, _ := get(path); code != http.StatusNotFound {
			t.Errorf("GET %s = %d, want 404: healthz serves nothing else", path, code)
		}
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve after cancel = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("healthz did not stop after its context ended")
	}
}

func TestHealthzListenError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	err = NewHealthz(ln.Addr().String(), func() error { return nil }).Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "healthz: listen on "+ln.Addr().String()) {
		t.Errorf("Run on a port in use = %v, want a listen error naming the address", err)
	}
}
