package crienv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Credentials of the test registry's private/ repositories.
const RegistryUser, RegistryPassword = "nodelet", "s3cret"

// Registry is bin/images serve on loopback over the images make images
// built: the mirror of registry.k8s.io and docker.io for a test containerd.
type Registry struct {
	Addr string // host:port
	dir  string // its ready file and log, removed by Stop
	cmd  *exec.Cmd
	done chan struct{}
}

// StartRegistry serves the OCI layout imagesDir with bin (bin/images). Its
// private/ repositories need RegistryUser and RegistryPassword. Missing
// files give an error wrapping ErrUnavailable.
func StartRegistry(bin, imagesDir string) (*Registry, error) {
	for _, p := range []string{bin, imagesDir} {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("%s missing (run make images): %w", p, ErrUnavailable)
		}
	}
	dir, err := os.MkdirTemp("", "nodelet-registry-")
	if err != nil {
		return nil, err
	}
	ready := filepath.Join(dir, "addr")
	log, err := os.Create(filepath.Join(dir, "registry.log"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	r := &Registry{dir: dir, done: make(chan struct{})}
	r.cmd = exec.Command(bin, "serve", "--dir", imagesDir, "--listen", "127.0.0.1:0", "--ready-file", ready,
		"--auth", RegistryUser+":"+RegistryPassword)
	r.cmd.Stdout, r.cmd.Stderr = log, log
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := r.cmd.Start(); err != nil {
		log.Close()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start registry: %w", err)
	}
	go func() { _ = r.cmd.Wait(); log.Close(); close(r.done) }()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if data, err := os.ReadFile(ready); err == nil && len(data) > 0 {
			r.Addr = strings.TrimSpace(string(data))
			return r, nil
		}
		select {
		case <-r.done:
			out, _ := os.ReadFile(log.Name())
			os.RemoveAll(dir)
			return nil, fmt.Errorf("registry exited: %s", out)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			r.Stop()
			return nil, errors.New("registry not serving after 2 minutes")
		}
	}
}

// Stop ends the registry and removes its directory.
func (r *Registry) Stop() {
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.done
	}
	os.RemoveAll(r.dir)
}
