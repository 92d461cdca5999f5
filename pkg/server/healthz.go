package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"k8s.io/klog/v2"
)

// Healthz is the agent's unauthenticated health endpoint, apart from the
// kubelet API as the kubelet's healthz port is: plain HTTP, GET /healthz
// only, for liveness and readiness probes. It answers 200 "ok" while check
// returns nil and 500 with check's error otherwise. It serves nothing else
// and reads nothing but what check tells it.
type Healthz struct {
	addr  string
	check func() error
}

// NewHealthz serves check at addr ("127.0.0.1:10248"; port 0 picks one).
func NewHealthz(addr string, check func() error) *Healthz {
	return &Healthz{addr: addr, check: check}
}

// Handler is the /healthz handler alone.
func (h *Healthz) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if err := h.check(); err != nil {
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprintf(w, "unhealthy: %v\n", err)
			return
		}
		io.WriteString(w, "ok")
	})
	return mux
}

// Run listens and serves until ctx is done.
func (h *Healthz) Run(ctx context.Context) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", h.addr)
	if err != nil {
		return fmt.Errorf("healthz: listen on %s: %w", h.addr, err)
	}
	return h.serve(ctx, ln)
}

func (h *Healthz) serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           h.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		WriteTimeout:      10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	klog.FromContext(ctx).Info("Serving healthz", "address", ln.Addr().String())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("healthz: %w", err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("healthz: %w", err)
	}
	return nil
}
