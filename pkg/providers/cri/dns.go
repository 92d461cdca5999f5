package cri

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	netutils "k8s.io/utils/net"
)

// defaultResolvConf is the host resolver configuration the kubelet reads by
// default (its --resolv-conf).
const defaultResolvConf = "/etc/resolv.conf"

// The resolver limits the API server validates a pod's dnsConfig against,
// and the kubelet cuts a pod's merged DNS configuration to.
const (
	maxDNSNameservers     = 3
	maxDNSSearchPaths     = 32
	maxDNSSearchListChars = 2048
	maxResolvConfBytes    = 10 << 20
)

// clusterDNSOptions are the resolver options of a pod using the cluster DNS.
var clusterDNSOptions = []string{"ndots:5"}

// dnsOptions are the node's DNS settings.
type dnsOptions struct {
	// ClusterDNS are the addresses of the cluster DNS servers. Without any,
	// pods with dnsPolicy ClusterFirst get the host's DNS (and a
	// MissingClusterDNS warning), as the kubelet does.
	ClusterDNS []string
	// ClusterDomain is the cluster's DNS domain ("cluster.local"); empty
	// means no cluster search path.
	ClusterDomain string
	// ResolvConf is the host's resolver configuration file, as the kubelet's
	// --resolv-conf: the base of pods that use the host's DNS, and the source
	// of the search path appended for pods that use the cluster DNS.
	// Callers default it to defaultResolvConf. Empty means the host has
	// none, as --resolv-conf="" does: pods that use the host's DNS get the
	// node's loopback resolver (127.0.0.1, or ::1 for an IPv6 node) and
	// search path ".".
	ResolvConf string
	// NodeIPs pick the loopback resolvers when ResolvConf is empty.
	NodeIPs []net.IP
}

// warning is a Warning event about a pod that the caller records on it;
// the translation itself never writes to the API.
type warning struct {
	Reason  string
	Message string
}

// podDNSConfig is the DNS configuration of the pod's sandbox, built as the
// kubelet builds it. It reads opts.ResolvConf; the warnings say what was
// cut to fit the resolver limits or that the cluster DNS is missing. An
// invalid dnsPolicy or dnsConfig gives an error naming the field.
func podDNSConfig(pod *corev1.Pod, opts dnsOptions) (*runtimeapi.DNSConfig, []warning, error) {
	if err := validatePodDNS(pod); err != nil {
		return nil, nil, err
	}
	host, err := hostDNSConfig(opts.ResolvConf)
	if err != nil {
		return nil, nil, err
	}
	cfg, warnings := formPodDNSConfig(pod, opts, host)
	return cfg, warnings, nil
}

// hostDNSConfig reads the host's resolver configuration; an empty path
// gives an empty configuration.
func hostDNSConfig(path string) (*runtimeapi.DNSConfig, error) {
	if path == "" {
		return &runtimeapi.DNSConfig{}, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("host resolver configuration: %w", err)
	}
	defer f.Close()
	cfg, err := parseResolvConf(f)
	if err != nil {
		return nil, fmt.Errorf("host resolver configuration %s: %w", path, err)
	}
	return cfg, nil
}

