package server

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/atomicfile"
	"github.com/nodelet/nodelet/pkg/nodecert"
)

// Names of the self-signed serving certificate and key under CertDir (a
// requested one is kept as nodecert.Serving says).
const (
	certFileName = "nodelet.crt"
	keyFileName  = "nodelet.key"
)

// selfSignedValidity is how long a generated serving certificate is valid.
const selfSignedValidity = 365 * 24 * time.Hour

// tlsConfig returns the serving TLS configuration: the configured
// certificate, one requested through the certificates API, or a self-signed
// one for Hosts. With a requested certificate it also returns the loop that
// keeps it current, which must run while the server serves. HTTP/2 is not
// offered: the streaming endpoints upgrade HTTP/1.1 connections.
func (s *Server) tlsConfig(ctx context.Context) (*tls.Config, func(context.Context) error, error) {
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
	}
	var cert tls.Certificate
	var err error
	switch {
	case s.opts.TLSBootstrap:
		certs := nodecert.New(nodecert.Serving, s.opts.NodeName, func() (kubernetes.Interface, error) { return s.client, nil },
			nodecert.Options{Hosts: s.opts.Hosts, Dir: s.opts.CertDir})
		certs.LoadStored(ctx)
		cfg.GetCertificate = certs.GetCertificate
		return cfg, certs.Run, nil
	case s.opts.TLSCertFile != "":
		cert, err = tls.LoadX509KeyPair(s.opts.TLSCertFile, s.opts.TLSPrivateKeyFile)
		if err != nil {
			return nil, nil, fmt.Errorf("serving certificate: %w", err)
		}
	case s.opts.CertDir != "":
		cert, err = selfSignedInDir(ctx, s.opts.CertDir, s.opts.Hosts, time.Now())
		if err != nil {
			return nil, nil, fmt.Errorf("self-signed serving certificate: %w", err)
		}
	default:
		certPEM, keyPEM, err := selfSigned(s.opts.Hosts, time.Now())
		if err != nil {
			return nil, nil, fmt.Errorf("self-signed serving certificate: %w", err)
		}
		if cert, err = tls.X509KeyPair(certPEM, keyPEM); err != nil {
			return nil, nil, fmt.Errorf("self-signed serving certificate: %w", err)
		}
	}
	cfg.Certificates = []tls.Certificate{cert}
	return cfg, nil, nil
}

// selfSignedInDir reuses the certificate kept in dir while it is valid for
// another day and covers hosts; otherwise it makes and keeps a new one.
func selfSignedInDir(ctx context.Context, dir string, hosts []string, now time.Time) (tls.Certificate, error) {
	certPath, keyPath := filepath.Join(dir, certFileName), filepath.Join(dir, keyFileName)
	cert, err := tls.LoadX509KeyPair(certPath, keyPath)
	switch {
	case err == nil:
		reason := unusable(cert.Leaf, hosts, now)
		if reason == "" {
			return cert, nil
		}
		klog.FromContext(ctx).Info("Replacing the self-signed serving certificate", "path", certPath, "reason", reason)
	case errors.Is(err, fs.ErrNotExist):
	default:
		klog.FromContext(ctx).Info("Replacing an unreadable self-signed serving certificate", "path", certPath, "err", err)
	}

	certPEM, keyPEM, err := selfSigned(hosts, now)
	if err != nil {
		return tls.Certificate{}, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return tls.Certificate{}, fmt.Errorf("create %s: %w", dir, err)
	}
	if err := atomicfile.Write(keyPath, keyPEM, atomicfile.Options{Perm: 0o600}); err != nil {
		return tls.Certificate{}, err
	}
	if err := atomicfile.Write(certPath, certPEM, atomicfile.Options{Perm: 0o644}); err != nil {
		return tls.Certificate{}, err
	}
	return tls.X509KeyPair(certPEM, keyPEM)
}

// unusable says why cert cannot serve hosts now, or "" if it can.
func unusable(cert *x509.Certificate, hosts []string, now time.Time) string {
	if cert == nil {
		return "no certificate"
	}
	if now.Add(24 * time.Hour).After(cert.NotAfter) {
		return "expires within a day"
	}
	return nodecert.Uncovered(cert, hosts)
}

// selfSigned makes a self-signed serving certificate for hosts (DNS names
// and IP addresses) and its key, both PEM encoded.
func selfSigned(hosts []string, now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, fmt.Errorf("generate serial number: %w", err)
	}
	cn := "nodelet"
	if len(hosts) > 0 && hosts[0] != "" {
		cn = hosts[0]
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: fmt.Sprintf("%s@%d", cn, now.Unix())},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(selfSignedValidity),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	tmpl.DNSNames, tmpl.IPAddresses = nodecert.SplitHosts(hosts)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("create certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encode key: %w", err)
	}
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	return certPEM, keyPEM, nil
}
