package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/csrtest"
)

// TestServerTLSBootstrap serves nothing until the CSR is approved, then the
// issued certificate, verifiable with the CA, without a restart.
func TestServerTLSBootstrap(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client, ca := csrtest.NewClient(), csrtest.NewCA(t)
	s, err := New(client, newBackend(), Options{
		NodeName: "node-a", Hosts: []string{"node-a", "127.0.0.1"}, TLSBootstrap: true, CertDir: t.TempDir(),
		AuthorizationMode: AuthorizationModeAlwaysAllow, WebhookAuthentication: ptr.To(false), Anonymous: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.serve(ctx, ln, nil) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})

	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	dial := func() (*x509.Certificate, error) {
		conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"})
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0], nil
	}
	obj := client.WaitCSRs(t, 1)
	if _, err := dial(); err == nil {
		t.Fatal("TLS handshake succeeded before the CSR was approved")
	}
	select {
	case err := <-done:
		t.Fatalf("server stopped while the CSR was pending: %v", err)
	default:
	}
	issued := client.Approve(t, ca, obj, time.Now().Add(-time.Minute), time.Hour)
	var served *x509.Certificate
	csrtest.Poll(t, "the issued certificate served", func() bool {
		served, err = dial()
		return err == nil
	})
	if served.SerialNumber.Cmp(issued.SerialNumber) != 0 {
		t.Errorf("served serial %v, want the issued %v", served.SerialNumber, issued.SerialNumber)
	}
}

func TestNewTLSBootstrapOptions(t *testing.T) {
	if _, err := New(fake.NewClientset(), newBackend(), Options{NodeName: "n", TLSBootstrap: true, TLSCertFile: "c", TLSPrivateKeyFile: "k"}); err == nil || !strings.Contains(err.Error(), "tlsBootstrap") {
		t.Errorf("New with tlsBootstrap and tlsCertFile = %v, want an error naming tlsBootstrap", err)
	}
	if _, err := New(nil, newBackend(), Options{NodeName: "n", TLSBootstrap: true, AuthorizationMode: AuthorizationModeAlwaysAllow, Anonymous: true, WebhookAuthentication: ptr.To(false)}); err == nil || !strings.Contains(err.Error(), "tlsBootstrap") {
		t.Errorf("New with tlsBootstrap and no client = %v, want an error naming tlsBootstrap", err)
	}
}
