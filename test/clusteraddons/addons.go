//go:build linux

package clusteraddons

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// The cluster's DNS: pods resolve through the kube-dns Service at
// DNSServiceIP, whose port 53 leads to CoreDNS on the node's address at
// DNSPort. A node joins it with --cluster-dns DNSServiceIP --cluster-domain
// DNSDomain.
const (
	DNSServiceIP = "10.96.0.10"
	DNSDomain    = "cluster.local"
	DNSPort      = 10053
)

// Options configure one set of add-ons.
type Options struct {
	// BinDir holds coredns and kube-proxy. Required.
	BinDir string
	// Dir holds the Corefile, the logs (coredns.log, kube-proxy.log) and
	// the record Cleanup reads. Required; made if missing.
	Dir string
	// Kubeconfig is the admin kubeconfig both add-ons use. Required.
	Kubeconfig string
	// NodeName is the node kube-proxy serves (its --hostname-override).
	// Required.
	NodeName string
	// HostIP is the node's address, where CoreDNS listens and what the
	// kube-dns EndpointSlice publishes. Default: the address the API server
	// advertises (APIServerAddress), which pods reach.
	HostIP string
	// ClusterCIDR is the range of the pods' own addresses (the cri
	// provider's CNI subnet); empty when pods use the host's network.
	ClusterCIDR string
	// LockWait is how long Start waits for the add-ons of another cluster
	// on this host to stop. Default: none, Start fails at once naming the
	// holder.
	LockWait time.Duration
	// ReadyTimeout bounds each wait for an add-on to serve. Default: a
	// minute.
	ReadyTimeout time.Duration
}

func (o *Options) validate() error {
	switch {
	case o.BinDir == "":
		return errors.New("options: BinDir is required")
	case o.Dir == "":
		return errors.New("options: Dir is required")
	case o.Kubeconfig == "":
		return errors.New("options: Kubeconfig is required")
	case o.NodeName == "":
		return errors.New("options: NodeName is required")
	}
	if o.HostIP != "" {
		if ip := net.ParseIP(o.HostIP); ip == nil || ip.To4() == nil || ip.IsLoopback() {
			return fmt.Errorf("options: HostIP %q: want a non-loopback IPv4 address", o.HostIP)
		}
	}
	if o.ClusterCIDR != "" {
		if _, _, err := net.ParseCIDR(o.ClusterCIDR); err != nil {
			return fmt.Errorf("options: ClusterCIDR: %w", err)
		}
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = time.Minute
	}
	return nil
}

// Addons are a running CoreDNS and kube-proxy.
type Addons struct {
	opts   Options
	client kubernetes.Interface
	lock   *hostLock
	dns    *Daemon
	proxy  *Daemon
	// cleanup undoes kube-proxy's rules; set once kube-proxy has started.
	cleanup *record
}

// Start runs CoreDNS and kube-proxy and returns once CoreDNS answers for
// the cluster's names and kube-proxy has written the kube-dns Service's
// rules. On error, what was started is stopped.
func Start(ctx context.Context, opts Options) (a *Addons, err error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, err
	}
	for _, d := range []*string{&opts.BinDir, &opts.Dir, &opts.Kubeconfig} {
		if *d, err = filepath.Abs(*d); err != nil {
			return nil, err
		}
	}
	for _, b := range []string{"coredns", "kube-proxy"} {
		if _, err := os.Stat(filepath.Join(opts.BinDir, b)); err != nil {
			return nil, fmt.Errorf("%s: %w (make bin/%s builds it)", b, err, b)
		}
	}
	if err := needIptables(); err != nil {
		return nil, err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", opts.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	lock, err := takeHostLock(ctx, opts.LockWait)
	if err != nil {
		return nil, err
	}
	a = &Addons{opts: opts, client: client, lock: lock}
	defer func() {
		if err != nil {
			err = errors.Join(err, a.Stop())
			a = nil
		}
	}()
	if a.opts.HostIP == "" {
		if a.opts.HostIP, err = APIServerAddress(ctx, client); err != nil {
			return a, err
		}
	}
	if err := a.startDNS(ctx); err != nil {
		return a, fmt.Errorf("coredns: %w", err)
	}
	if err := a.startProxy(ctx); err != nil {
		return a, fmt.Errorf("kube-proxy: %w", err)
	}
	return a, nil
}

// HostIP is the node's address the add-ons serve on.
func (a *Addons) HostIP() string { return a.opts.HostIP }

// Stop ends kube-proxy and removes its rules, ends CoreDNS, deletes the
// kube-dns Service and its EndpointSlice and lets the host lock go. Every
// step runs; the errors are joined.
func (a *Addons) Stop() error {
	var errs []error
	if a.proxy != nil {
		errs = append(errs, a.proxy.Stop())
		a.proxy = nil
	}
	if a.cleanup != nil {
		err := a.cleanup.run()
		errs = append(errs, err)
		if err == nil {
			a.cleanup = nil
		}
	}
	if a.dns != nil {
		errs = append(errs, a.dns.Stop())
		a.dns = nil
		errs = append(errs, a.deleteDNSService())
	}
	if a.lock != nil {
		a.lock.release()
		a.lock = nil
	}
	return errors.Join(errs...)
}

// APIServerAddress is the address the API server advertises as the
// endpoint of the kubernetes Service: the host's address that pods reach,
// and so the node's.
func APIServerAddress(ctx context.Context, client kubernetes.Interface) (string, error) {
	slice, err := client.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("the kubernetes Service's EndpointSlice: %w", err)
	}
	if slice.AddressType == discoveryv1.AddressTypeIPv4 {
		for _, e := range slice.Endpoints {
			if len(e.Addresses) > 0 {
				return e.Addresses[0], nil
			}
		}
	}
	return "", errors.New("the API server advertises no address that pods reach (the kubernetes Service has no IPv4 endpoint): " +
		"bin/controlplane up advertises the host's address unless --advertise-address is 127.0.0.1")
}
