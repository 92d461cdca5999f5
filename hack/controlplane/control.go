package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"
)

// The control socket of "up" lets a test stop, kill and start the
// control plane's servers one at a time, keeping their data: the fault
// injection of nodelet's reliability tests (etcd or the apiserver going
// away and coming back under a running cluster).
//
//	GET  /components                       the servers, their PIDs
//	POST /components/{name}/stop[?signal=KILL]  SIGTERM (or SIGKILL) and wait
//	POST /components/{name}/start          start again and wait until ready
const controlSocketName = "control.sock"

// serveControl serves g's control socket in dir until ctx ends.
func serveControl(ctx context.Context, dir string, g *group, readyTimeout time.Duration) error {
	path := filepath.Join(dir, controlSocketName)
	_ = os.Remove(path) // left by an "up" that was killed
	ln, err := net.Listen("unix", path)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /components", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(g.states())
	})
	mux.HandleFunc("POST /components/{name}/stop", func(w http.ResponseWriter, r *http.Request) {
		sig := syscall.SIGTERM
		switch s := r.URL.Query().Get("signal"); s {
		case "", "TERM":
		case "KILL":
			sig = syscall.SIGKILL
		default:
			http.Error(w, fmt.Sprintf("signal %q: want TERM or KILL", s), http.StatusBadRequest)
			return
		}
		answer(w, g.stopChild(r.PathValue("name"), sig))
	})
	mux.HandleFunc("POST /components/{name}/start", func(w http.ResponseWriter, r *http.Request) {
		answer(w, g.startChild(r.Context(), r.PathValue("name"), readyTimeout))
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
		_ = os.Remove(path)
	}()
	go func() { _ = srv.Serve(ln) }()
	return nil
}

func answer(w http.ResponseWriter, err error) {
	if err != nil {
		http.Error(w, err.Error(), http.StatusConflict)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// newCtlCommand is "controlplane ctl": the control socket from a shell.
func newCtlCommand() *cobra.Command {
	var dir string
	var kill bool
	cmd := &cobra.Command{
		Use:          "ctl stop|start|list [COMPONENT]",
		Short:        "Stop (--kill: SIGKILL), start or list the servers of a running \"up\" (etcd, apiserver, scheduler, controller-manager, metrics-server)",
		Args:         cobra.RangeArgs(1, 2),
		SilenceUsage: true,
		RunE: func(_ *cobra.Command, args []string) error {
			method, path := http.MethodGet, "/components"
			switch {
			case args[0] == "list" && len(args) == 1:
			case (args[0] == "stop" || args[0] == "start") && len(args) == 2:
				method, path = http.MethodPost, "/components/"+args[1]+"/"+args[0]
				if kill && args[0] == "stop" {
					path += "?signal=KILL"
				}
			default:
				return errors.New("want: ctl list | ctl stop COMPONENT [--kill] | ctl start COMPONENT")
			}
			return ctl(filepath.Join(dir, controlSocketName), method, path, os.Stdout)
		},
	}
	cmd.Flags().StringVar(&dir, "dir", ".local/controlplane", "the directory of the running up")
	cmd.Flags().BoolVar(&kill, "kill", false, "stop with SIGKILL instead of SIGTERM")
	return cmd
}

func ctl(socket, method, path string, out io.Writer) error {
	hc := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		},
	}}
	req, err := http.NewRequest(method, "http://up"+path, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("control socket %s: %w", socket, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		return fmt.Errorf("%s", body)
	}
	_, err = out.Write(body)
	return err
}
