package fault

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// ControlPlane is a running bin/controlplane up in a directory of its own.
type ControlPlane struct {
	Dir  string
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{} // closed when up has exited
	err  error         // its exit status, once done is closed
	http *http.Client  // to its control socket
}

// StartControlPlane runs bin (bin/controlplane) up with extra flags in a new
// temporary directory and waits until it is ready.
func StartControlPlane(bin string, extra ...string) (*ControlPlane, error) {
	dir, err := os.MkdirTemp("", "nodelet-cp-")
	if err != nil {
		return nil, err
	}
	log, err := os.Create(filepath.Join(dir, "up.log"))
	if err != nil {
		return nil, err
	}
	socket := filepath.Join(dir, "control.sock")
	cp := &ControlPlane{Dir: dir, log: log, done: make(chan struct{}), http: &http.Client{
		Timeout: 5 * time.Minute,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		}},
	}}
	cp.cmd = exec.Command(bin, append([]string{"up", "--dir", dir}, extra...)...)
	cp.cmd.Stdout, cp.cmd.Stderr = log, log
	cp.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cp.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start control plane: %w", err)
	}
	go func() { cp.err = cp.cmd.Wait(); close(cp.done) }()

	deadline := time.Now().Add(5 * time.Minute)
	for {
		if _, err := os.Stat(filepath.Join(dir, "ready")); err == nil {
			return cp, nil
		}
		select {
		case <-cp.done:
			out, _ := os.ReadFile(log.Name())
			return nil, fmt.Errorf("control plane exited before it was ready: %v\n%s", cp.err, out)
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cp.Close(true)
			return nil, fmt.Errorf("control plane not ready after 5 minutes; logs in %s", dir)
		}
	}
}

// Kubeconfig is the admin kubeconfig.
func (cp *ControlPlane) Kubeconfig() string { return filepath.Join(cp.Dir, "admin.kubeconfig") }

// Stop stops one server of the control plane (etcd, apiserver, scheduler,
// controller-manager) with SIGTERM, or SIGKILL when kill is set, and waits
// until it has exited. Its data stays.
func (cp *ControlPlane) Stop(component string, kill bool) error {
	path := "/components/" + component + "/stop"
	if kill {
		path += "?signal=KILL"
	}
	return cp.call(path)
}

// Start starts a stopped server again and waits until it is ready.
func (cp *ControlPlane) Start(component string) error {
	return cp.call("/components/" + component + "/start")
}

func (cp *ControlPlane) call(path string) error {
	resp, err := cp.http.Post("http://up"+path, "", nil)
	if err != nil {
		return fmt.Errorf("control plane %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		return fmt.Errorf("control plane %s: %s", path, strings.TrimSpace(string(body)))
	}
	return nil
}

// Close stops the control plane (SIGTERM, then SIGKILL after a minute) and
// removes its directory unless keep is set (its logs may tell why a test
// failed).
func (cp *ControlPlane) Close(keep bool) error {
	_ = cp.cmd.Process.Signal(syscall.SIGTERM)
	var err error
	select {
	case <-cp.done:
	case <-time.After(time.Minute):
		err = errors.New("control plane did not stop within a minute of SIGTERM; killed")
		_ = cp.cmd.Process.Kill()
		<-cp.done
	}
	cp.log.Close()
	if keep {
		return err
	}
	return errors.Join(err, os.RemoveAll(cp.Dir))
}
