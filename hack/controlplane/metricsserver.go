package main

// metrics-server is the aggregated API behind kubectl top: "up
// --metrics-server PATH" runs it as one more child and registers it with the
// apiserver's aggregator. This file holds the flags of both sides, the
// objects that register it and the wait for the aggregator to call it
// Available.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	applycorev1 "k8s.io/client-go/applyconfigurations/core/v1"
	applydiscoveryv1 "k8s.io/client-go/applyconfigurations/discovery/v1"
	applyrbacv1 "k8s.io/client-go/applyconfigurations/rbac/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	applyapiregistrationv1 "k8s.io/kube-aggregator/pkg/client/applyconfiguration/apiregistration/v1"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
)

const (
	metricsServerName = "metrics-server"
	metricsAPIService = "v1beta1.metrics.k8s.io"
	// upFieldManager owns, for server-side apply, what "up" creates.
	upFieldManager = "controlplane-up"
)

// aggregatorArgs are the apiserver flags that let its aggregator proxy to
// extension API servers: it presents the front-proxy client certificate and
// names the user in X-Remote-* headers. With aggregator routing the
// apiserver dials a Service's endpoints itself, so no kube-proxy is needed.
func aggregatorArgs(certs *pki) []string {
	return []string{
		"--requestheader-client-ca-file=" + certs.path("front-proxy-ca.crt"),
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-username-headers=X-Remote-User",
		"--proxy-client-cert-file=" + certs.path("front-proxy-client.crt"),
		"--proxy-client-key-file=" + certs.path("front-proxy-client.key"),
		"--enable-aggregator-routing=true",
	}
}

// metricsServer is how "up" runs metrics-server: the binary, the admin
// kubeconfig it uses, and the address the apiserver reaches it at.
type metricsServer struct {
	path       string
	kubeconfig string
	certDir    string
	ip         net.IP
	port       int
	resolution time.Duration // how often it scrapes
}

// args are metrics-server's flags. It runs as the admin, so it needs no
// RBAC of its own, and reads the front-proxy CA from the
// extension-apiserver-authentication ConfigMap that the apiserver publishes.
func (m metricsServer) args() []string {
	return []string{
		"--kubeconfig=" + m.kubeconfig,
		"--authentication-kubeconfig=" + m.kubeconfig,
		"--authorization-kubeconfig=" + m.kubeconfig,
		// The address its EndpointSlice publishes, where the apiserver
		// dials it; nothing else needs it.
		"--bind-address=" + m.ip.String(),
		"--secure-port=" + strconv.Itoa(m.port),
		// Its self-signed serving certificate, kept across restarts; the
		// APIService skips verifying it.
		"--cert-dir=" + m.certDir,
		// Local nodes serve the kubelet API with self-signed certificates
		// that no CA here signed.
		"--kubelet-insecure-tls",
		"--kubelet-preferred-address-types=InternalIP,Hostname",
		// nodelet nodes serve the kubelet API on the port their status
		// names (many nodes in one process cannot all have 10250).
		"--kubelet-use-node-status-port",
		// 10s is metrics-server's smallest resolution; the scrape timeout
		// may be at most nine tenths of it (the default is 10s).
		"--metric-resolution=" + m.resolution.String(),
		"--kubelet-request-timeout=5s",
		"--profiling=false",
	}
}

// hostIPv4 is the IPv4 address this host sends from on its default route.
// metrics-server's EndpointSlice publishes it: the apiserver reaches it,
// and EndpointSlice validation accepts it where it refuses loopback.
// Connecting a UDP socket sends nothing; the kernel only picks the route
// and the source address.
func hostIPv4() (net.IP, error) {
	conn, err := net.Dial("udp4", "198.51.100.1:9") // TEST-NET-2 (RFC 5737), off every local network
	if err != nil {
		return nil, fmt.Errorf("find the host's address on the default route: %w", err)
	}
	defer conn.Close()
	ip := conn.LocalAddr().(*net.UDPAddr).IP
	if ip.IsLoopback() || ip.IsUnspecified() || ip.IsLinkLocalUnicast() {
		return nil, fmt.Errorf("the host's address on the default route is %s, which an EndpointSlice cannot hold", ip)
	}
	return ip, nil
}

