package nodeshutdown

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"k8s.io/klog/v2"
)

// SocketName is the agent's control socket under its root directory, where
// `nodelet shutdown` asks it to shut the node down.
const SocketName = "nodelet.sock"

// The last line of the answer says how the shutdown ended.
const (
	doneLine   = "done"
	failedLine = "failed: "
)

// Socket serves Shutdown on a Unix socket that only the agent's user may
// use: a POST to /shutdown shuts the node down and streams the progress, a
// line per step, ending with "done" or "failed: <why>".
type Socket struct {
	Path    string
	Manager *Manager
}

// Run serves until ctx ends; a socket left by an earlier agent is replaced.
func (s *Socket) Run(ctx context.Context) error {
	if err := os.Remove(s.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("control socket %s: %w", s.Path, err)
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "unix", s.Path)
	if err != nil {
		return fmt.Errorf("control socket: %w", err)
	}
	defer os.Remove(s.Path)
	if err := os.Chmod(s.Path, 0o600); err != nil {
		ln.Close()
		return fmt.Errorf("control socket %s: %w", s.Path, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /shutdown", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		flusher, _ := w.(http.Flusher)
		line := func(text string) {
			fmt.Fprintln(w, text)
			if flusher != nil {
				flusher.Flush()
			}
		}
		// The shutdown goes on if the caller goes away: the host is
		// going down either way.
		shutdownCtx := klog.NewContext(context.WithoutCancel(ctx), klog.FromContext(ctx))
		if err := s.Manager.Shutdown(shutdownCtx, line); err != nil {
			line(failedLine + err.Error())
			return
		}
		line(doneLine)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	stop := context.AfterFunc(ctx, func() {
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	})
	defer stop()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("control socket: %w", err)
	}
	return nil
}

// Request asks the agent listening on the socket at path to shut the node
// down, copies its progress to out, and returns once the shutdown is done
// (an error if it failed or the agent could not be reached).
func Request(ctx context.Context, path string, out io.Writer) error {
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://nodelet/shutdown", nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("reach the agent at %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("agent at %s: %s", path, resp.Status)
	}
	last := ""
	scanner := bufio.NewScanner(resp.Body)
	for scanner.Scan() {
		last = scanner.Text()
		fmt.Fprintln(out, last)
	}
	if err := scanner.Err(); err != nil {
		return fmt.Errorf("agent at %s: %w", path, err)
	}
	switch {
	case last == doneLine:
		return nil
	case strings.HasPrefix(last, failedLine):
		return errors.New(strings.TrimPrefix(last, failedLine))
	default:
		return fmt.Errorf("agent at %s stopped answering before the shutdown was done", path)
	}
}
