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

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	applycorev1 "k8s.io/client-go/applyconfigurations/core/v1"
	applydiscoveryv1 "k8s.io/client-go/applyconfigurations/discovery/v1"
)

const (
	dnsService = "kube-dns"
	dnsSlice   = "kube-dns-coredns"
	// fieldManager owns, for server-side apply, what the add-ons write.
	fieldManager = "clusteraddons.nodelet.io"
)

// startDNS runs CoreDNS on the node's address, serving the cluster's
// Services and Pods and forwarding the rest to the host's resolvers,
// points the kube-dns Service at it and waits until it answers for the
// kubernetes Service.
func (a *Addons) startDNS(ctx context.Context) error {
	corefile := filepath.Join(a.opts.Dir, "Corefile")
	conf := fmt.Sprintf(`.:%d {
    bind %s
    errors
    health 127.0.0.1:0
    kubernetes %s in-addr.arpa ip6.arpa {
        kubeconfig %s
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }
    forward . /etc/resolv.conf
    cache 30
}
`, DNSPort, a.opts.HostIP, DNSDomain, a.opts.Kubeconfig)
	if err := os.WriteFile(corefile, []byte(conf), 0o644); err != nil {
		return err
	}
	d, err := StartDaemon(a.opts.Dir, "coredns", filepath.Join(a.opts.BinDir, "coredns"), "-conf", corefile)
	if err != nil {
		return err
	}
	a.dns = d
	if err := a.applyDNSService(ctx); err != nil {
		return err
	}
	return a.waitDNS(ctx)
}

// applyDNSService makes the kube-dns Service and its EndpointSlice, which
// names the node's address (a second start on a new address moves it).
func (a *Addons) applyDNSService(ctx context.Context) error {
	apply := metav1.ApplyOptions{FieldManager: fieldManager, Force: true}
	svc := applycorev1.Service(dnsService, metav1.NamespaceSystem).
		WithLabels(map[string]string{"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS"}).
		WithSpec(applycorev1.ServiceSpec().
			WithClusterIP(DNSServiceIP).
			WithPorts(
				applycorev1.ServicePort().WithName("dns").WithProtocol(corev1.ProtocolUDP).
					WithPort(53).WithTargetPort(intstr.FromInt32(DNSPort)),
				applycorev1.ServicePort().WithName("dns-tcp").WithProtocol(corev1.ProtocolTCP).
					WithPort(53).WithTargetPort(intstr.FromInt32(DNSPort))))
	if _, err := a.client.CoreV1().Services(metav1.NamespaceSystem).Apply(ctx, svc, apply); err != nil {
		return fmt.Errorf("service %s/%s: %w", metav1.NamespaceSystem, dnsService, err)
	}
	// CoreDNS is no pod, so no controller writes its endpoints.
	slice := applydiscoveryv1.EndpointSlice(dnsSlice, metav1.NamespaceSystem).
		WithLabels(map[string]string{
			discoveryv1.LabelServiceName: dnsService,
			discoveryv1.LabelManagedBy:   fieldManager,
		}).
		WithAddressType(discoveryv1.AddressTypeIPv4).
		WithEndpoints(applydiscoveryv1.Endpoint().
			WithAddresses(a.opts.HostIP).
			WithConditions(applydiscoveryv1.EndpointConditions().WithReady(true)).
			WithNodeName(a.opts.NodeName)).
		WithPorts(
			applydiscoveryv1.EndpointPort().WithName("dns").WithProtocol(corev1.ProtocolUDP).WithPort(DNSPort),
			applydiscoveryv1.EndpointPort().WithName("dns-tcp").WithProtocol(corev1.ProtocolTCP).WithPort(DNSPort))
	if _, err := a.client.DiscoveryV1().EndpointSlices(metav1.NamespaceSystem).Apply(ctx, slice, apply); err != nil {
		return fmt.Errorf("endpointslice %s/%s: %w", metav1.NamespaceSystem, dnsSlice, err)
	}
	return nil
}

// waitDNS waits until CoreDNS resolves the kubernetes Service's name:
// it serves, and it reads the cluster through its kubeconfig.
func (a *Addons) waitDNS(ctx context.Context) error {
	server := net.JoinHostPort(a.opts.HostIP, fmt.Sprint(DNSPort))
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, server)
	}}
	name := "kubernetes.default.svc." + DNSDomain + "."
	var last error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, a.opts.ReadyTimeout, true, func(ctx context.Context) (bool, error) {
		if exited, err := a.dns.exited(); exited {
			return false, fmt.Errorf("exited: %v (log %s)", err, a.dns.logPath)
		}
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, last = r.LookupHost(qctx, name)
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("no answer for %s at %s (last: %v; log %s): %w", name, server, last, a.dns.logPath, err)
	}
	return nil
}

// deleteDNSService deletes the kube-dns Service and its EndpointSlice.
func (a *Addons) deleteDNSService() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := a.client.DiscoveryV1().EndpointSlices(metav1.NamespaceSystem).Delete(ctx, dnsSlice, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		err = fmt.Errorf("delete endpointslice %s/%s: %w", metav1.NamespaceSystem, dnsSlice, err)
	} else {
		err = nil
	}
	err2 := a.client.CoreV1().Services(metav1.NamespaceSystem).Delete(ctx, dnsService, metav1.DeleteOptions{})
	if err2 != nil && !apierrors.IsNotFound(err2) {
		err2 = fmt.Errorf("delete service %s/%s: %w", metav1.NamespaceSystem, dnsService, err2)
	} else {
		err2 = nil
	}
	return errors.Join(err, err2)
}
