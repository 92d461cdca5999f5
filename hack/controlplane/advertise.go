package main

// The apiserver's address for pods: "up" advertises the host's address, so
// that the kubernetes Service leads pods to it (kube-proxy sends
// 10.96.0.1:443 there) and in-cluster clients work, unless it is told to
// stay on loopback.

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// kubernetesServiceIP is the kubernetes Service's ClusterIP: the first
// address of --service-cluster-ip-range.
var kubernetesServiceIP = net.IPv4(10, 96, 0, 1)

// advertiseIP is the address of --advertise-address: the one given, or the
// host's on its default route, or loopback on a host without one.
func (o *upOptions) advertiseIP() (net.IP, error) {
	if o.advertiseAddress != "" {
		ip := net.ParseIP(o.advertiseAddress)
		if ip == nil || ip.To4() == nil || ip.IsUnspecified() {
			return nil, fmt.Errorf("--advertise-address %q: want an IPv4 address", o.advertiseAddress)
		}
		return ip.To4(), nil
	}
	ip, err := hostIPv4()
	if err != nil {
		fmt.Fprintf(os.Stderr, "advertising 127.0.0.1, which pods cannot reach (%v)\n", err)
		return net.IPv4(127, 0, 0, 1).To4(), nil
	}
	return ip.To4(), nil
}

// advertiseArgs are the apiserver's flags for the address: on loopback it
// serves there alone and publishes no endpoint (an EndpointSlice cannot
// hold loopback); otherwise it serves on every address, loopback included
// for the admin kubeconfig, and its endpoint reconciler publishes the
// address as the kubernetes Service's endpoint.
func advertiseArgs(ip net.IP) []string {
	if ip.IsLoopback() {
		return []string{"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none"}
	}
	return []string{"--bind-address=0.0.0.0", "--advertise-address=" + ip.String()}
}

// waitAdvertised waits until the kubernetes Service's EndpointSlice names
// the address and port, which the endpoint reconciler writes shortly after
// the apiserver is ready.
func waitAdvertised(ctx context.Context, cfg *rest.Config, ip net.IP, port int, timeout time.Duration) error {
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	last := "no EndpointSlice yet"
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		slice, err := client.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Get(ctx, "kubernetes", metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		var addrs []string
		var ports []int32
		for _, e := range slice.Endpoints {
			addrs = append(addrs, e.Addresses...)
		}
		for _, p := range slice.Ports {
			if p.Port != nil {
				ports = append(ports, *p.Port)
			}
		}
		last = fmt.Sprintf("addresses %v, ports %v", addrs, ports)
		return slices.Contains(addrs, ip.String()) && slices.Contains(ports, int32(port)), nil
	})
	if err != nil {
		return fmt.Errorf("the kubernetes Service's endpoint %s:%d not published (%s): %w", ip, port, last, err)
	}
	return nil
}
