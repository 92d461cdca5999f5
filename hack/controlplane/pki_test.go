package main

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestAPIServerCertificateNamesWhatPodsUse: the apiserver's certificate
// names the kubernetes Service's ClusterIP and DNS names and the advertised
// address; one issued without them (an older directory, or another host
// address) is issued again by the same CA, and one that has them all is
// kept.
func TestAPIServerCertificateNamesWhatPodsUse(t *testing.T) {
	dir := t.TempDir()
	p := &pki{dir: dir}
	ca, _, err := p.ensureCA("ca", "controlplane-ca")
	if err != nil {
		t.Fatal(err)
	}
	// As an earlier version issued it: loopback names alone.
	if err := p.issue(ca, "apiserver", "kube-apiserver", nil, true, []string{"localhost", "kubernetes"},
		[]net.IP{net.IPv4(127, 0, 0, 1)}); err != nil {
		t.Fatal(err)
	}
	host := net.IPv4(192, 0, 2, 7)
	if _, err := ensurePKI(dir, host); err != nil {
		t.Fatal(err)
	}
	cert, err := readCert(filepath.Join(dir, "apiserver.crt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, ip := range []net.IP{host, net.IPv4(10, 96, 0, 1), net.IPv4(127, 0, 0, 1)} {
		if !slices.ContainsFunc(cert.IPAddresses, ip.Equal) {
			t.Errorf("certificate addresses %v lack %s", cert.IPAddresses, ip)
		}
	}
	for _, n := range []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"} {
		if !slices.Contains(cert.DNSNames, n) {
			t.Errorf("certificate names %v lack %s", cert.DNSNames, n)
		}
	}
	if err := cert.CheckSignatureFrom(ca.cert); err != nil {
		t.Errorf("reissued certificate not signed by the directory's CA: %v", err)
	}

	before, _ := os.ReadFile(filepath.Join(dir, "apiserver.crt"))
	if _, err := ensurePKI(dir, host); err != nil {
		t.Fatal(err)
	}
	after, _ := os.ReadFile(filepath.Join(dir, "apiserver.crt"))
	if !bytes.Equal(before, after) {
		t.Error("a certificate naming everything was issued again")
	}
	if _, err := ensurePKI(dir, net.IPv4(192, 0, 2, 8)); err != nil {
		t.Fatal(err)
	}
	if cert, _ = readCert(filepath.Join(dir, "apiserver.crt")); !slices.ContainsFunc(cert.IPAddresses, net.IPv4(192, 0, 2, 8).Equal) {
		t.Errorf("after the host address changed, certificate addresses %v lack the new one", cert.IPAddresses)
	}
}