// register makes the apiserver serve metrics.k8s.io from metrics-server:
// a selector-less Service, its EndpointSlice and the APIService, plus the
// ClusterRole that lets view, edit and admin read metrics (what upstream's
// manifest gives users; metrics-server itself runs as the admin). Server-side apply makes a second "up" on the same
// directory update them in place, a new host address included.
func (m metricsServer) register(ctx context.Context, cfg *rest.Config) error {
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	agg, err := aggregator.NewForConfig(cfg)
	if err != nil {
		return err
	}
	apply := metav1.ApplyOptions{FieldManager: upFieldManager, Force: true}
	labels := map[string]string{"k8s-app": metricsServerName}

	svc := applycorev1.Service(metricsServerName, metav1.NamespaceSystem).
		WithLabels(labels).
		WithSpec(applycorev1.ServiceSpec().WithPorts(applycorev1.ServicePort().
			WithName("https").WithProtocol(corev1.ProtocolTCP).
			WithPort(443).WithTargetPort(intstr.FromInt32(int32(m.port)))))
	if _, err := client.CoreV1().Services(metav1.NamespaceSystem).Apply(ctx, svc, apply); err != nil {
		return fmt.Errorf("service %s/%s: %w", metav1.NamespaceSystem, metricsServerName, err)
	}

	slice := applydiscoveryv1.EndpointSlice(metricsServerName, metav1.NamespaceSystem).
		WithLabels(map[string]string{
			discoveryv1.LabelServiceName: metricsServerName,
			// Not the endpointslice controller's: it leaves the slice alone.
			discoveryv1.LabelManagedBy: "controlplane.nodelet.io",
		}).
		WithAddressType(discoveryv1.AddressTypeIPv4).
		WithEndpoints(applydiscoveryv1.Endpoint().
			WithAddresses(m.ip.String()).
			WithConditions(applydiscoveryv1.EndpointConditions().WithReady(true))).
		WithPorts(applydiscoveryv1.EndpointPort().
			WithName("https").WithProtocol(corev1.ProtocolTCP).WithPort(int32(m.port)))
	if _, err := client.DiscoveryV1().EndpointSlices(metav1.NamespaceSystem).Apply(ctx, slice, apply); err != nil {
		return fmt.Errorf("endpointslice %s/%s: %w", metav1.NamespaceSystem, metricsServerName, err)
	}

	role := applyrbacv1.ClusterRole("system:aggregated-metrics-reader").
		WithLabels(map[string]string{
			"k8s-app": metricsServerName,
			"rbac.authorization.k8s.io/aggregate-to-admin": "true",
			"rbac.authorization.k8s.io/aggregate-to-edit":  "true",
			"rbac.authorization.k8s.io/aggregate-to-view":  "true",
		}).
		WithRules(applyrbacv1.PolicyRule().
			WithAPIGroups("metrics.k8s.io").
			WithResources("pods", "nodes").
			WithVerbs("get", "list", "watch"))
	if _, err := client.RbacV1().ClusterRoles().Apply(ctx, role, apply); err != nil {
		return fmt.Errorf("clusterrole system:aggregated-metrics-reader: %w", err)
	}

	// metrics-server serves a self-signed certificate; the apiserver reaches
	// it on this host only.
	api := applyapiregistrationv1.APIService(metricsAPIService).
		WithLabels(labels).
		WithSpec(applyapiregistrationv1.APIServiceSpec().
			WithGroup("metrics.k8s.io").
			WithVersion("v1beta1").
			WithInsecureSkipTLSVerify(true).
			WithGroupPriorityMinimum(100).
			WithVersionPriority(100).
			WithService(applyapiregistrationv1.ServiceReference().
				WithNamespace(metav1.NamespaceSystem).
				WithName(metricsServerName).
				WithPort(443)))
	if _, err := agg.ApiregistrationV1().APIServices().Apply(ctx, api, apply); err != nil {
		return fmt.Errorf("apiservice %s: %w", metricsAPIService, err)
	}
	return nil
}

// metricsAPIAvailable reports whether the aggregator calls the metrics
// APIService Available and, when not, what its condition says.
func metricsAPIAvailable(ctx context.Context, agg aggregator.Interface) (bool, string) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	api, err := agg.ApiregistrationV1().APIServices().Get(ctx, metricsAPIService, metav1.GetOptions{})
	if err != nil {
		return false, err.Error()
	}
	for _, c := range api.Status.Conditions {
		if c.Type == apiregistrationv1.Available {
			return c.Status == apiregistrationv1.ConditionTrue, fmt.Sprintf("%s: %s", c.Reason, c.Message)
		}
	}
	return false, "no Available condition yet"
}

// start runs metrics-server in g, registers it and waits up to timeout
// until the aggregator calls it Available.
func (m metricsServer) start(ctx context.Context, g *group, cfg *rest.Config, timeout time.Duration) error {
	if err := g.startProgram(metricsServerName, m.path, m.args()...); err != nil {
		return err
	}
	if err := m.register(ctx, cfg); err != nil {
		return fmt.Errorf("register metrics-server: %w", err)
	}
	agg, err := aggregator.NewForConfig(cfg)
	if err != nil {
		return err
	}
	last := ""
	err = g.waitFor(ctx, metricsServerName, timeout, func() bool {
		ok, why := metricsAPIAvailable(ctx, agg)
		last = why
		return ok
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("%s not Available (%s): %w", metricsAPIService, last, err)
	}
	return err
}

// unregisterMetricsServer deletes the metrics APIService that an earlier
// "up --metrics-server" on this directory left behind, so that a run
// without metrics-server does not fail every client's discovery of
// metrics.k8s.io. An APIService that someone else applied stays.
func unregisterMetricsServer(ctx context.Context, cfg *rest.Config) error {
	agg, err := aggregator.NewForConfig(cfg)
	if err != nil {
		return err
	}
	apis := agg.ApiregistrationV1().APIServices()
	api, err := apis.Get(ctx, metricsAPIService, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("apiservice %s: %w", metricsAPIService, err)
	}
	ours := false
	for _, f := range api.ManagedFields {
		ours = ours || f.Manager == upFieldManager
	}
	if !ours {
		return nil
	}
	err = apis.Delete(ctx, metricsAPIService, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &api.UID}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete apiservice %s: %w", metricsAPIService, err)
	}
	return nil
}
