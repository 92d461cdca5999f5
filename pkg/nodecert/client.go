package nodecert

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/connrotation"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/atomicfile"
)

// ClientOptions say where TLS bootstrap finds and keeps the node's
// credentials.
type ClientOptions struct {
	// BootstrapKubeconfig holds the credentials (a bootstrap token) that
	// request a client certificate when no valid one is kept. Required.
	BootstrapKubeconfig string
	// Kubeconfig is written to use the kept certificate, for kubectl and
	// the administrator; empty writes none.
	Kubeconfig string
	// Dir keeps the certificate and its key. Required.
	Dir string
	// Clock defaults to the real clock.
	Clock clock.WithTicker
}

// ClientConfig returns the REST config of the node's own identity,
// system:node:<nodeName>: it presents the client certificate kept in Dir if
// that is still valid, else one requested now with the bootstrap
// credentials (waiting until the cluster issues it). The returned
// Certificates renew it before it expires while their Run runs; the
// config's connections are closed whenever it changes, so that the next
// ones present the new one. When it has expired all the same (the agent was
// stopped past its lifetime), renewal falls back to the bootstrap
// credentials.
func ClientConfig(ctx context.Context, nodeName string, o ClientOptions) (*rest.Config, *Certificates, error) {
	if o.BootstrapKubeconfig == "" || o.Dir == "" {
		return nil, nil, errors.New("TLS bootstrap needs a bootstrap kubeconfig and a certificate directory")
	}
	boot, err := clientcmd.BuildConfigFromFlags("", o.BootstrapKubeconfig)
	if err != nil {
		return nil, nil, fmt.Errorf("bootstrap kubeconfig %s: %w", o.BootstrapKubeconfig, err)
	}
	bootClient, err := kubernetes.NewForConfig(boot)
	if err != nil {
		return nil, nil, fmt.Errorf("bootstrap kubeconfig %s: %w", o.BootstrapKubeconfig, err)
	}
	dialer := connrotation.NewDialer((&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext)
	var certs *Certificates
	node, err := certificateConfig(boot, func() *Certificates { return certs }, dialer)
	if err != nil {
		return nil, nil, fmt.Errorf("bootstrap kubeconfig %s: %w", o.BootstrapKubeconfig, err)
	}
	nodeClient, err := kubernetes.NewForConfig(node)
	if err != nil {
		return nil, nil, err
	}
	certs = New(Client, nodeName, func() (kubernetes.Interface, error) {
		// A node renews its certificate as itself while it can.
		if certs.Valid() != nil {
			return nodeClient, nil
		}
		return bootClient, nil
	}, Options{Dir: o.Dir, Clock: o.Clock, Rotated: dialer.CloseAll})

	if !certs.LoadStored(ctx) {
		klog.FromContext(ctx).Info("Requesting a client certificate with the bootstrap kubeconfig", "bootstrapKubeconfig", o.BootstrapKubeconfig)
		if err := certs.Request(ctx); err != nil {
			return nil, nil, fmt.Errorf("TLS bootstrap: %w", err)
		}
	}
	if o.Kubeconfig != "" {
		if err := writeKubeconfig(o.Kubeconfig, boot, certs.Path()); err != nil {
			return nil, nil, err
		}
	}
	return node, certs, nil
}

// certificateConfig is boot's server and CA with the client certificate
// that certs hands out at each handshake, on connections that dialer can
// close all at once.
func certificateConfig(boot *rest.Config, certs func() *Certificates, dialer *connrotation.Dialer) (*rest.Config, error) {
	tlsConfig, err := rest.TLSConfigFor(&rest.Config{Host: boot.Host, TLSClientConfig: rest.TLSClientConfig{
		Insecure: boot.Insecure, ServerName: boot.ServerName, CAFile: boot.CAFile, CAData: boot.CAData,
	}})
	if err != nil {
		return nil, err
	}
	if tlsConfig == nil {
		return nil, fmt.Errorf("server %s: a client certificate needs https", boot.Host)
	}
	tlsConfig.GetClientCertificate = func(req *tls.CertificateRequestInfo) (*tls.Certificate, error) {
		return certs().GetClientCertificate(req)
	}
	transport := utilnet.SetTransportDefaults(&http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		TLSHandshakeTimeout: 10 * time.Second,
		TLSClientConfig:     tlsConfig,
		MaxIdleConnsPerHost: 25,
		DialContext:         dialer.DialContext,
	})
	return &rest.Config{Host: boot.Host, APIPath: boot.APIPath, Timeout: boot.Timeout, Transport: transport}, nil
}

// writeKubeconfig writes a kubeconfig for boot's server with the client
// certificate and key in certFile.
func writeKubeconfig(path string, boot *rest.Config, certFile string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["default-cluster"] = &clientcmdapi.Cluster{
		Server: boot.Host, TLSServerName: boot.ServerName, InsecureSkipTLSVerify: boot.Insecure,
		CertificateAuthority: boot.CAFile, CertificateAuthorityData: boot.CAData,
	}
	cfg.AuthInfos["default-auth"] = &clientcmdapi.AuthInfo{ClientCertificate: certFile, ClientKey: certFile}
	cfg.Contexts["default-context"] = &clientcmdapi.Context{Cluster: "default-cluster", AuthInfo: "default-auth"}
	cfg.CurrentContext = "default-context"
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	if err := atomicfile.Write(path, data, atomicfile.Options{Perm: 0o600}); err != nil {
		return fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	return nil
}