// parseResolvConf reads a resolv.conf: every nameserver line adds a server,
// the last search line wins (its domains without a trailing dot; the root
// domain "." is left out), and options accumulate, a later option replacing
// an earlier one of the same name.
func parseResolvConf(r io.Reader) (*runtimeapi.DNSConfig, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxResolvConfBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxResolvConfBytes {
		return nil, fmt.Errorf("larger than %d bytes", maxResolvConfBytes)
	}
	cfg := &runtimeapi.DNSConfig{Servers: []string{}, Searches: []string{}, Options: []string{}}
	var errs []error
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	sc.Buffer(nil, maxResolvConfBytes)
	for line := 1; sc.Scan(); line++ {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		switch fields[0] {
		case "nameserver":
			if len(fields) < 2 {
				errs = append(errs, fmt.Errorf("line %d: nameserver without an address", line))
				continue
			}
			cfg.Servers = append(cfg.Servers, fields[1])
		case "search":
			cfg.Searches = []string{}
			for _, s := range fields[1:] {
				if s != "." {
					cfg.Searches = append(cfg.Searches, strings.TrimSuffix(s, "."))
				}
			}
		case "options":
			cfg.Options = mergeOptions(cfg.Options, fields[1:])
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return cfg, errors.Join(errs...)
}

// formPodDNSConfig builds the pod's DNS configuration from the host's.
func formPodDNSConfig(pod *corev1.Pod, opts dnsOptions, host *runtimeapi.DNSConfig) (*runtimeapi.DNSConfig, []warning) {
	var warnings []warning
	cfg := &runtimeapi.DNSConfig{
		Servers:  slices.Clone(host.Servers),
		Searches: slices.Clone(host.Searches),
		Options:  slices.Clone(host.Options),
	}
	policy := pod.Spec.DNSPolicy
	if policy == corev1.DNSClusterFirst && pod.Spec.HostNetwork {
		policy = corev1.DNSDefault
	}
	if policy == "" || policy == corev1.DNSClusterFirst || policy == corev1.DNSClusterFirstWithHostNet {
		if len(opts.ClusterDNS) > 0 {
			cfg.Servers = slices.Clone(opts.ClusterDNS)
			cfg.Searches = clusterSearches(pod.Namespace, opts.ClusterDomain, host.Searches)
			cfg.Options = slices.Clone(clusterDNSOptions)
		} else {
			warnings = append(warnings, warning{
				Reason: "MissingClusterDNS",
				Message: fmt.Sprintf("pod: %q. nodelet does not have ClusterDNS IP configured and cannot create Pod using %q policy. Falling back to %q policy.",
					podDesc(pod), corev1.DNSClusterFirst, corev1.DNSDefault),
			})
			policy = corev1.DNSDefault
		}
	}
	switch policy {
	case corev1.DNSNone:
		cfg = &runtimeapi.DNSConfig{}
	case corev1.DNSDefault:
		if opts.ResolvConf == "" {
			cfg.Servers = loopbackResolvers(opts.NodeIPs)
			cfg.Searches = []string{"."}
		}
	}
	if dc := pod.Spec.DNSConfig; dc != nil {
		cfg.Servers = withoutDuplicates(append(cfg.Servers, dc.Nameservers...))
		cfg.Searches = withoutDuplicates(append(cfg.Searches, dc.Searches...))
		more := make([]string, 0, len(dc.Options))
		for _, o := range dc.Options {
			if o.Value != nil && *o.Value != "" {
				more = append(more, o.Name+":"+*o.Value)
			} else {
				more = append(more, o.Name)
			}
		}
		cfg.Options = mergeOptions(cfg.Options, more)
	}
	if len(cfg.Servers) > maxDNSNameservers {
		cfg.Servers = cfg.Servers[:maxDNSNameservers]
		warnings = append(warnings, warning{
			Reason:  "DNSConfigForming",
			Message: "Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: " + strings.Join(cfg.Servers, " "),
		})
	}
	var cut bool
	cfg.Searches, cut = fitSearches(cfg.Searches)
	if cut {
		warnings = append(warnings, warning{
			Reason:  "DNSConfigForming",
			Message: "Search Line limits were exceeded, some search paths have been omitted, the applied search line is: " + strings.Join(cfg.Searches, " "),
		})
	}
	return cfg, warnings
}

// clusterSearches is the search path of a pod using the cluster DNS: its
// namespace's services, all services and the cluster domain, then the
// host's search path.
func clusterSearches(namespace, domain string, host []string) []string {
	if domain == "" {
		return slices.Clone(host)
	}
	s := []string{namespace + ".svc." + domain, "svc." + domain, domain}
	return withoutDuplicates(append(s, host...))
}

// loopbackResolvers are the resolvers of a host without a resolver
// configuration: the loopback address of each node address's family.
func loopbackResolvers(nodeIPs []net.IP) []string {
	var servers []string
	for _, ip := range nodeIPs {
		if netutils.IsIPv6(ip) {
			servers = append(servers, "::1")
		} else {
			servers = append(servers, "127.0.0.1")
		}
	}
	if len(servers) == 0 {
		return []string{"127.0.0.1"}
	}
	return withoutDuplicates(servers)
}

// fitSearches cuts a search path to the resolver limits: at most
// maxDNSSearchPaths domains, none longer than a DNS name, and at most
// maxDNSSearchListChars characters in all; cut says whether it dropped any.
func fitSearches(searches []string) (fitted []string, cut bool) {
	if len(searches) > maxDNSSearchPaths {
		searches, cut = searches[:maxDNSSearchPaths], true
	}
	fitted = make([]string, 0, len(searches))
	for _, s := range searches {
		if len(s) > validation.DNS1123SubdomainMaxLength {
			cut = true
			continue
		}
		fitted = append(fitted, s)
	}
	for len(strings.Join(fitted, " ")) > maxDNSSearchListChars {
		fitted, cut = fitted[:len(fitted)-1], true
	}
	return fitted, cut
}

// mergeOptions adds resolver options ("name" or "name:value") to a list,
// an option replacing an earlier one of the same name in its place.
func mergeOptions(options, more []string) []string {
	out := slices.Clone(options)
	for _, o := range more {
		name, _, _ := strings.Cut(o, ":")
		i := slices.IndexFunc(out, func(e string) bool {
			n, _, _ := strings.Cut(e, ":")
			return n == name
		})
		if i >= 0 {
			out[i] = o
		} else {
			out = append(out, o)
		}
	}
	return out
}

// withoutDuplicates keeps the first of equal strings, in order.
func withoutDuplicates(s []string) []string {
	seen := make(map[string]bool, len(s))
	out := make([]string, 0, len(s))
	for _, v := range s {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// validatePodDNS checks the pod's dnsPolicy and dnsConfig as the API server
// does, so that a pod the API server would refuse fails with the same
// field errors instead of getting a half-working resolver.
func validatePodDNS(pod *corev1.Pod) error {
	spec := field.NewPath("spec")
	var errs field.ErrorList
	switch pod.Spec.DNSPolicy {
	case "", corev1.DNSClusterFirst, corev1.DNSClusterFirstWithHostNet, corev1.DNSDefault, corev1.DNSNone:
	default:
		errs = append(errs, field.NotSupported(spec.Child("dnsPolicy"), pod.Spec.DNSPolicy,
			[]corev1.DNSPolicy{corev1.DNSClusterFirst, corev1.DNSClusterFirstWithHostNet, corev1.DNSDefault, corev1.DNSNone}))
	}
	dc, path := pod.Spec.DNSConfig, spec.Child("dnsConfig")
	if pod.Spec.DNSPolicy == corev1.DNSNone {
		if dc == nil {
			return append(errs, field.Required(path, "must be provided when dnsPolicy is None")).ToAggregate()
		}
		if len(dc.Nameservers) == 0 {
			return append(errs, field.Required(path.Child("nameservers"), "must provide at least one nameserver when dnsPolicy is None")).ToAggregate()
		}
	}
	if dc == nil {
		return errs.ToAggregate()
	}
	if len(dc.Nameservers) > maxDNSNameservers {
		errs = append(errs, field.TooMany(path.Child("nameservers"), len(dc.Nameservers), maxDNSNameservers))
	}
	for i, ns := range dc.Nameservers {
		if netutils.ParseIPSloppy(ns) == nil {
			errs = append(errs, field.Invalid(path.Child("nameservers").Index(i), ns, "must be a valid IP address"))
		}
	}
	if len(dc.Searches) > maxDNSSearchPaths {
		errs = append(errs, field.TooMany(path.Child("searches"), len(dc.Searches), maxDNSSearchPaths))
	}
	if n := len(strings.Join(dc.Searches, " ")); n > maxDNSSearchListChars {
		errs = append(errs, field.TooLong(path.Child("searches"), "", maxDNSSearchListChars))
	}
	for i, s := range dc.Searches {
		if s == "." {
			continue
		}
		for _, msg := range validation.IsDNS1123SubdomainWithUnderscore(strings.TrimSuffix(s, ".")) {
			errs = append(errs, field.Invalid(path.Child("searches").Index(i), s, msg))
		}
	}
	for i, o := range dc.Options {
		if o.Name == "" {
			errs = append(errs, field.Required(path.Child("options").Index(i).Child("name"), "must not be empty"))
		}
	}
	return errs.ToAggregate()
}

// podDesc names a pod in messages as the kubelet does: name_namespace(uid).
func podDesc(pod *corev1.Pod) string {
	return fmt.Sprintf("%s_%s(%s)", pod.Name, pod.Namespace, pod.UID)
}
