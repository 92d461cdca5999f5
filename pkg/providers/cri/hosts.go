package cri

import (
	"bytes"
	"fmt"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// etcHostsPath is where containers find the hosts file, and where the node
// keeps its own.
const etcHostsPath = "/etc/hosts"

// needsHostsFile says whether the pod's containers get a managed /etc/hosts,
// as the kubelet decides: pods on the host network always, other pods once
// their sandbox has an IP address.
func needsHostsFile(pod *corev1.Pod, podIPs []string) bool {
	return pod.Spec.HostNetwork || len(podIPs) > 0
}

// podHostsFile is the content of the pod's managed /etc/hosts: for a pod on
// the host network, the node's hosts file (read from nodeHostsPath, which
// callers default to etcHostsPath) with the pod's host aliases; for any
// other pod, the file managedHostsFile builds.
func podHostsFile(pod *corev1.Pod, podIPs []string, clusterDomain, nodeHostsPath string) ([]byte, error) {
	if err := checkHostAliases(pod.Spec.HostAliases); err != nil {
		return nil, err
	}
	if pod.Spec.HostNetwork {
		node, err := os.ReadFile(nodeHostsPath)
		if err != nil {
			return nil, fmt.Errorf("read the node's hosts file: %w", err)
		}
		return hostNetworkHostsFile(node, pod.Spec.HostAliases), nil
	}
	hostname, domain, err := podHostnameAndDomain(pod, clusterDomain)
	if err != nil {
		return nil, err
	}
	return managedHostsFile(podIPs, hostname, domain, pod.Spec.HostAliases), nil
}

// managedHostsFile is the hosts file of a pod on the pod network, as the
// kubelet writes it: the localhost entries, each pod IP with the pod's host
// name (preceded by its FQDN when the pod has a domain), then the pod's
// host aliases.
func managedHostsFile(podIPs []string, hostname, domain string, aliases []corev1.HostAlias) []byte {
	var b bytes.Buffer
	b.WriteString("# Kubernetes-managed hosts file.\n")
	b.WriteString("127.0.0.1\tlocalhost\n")
	b.WriteString("::1\tlocalhost ip6-localhost ip6-loopback\n")
	b.WriteString("fe00::0\tip6-localnet\n")
	b.WriteString("fe00::0\tip6-mcastprefix\n")
	b.WriteString("fe00::1\tip6-allnodes\n")
	b.WriteString("fe00::2\tip6-allrouters\n")
	for _, ip := range podIPs {
		if domain != "" {
			fmt.Fprintf(&b, "%s\t%s.%s\t%s\n", ip, hostname, domain, hostname)
		} else {
			fmt.Fprintf(&b, "%s\t%s\n", ip, hostname)
		}
	}
	writeHostAliases(&b, aliases)
	return b.Bytes()
}

// hostNetworkHostsFile is the hosts file of a pod on the host network: the
// node's own, then the pod's host aliases.
func hostNetworkHostsFile(node []byte, aliases []corev1.HostAlias) []byte {
	var b bytes.Buffer
	b.WriteString("# Kubernetes-managed hosts file (host network).\n")
	b.Write(node)
	writeHostAliases(&b, aliases)
	return b.Bytes()
}

// checkHostAliases refuses host aliases the API would refuse: an address
// that is no IP, a name that is no DNS subdomain. The API checks the pods
// it stores, but not static pods, and an alias written as given could add
// or replace any entry of the file ("x\n10.0.0.1 kubernetes").
func checkHostAliases(aliases []corev1.HostAlias) error {
	for i, a := range aliases {
		path := field.NewPath("spec", "hostAliases").Index(i)
		if errs := validation.IsValidIPForLegacyField(path.Child("ip"), a.IP, false, nil); len(errs) > 0 {
			return errs[0]
		}
		for j, name := range a.Hostnames {
			if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
				return field.Invalid(path.Child("hostnames").Index(j), name, strings.Join(msgs, "; "))
			}
		}
	}
	return nil
}

// writeHostAliases appends the section of a pod's host aliases, one line
// per address.
func writeHostAliases(b *bytes.Buffer, aliases []corev1.HostAlias) {
	if len(aliases) == 0 {
		return
	}
	b.WriteString("\n# Entries added by HostAliases.\n")
	for _, a := range aliases {
		fmt.Fprintf(b, "%s\t%s\n", a.IP, strings.Join(a.Hostnames, "\t"))
	}
}
