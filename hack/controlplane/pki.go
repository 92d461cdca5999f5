package main

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// pki is the set of keys and certificates a local control plane needs. All
// of it is generated once per directory and reused by later runs.
type pki struct {
	dir string
}

// authority is a CA's certificate and the key it signs with.
type authority struct {
	cert *x509.Certificate
	key  crypto.Signer
}

func (p *pki) path(name string) string { return filepath.Join(p.dir, name) }

// ensurePKI loads the CA in dir, creating it and every leaf certificate that is
// missing. The apiserver's serving certificate names every address and name
// its clients use: loopback, the kubernetes Service's ClusterIP and DNS
// names, and the advertised address; one that lacks any (made by an
// earlier version, or for another host address) is issued again.
func ensurePKI(dir string, advertise net.IP) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := &pki{dir: dir}
	ca, _, err := p.ensureCA("ca", "controlplane-ca")
	if err != nil {
		return nil, fmt.Errorf("certificate authority: %w", err)
	}
	leaves := []struct {
		name    string
		cn      string
		orgs    []string
		server  bool
		dnsSANs []string
		ipSANs  []net.IP
	}{
		{name: "apiserver", cn: "kube-apiserver", server: true,
			dnsSANs: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
			ipSANs:  apiserverIPs(advertise)},
		{name: "admin", cn: "kubernetes-admin", orgs: []string{"system:masters"}},
		{name: "apiserver-kubelet-client", cn: "kube-apiserver-kubelet-client", orgs: []string{"system:masters"}},
	}
	for _, l := range leaves {
		if fileExists(p.path(l.name+".crt")) && fileExists(p.path(l.name+".key")) {
			covered, err := names(p.path(l.name+".crt"), l.dnsSANs, l.ipSANs)
			if err != nil {
				return nil, fmt.Errorf("certificate %s: %w", l.name, err)
			}
			if covered {
				continue
			}
		}
		if err := p.issue(ca, l.name, l.cn, l.orgs, l.server, l.dnsSANs, l.ipSANs); err != nil {
			return nil, fmt.Errorf("certificate %s: %w", l.name, err)
		}
	}
	if !fileExists(p.path("sa.key")) {
		if err := writeServiceAccountKey(p.path("sa.key"), p.path("sa.pub")); err != nil {
			return nil, fmt.Errorf("service-account key: %w", err)
		}
	}
	return p, nil
}

// ensureFrontProxy makes what the apiserver's aggregator needs to proxy
// requests to an extension API server such as metrics-server: its own CA
// (front-proxy-ca), which the extension server trusts to vouch for the user
// in X-Remote-* headers, and the client certificate the apiserver presents
// (front-proxy-client, the only name allowed). It is a CA apart from the
// cluster's so that no ordinary client certificate can assert another user
// through those headers. A new CA gets a new client certificate.
func (p *pki) ensureFrontProxy() error {
	ca, created, err := p.ensureCA("front-proxy-ca", "front-proxy-ca")
	if err != nil {
		return fmt.Errorf("front-proxy certificate authority: %w", err)
	}
	if !created && fileExists(p.path("front-proxy-client.crt")) && fileExists(p.path("front-proxy-client.key")) {
		return nil
	}
	if err := p.issue(ca, "front-proxy-client", "front-proxy-client", nil, false, nil, nil); err != nil {
		return fmt.Errorf("certificate front-proxy-client: %w", err)
	}
	return nil
}

// ensureCA loads the CA in name.crt and name.key, creating it (CN cn) when
// either is missing; created says it was.
func (p *pki) ensureCA(name, cn string) (ca authority, created bool, err error) {
	if fileExists(p.path(name+".crt")) && fileExists(p.path(name+".key")) {
		if ca.cert, err = readCert(p.path(name + ".crt")); err != nil {
			return ca, false, err
		}
		if ca.key, err = readKey(p.path(name + ".key")); err != nil {
			return ca, false, err
		}
		return ca, false, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return ca, false, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return ca, false, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return ca, false, err
	}
	if err := writeKeyPair(p.path(name), der, key); err != nil {
		return ca, false, err
	}
	return authority{cert: cert, key: key}, true, nil
}

func (p *pki) issue(ca authority, name, cn string, orgs []string, server bool, dnsSANs []string, ipSANs []net.IP) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	usage := x509.ExtKeyUsageClientAuth
	if server {
		usage = x509.ExtKeyUsageServerAuth
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().AddDate(10, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     dnsSANs,
		IPAddresses:  ipSANs,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return err
	}
	return writeKeyPair(p.path(name), der, key)
}

// apiserverIPs are the addresses the apiserver's certificate names.
func apiserverIPs(advertise net.IP) []net.IP {
	ips := []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback, kubernetesServiceIP}
	if !advertise.IsLoopback() {
		ips = append(ips, advertise)
	}
	return ips
}

// names tells whether the certificate at path names every DNS name and
// address given.
func names(path string, dnsNames []string, ips []net.IP) (bool, error) {
	cert, err := readCert(path)
	if err != nil {
		return false, err
	}
	for _, n := range dnsNames {
		if !slices.Contains(cert.DNSNames, n) {
			return false, nil
		}
	}
	for _, ip := range ips {
		if !slices.ContainsFunc(cert.IPAddresses, ip.Equal) {
			return false, nil
		}
	}
	return true, nil
}

func writeServiceAccountKey(keyPath, pubPath string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return err
	}
	if err := os.WriteFile(pubPath, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600)
}

func writeKeyPair(base string, certDER []byte, key *ecdsa.PrivateKey) error {
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(base+".key", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(base+".crt", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: certDER}), 0o644)
}

func readCert(path string) (*x509.Certificate, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("%s: no PEM data", path)
	}
	return x509.ParseCertificate(block.Bytes)
}

func readKey(path string) (crypto.Signer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("%s: no PEM data", path)
	}
	return x509.ParseECPrivateKey(block.Bytes)
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, os.ErrNotExist)
}
