package probe

import (
	"context"
	"net"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"
)

// execFunc adapts a function to Execer.
type execFunc func(ctx context.Context, container string, argv []string) ([]byte, int, error)

func (f execFunc) ExecSync(ctx context.Context, container string, argv []string) ([]byte, int, error) {
	return f(ctx, container, argv)
}

// scriptExec answers exec calls with a scripted sequence of exit codes (the
// last repeats); a code of -1 is an error to run the command.
type scriptExec struct {
	mu    sync.Mutex
	codes []int
	calls int
}

func (s *scriptExec) ExecSync(ctx context.Context, container string, argv []string) ([]byte, int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	code := s.codes[len(s.codes)-1]
	if s.calls < len(s.codes) {
		code = s.codes[s.calls]
	}
	s.calls++
	if code == -1 {
		return nil, 0, errTest
	}
	return []byte("attempt " + strconv.Itoa(s.calls)), code, nil
}

func (s *scriptExec) Calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

type testError string

func (e testError) Error() string { return string(e) }

const errTest = testError("container not running")

// waitFor polls cond until it holds or a deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// hostPort splits a test server's URL into host and port.
func hostPort(t *testing.T, srv *httptest.Server) (string, int) {
	t.Helper()
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return host, n
}

// closedPort returns a local port nothing listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	return port
}
