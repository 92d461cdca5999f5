package nodecert

import (
	"crypto/x509"
	"net"
	"slices"
)

// Uncovered names a host that cert is not valid for, or is "".
func Uncovered(cert *x509.Certificate, hosts []string) string {
	for _, h := range hosts {
		if h == "" {
			continue
		}
		if ip := net.ParseIP(h); ip != nil {
			if !slices.ContainsFunc(cert.IPAddresses, ip.Equal) {
				return "does not cover " + h
			}
		} else if !slices.Contains(cert.DNSNames, h) {
			return "does not cover " + h
		}
	}
	return ""
}

// SplitHosts sorts hosts into DNS names and IP addresses, skipping empty
// and repeated ones.
func SplitHosts(hosts []string) (dnsNames []string, ips []net.IP) {
	for _, h := range hosts {
		if h == "" {
			continue
		}
		if ip := net.ParseIP(h); ip != nil {
			if !slices.ContainsFunc(ips, ip.Equal) {
				ips = append(ips, ip)
			}
		} else if !slices.Contains(dnsNames, h) {
			dnsNames = append(dnsNames, h)
		}
	}
	return dnsNames, ips
}
