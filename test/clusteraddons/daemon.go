//go:build linux

package clusteraddons

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// Daemon is a host process that runs as long as the cluster (an add-on,
// or the control plane and agent of hack/conformance), its output in
// <dir>/<name>.log. It gets SIGTERM if the process that started it dies
// first.
type Daemon struct {
	name    string
	cmd     *exec.Cmd
	log     *os.File
	logPath string
	done    chan struct{} // closed when the process has exited
	err     error         // its exit status, once done is closed
}

// StartDaemon starts path with args, its output in <dir>/<name>.log.
func StartDaemon(dir, name, path string, args ...string) (*Daemon, error) {
	logPath := filepath.Join(dir, name+".log")
	log, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	d := &Daemon{name: name, cmd: cmd, log: log, logPath: logPath, done: make(chan struct{})}
	go func() { d.err = cmd.Wait(); close(d.done) }()
	return d, nil
}

// exited says whether the process has ended, and how.
// PID is the process's ID.
func (d *Daemon) PID() int { return d.cmd.Process.Pid }

func (d *Daemon) exited() (bool, error) {
	select {
	case <-d.done:
		return true, d.err
	default:
		return false, nil
	}
}

// Stop sends SIGTERM and waits; after a minute, SIGKILL.
func (d *Daemon) Stop() error {
	defer d.log.Close()
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
		return nil
	case <-time.After(time.Minute):
		_ = d.cmd.Process.Kill()
		<-d.done
		return fmt.Errorf("%s did not stop within a minute of SIGTERM; killed", d.name)
	}
}

// hostLock is held by the one set of add-ons of the host. Holding it is
// holding an abstract unix socket, which the kernel frees when the process
// dies: a killed holder never keeps it, and no file is left behind.
type hostLock struct{ l net.Listener }

const hostLockName = "@nodelet-clusteraddons"

// takeHostLock takes the lock, waiting up to wait for another holder to
// let it go.
func takeHostLock(ctx context.Context, wait time.Duration) (*hostLock, error) {
	deadline := time.Now().Add(wait)
	for {
		l, err := net.Listen("unix", hostLockName)
		if err == nil {
			return &hostLock{l: l}, nil
		}
		if !time.Now().Before(deadline) {
			return nil, fmt.Errorf("the add-ons of another cluster run on this host (make run's? make stop ends them): "+
				"kube-proxy's rules are the host's, one set at a time (%s: %w)", hostLockName, err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second): // poll interval, bounded by the deadline
		}
	}
}

func (h *hostLock) release() { _ = h.l.Close() }
