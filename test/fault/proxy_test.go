package fault

import (
	"bufio"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// echoServer answers every line with the same line.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); c.Close() }()
		}
	}()
	return ln.Addr().String()
}

type echoClient struct {
	conn net.Conn
	r    *bufio.Reader
}

func dialEcho(t *testing.T, addr string) *echoClient {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &echoClient{conn: c, r: bufio.NewReader(c)}
}

// roundTrip sends a line and waits up to wait for its echo.
func (c *echoClient) roundTrip(line string, wait time.Duration) (string, error) {
	_ = c.conn.SetDeadline(time.Now().Add(wait))
	if _, err := c.conn.Write([]byte(line + "\n")); err != nil {
		return "", err
	}
	got, err := c.r.ReadString('\n')
	return got, err
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestProxyPauseResume(t *testing.T) {
	p, err := NewProxy(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := dialEcho(t, p.Addr())
	if got, err := c.roundTrip("a", 5*time.Second); err != nil || got != "a\n" {
		t.Fatalf("before pause: %q, %v", got, err)
	}
	p.Pause()
	if got, err := c.roundTrip("b", 300*time.Millisecond); !isTimeout(err) {
		t.Fatalf("paused: got %q, %v; want a timeout", got, err)
	}
	p.Resume()
	_ = c.conn.SetDeadline(time.Now().Add(5 * time.Second))
	if got, err := c.r.ReadString('\n'); err != nil || got != "b\n" {
		t.Fatalf("after resume, the held line: %q, %v", got, err)
	}
}

func TestProxyCutHeal(t *testing.T) {
	p, err := NewProxy(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	old := dialEcho(t, p.Addr())
	if _, err := old.roundTrip("a", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Cut()
	if _, err := old.roundTrip("b", 300*time.Millisecond); !isTimeout(err) {
		t.Fatalf("cut, old connection: %v; want a timeout", err)
	}
	during := dialEcho(t, p.Addr()) // accepted, then silence
	if _, err := during.roundTrip("c", 300*time.Millisecond); !isTimeout(err) {
		t.Fatalf("cut, new connection: %v; want a timeout", err)
	}
	p.Heal()
	for _, c := range []*echoClient{old, during} {
		if got, err := c.roundTrip("d", 5*time.Second); err == nil {
			t.Fatalf("a connection that lived through the cut still works after it: %q", got)
		}
	}
	if got, err := dialEcho(t, p.Addr()).roundTrip("e", 5*time.Second); err != nil || got != "e\n" {
		t.Fatalf("healed, new connection: %q, %v", got, err)
	}
}

func TestProxyReset(t *testing.T) {
	p, err := NewProxy(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := dialEcho(t, p.Addr())
	if _, err := c.roundTrip("a", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Reset()
	if _, err := c.roundTrip("b", 5*time.Second); err == nil || isTimeout(err) {
		t.Fatalf("reset: %v; want a connection error", err)
	}
	// The reset may reach the client before its connect returns, so the
	// error may come from the dial as well as from the first round trip.
	if conn, err := net.Dial("tcp", p.Addr()); err == nil {
		c := &echoClient{conn: conn, r: bufio.NewReader(conn)}
		_, err = c.roundTrip("c", 5*time.Second)
		conn.Close()
		if err == nil || isTimeout(err) {
			t.Fatalf("new connection while resetting: %v; want a connection error", err)
		}
	} else if isTimeout(err) {
		t.Fatalf("dialing while resetting: %v; want a connection error", err)
	}
	p.Heal()
	if got, err := dialEcho(t, p.Addr()).roundTrip("d", 5*time.Second); err != nil || got != "d\n" {
		t.Fatalf("healed: %q, %v", got, err)
	}
}

func TestProxySlow(t *testing.T) {
	p, err := NewProxy(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := dialEcho(t, p.Addr())
	p.Slow(time.Second)
	start := time.Now()
	if got, err := c.roundTrip("a", 10*time.Second); err != nil || got != "a\n" {
		t.Fatalf("slow: %q, %v", got, err)
	}
	if took := time.Since(start); took < time.Second {
		t.Fatalf("a round trip through a proxy slowed by 1s took %s", took)
	}
	p.Slow(0)
	if got, err := c.roundTrip("b", 900*time.Millisecond); err != nil || got != "b\n" {
		t.Fatalf("no longer slow: %q, %v", got, err)
	}
}
