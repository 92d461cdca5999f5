// Command criup runs what the cri provider needs on this machine for
// `make run PROVIDER=cri`: the image registry of `make images` on loopback
// and a private containerd (package crienv: its own root, state, sockets,
// CNI bridge and subnet) that mirrors registry.k8s.io and docker.io to it.
// It writes the containerd endpoint to --endpoint-file once both serve
// (and the pods' subnet to --subnet-file, for kube-proxy), and on SIGINT
// or SIGTERM stops containerd (removing its pods, network and files) and
// the registry. --dir-file records containerd's directory
// (outside make run's, where socket paths stay short enough), so that
// make clean finds what criup leaves when it is killed.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nodelet/nodelet/pkg/atomicfile"
	"github.com/nodelet/nodelet/test/crienv"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "criup:", err)
		os.Exit(1)
	}
}

func run() error {
	images := flag.String("images", ".local/images", "the images directory of make images")
	registryBin := flag.String("registry", "bin/images", "the registry binary")
	endpointFile := flag.String("endpoint-file", "", "where to write containerd's CRI endpoint once it serves (required)")
	dirFile := flag.String("dir-file", "", "where to write the directory of containerd's root, state and sockets")
	subnetFile := flag.String("subnet-file", "", "where to write the pods' subnet (kube-proxy's --cluster-cidr)")
	flag.Parse()
	if *endpointFile == "" {
		return errors.New("--endpoint-file is required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	// Beside the endpoint file, in make run's directory, so that make clean
	// removes it if criup is killed.
	dir, err := os.MkdirTemp(filepath.Dir(*endpointFile), "criup-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ready := filepath.Join(dir, "registry-addr")
	reg := exec.Command(*registryBin, "serve", "--dir", *images, "--listen", "127.0.0.1:0", "--ready-file", ready)
	reg.Stdout, reg.Stderr = os.Stderr, os.Stderr
	if err := reg.Start(); err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	defer func() {
		_ = reg.Process.Signal(syscall.SIGTERM)
		_ = reg.Wait()
	}()
	addr, err := waitFile(ctx, ready, time.Minute)
	if err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	env, err := crienv.Start(ctx, crienv.Options{Mirror: "http://" + addr})
	if err != nil {
		return err
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "criup: stop containerd:", err)
		} else if *dirFile != "" {
			os.Remove(*dirFile)
		}
		os.Remove(*endpointFile)
	}()
	if *dirFile != "" {
		if err := atomicfile.Write(*dirFile, []byte(env.Dir()+"\n"), atomicfile.Options{Perm: 0o644}); err != nil {
			return err
		}
	}
	if *subnetFile != "" {
		defer os.Remove(*subnetFile)
		if err := atomicfile.Write(*subnetFile, []byte(env.Subnet()+"\n"), atomicfile.Options{Perm: 0o644}); err != nil {
			return err
		}
	}
	if err := atomicfile.Write(*endpointFile, []byte(env.Endpoint()+"\n"), atomicfile.Options{Perm: 0o644}); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "criup: containerd at %s (log %s), registry at %s\n", env.Endpoint(), env.LogPath(), addr)
	<-ctx.Done()
	return nil
}

// waitFile waits until path holds a line and returns it.
func waitFile(ctx context.Context, path string, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	for {
		if data, err := os.ReadFile(path); err == nil && len(data) > 0 {
			return strings.TrimSpace(string(data)), nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("%s not written within %s", path, timeout)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
