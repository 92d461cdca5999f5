package server

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// loopback is an in-process HTTP server, reachable only through its
// transport, that serves the streaming endpoints over SPDY. The handlers
// that turn WebSocket requests into SPDY (exec and attach with the
// v5.channel.k8s.io protocol, port-forward tunnelled in WebSocket) proxy to
// it, the way the kubelet proxies to its runtime's streaming server. Its
// requests were authorized by the public server before they were proxied.
type loopback struct {
	ln        *pipeListener
	srv       *http.Server
	transport *http.Transport
}

// loopbackHost is the host of loopback URLs; it is never resolved.
const loopbackHost = "nodelet-streaming.invalid"

func newLoopback(ctx context.Context, handler http.Handler) *loopback {
	ln := &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
	l := &loopback{
		ln: ln,
		srv: &http.Server{
			Handler:           handler,
			ReadHeaderTimeout: 30 * time.Second,
			BaseContext:       func(net.Listener) context.Context { return ctx },
		},
		transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return ln.dial(ctx) },
			Proxy:       nil,
		},
	}
	go func() {
		if err := l.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.FromContext(ctx).Error(err, "Streaming loopback stopped")
		}
	}()
	return l
}

// url is the loopback URL of the path and query of r.
func (l *loopback) url(r *http.Request) *url.URL {
	return &url.URL{Scheme: "http", Host: loopbackHost, Path: r.URL.Path, RawQuery: r.URL.RawQuery}
}

func (l *loopback) close() {
	l.srv.Close()
	l.transport.CloseIdleConnections()
}

// pipeListener hands out in-memory connections made by dial.
type pipeListener struct {
	conns     chan net.Conn
	done      chan struct{}
	closeOnce sync.Once
}

func (p *pipeListener) dial(ctx context.Context) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case p.conns <- server:
		return client, nil
	case <-p.done:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (p *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-p.conns:
		return c, nil
	case <-p.done:
		return nil, net.ErrClosed
	}
}

func (p *pipeListener) Close() error {
	p.closeOnce.Do(func() { close(p.done) })
	return nil
}

func (p *pipeListener) Addr() net.Addr { return pipeAddr{} }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return loopbackHost }
