//go:build linux

// Command addonsup runs the cluster add-ons of `make run` (package
// clusteraddons): CoreDNS behind the kube-dns Service and kube-proxy in
// iptables mode for the node. It writes the node's address to
// --ready-file once both serve, and on SIGINT or SIGTERM stops them,
// removing kube-proxy's iptables rules and the kube-dns Service. make
// clean removes the rules of one that was killed (clusteraddons.Cleanup
// on --dir).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/nodelet/nodelet/pkg/atomicfile"
	"github.com/nodelet/nodelet/test/clusteraddons"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "addonsup:", err)
		os.Exit(1)
	}
}

func run() error {
	var o clusteraddons.Options
	flag.StringVar(&o.Kubeconfig, "kubeconfig", ".local/controlplane/admin.kubeconfig", "the cluster's admin kubeconfig")
	flag.StringVar(&o.BinDir, "bin", "bin", "the directory of coredns and kube-proxy")
	flag.StringVar(&o.Dir, "dir", ".local/addons", "the directory of the Corefile, the logs and kube-proxy's cleanup record")
	flag.StringVar(&o.NodeName, "node-name", "", "the node kube-proxy serves (required)")
	flag.StringVar(&o.ClusterCIDR, "cluster-cidr", "", "the pods' own address range (the cri provider's subnet); empty when pods use the host's network")
	clusterCIDRFile := flag.String("cluster-cidr-file", "", "a file holding --cluster-cidr (criup's --subnet-file)")
	readyFile := flag.String("ready-file", "", "where to write the node's address once both add-ons serve")
	flag.Parse()
	if o.NodeName == "" {
		return errors.New("--node-name is required")
	}
	if *clusterCIDRFile != "" {
		data, err := os.ReadFile(*clusterCIDRFile)
		if err != nil {
			return fmt.Errorf("--cluster-cidr-file: %w", err)
		}
		o.ClusterCIDR = strings.TrimSpace(string(data))
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	a, err := clusteraddons.Start(ctx, o)
	if err != nil {
		return err
	}
	if *readyFile != "" {
		defer os.Remove(*readyFile)
		if err := atomicfile.Write(*readyFile, []byte(a.HostIP()+"\n"), atomicfile.Options{Perm: 0o644}); err != nil {
			return errors.Join(err, a.Stop())
		}
	}
	fmt.Fprintf(os.Stderr, "addonsup: CoreDNS at %s:%d behind %s, kube-proxy for node %s (logs in %s)\n",
		a.HostIP(), clusteraddons.DNSPort, clusteraddons.DNSServiceIP, o.NodeName, o.Dir)
	<-ctx.Done()
	return a.Stop()
}
