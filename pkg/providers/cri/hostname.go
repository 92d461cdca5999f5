package cri

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Limits of a Linux host name: a label of the kernel's nodename, and the
// whole FQDN when the pod asks for it as its host name.
const (
	maxHostnameLen = 63
	maxFQDNLen     = 64
)

// podHostnameAndDomain is the pod's host name and, when it has a subdomain,
// its domain (<subdomain>.<namespace>.svc.<cluster domain>), as the kubelet
// computes them: spec.hostnameOverride if set (with no domain), else
// spec.hostname, else the pod's name, cut to 63 characters without a
// trailing '-' or '.'.
func podHostnameAndDomain(pod *corev1.Pod, clusterDomain string) (hostname, domain string, err error) {
	spec := field.NewPath("spec")
	if o := pod.Spec.HostnameOverride; o != nil {
		if msgs := validation.IsDNS1123Subdomain(*o); len(msgs) > 0 {
			return "", "", field.Invalid(spec.Child("hostnameOverride"), *o, strings.Join(msgs, "; "))
		}
		hostname, err := truncateHostname(pod, *o)
		return hostname, "", err
	}
	hostname = pod.Name
	if h := pod.Spec.Hostname; h != "" {
		if msgs := validation.IsDNS1123Label(h); len(msgs) > 0 {
			return "", "", field.Invalid(spec.Child("hostname"), h, strings.Join(msgs, "; "))
		}
		hostname = h
	}
	if hostname, err = truncateHostname(pod, hostname); err != nil {
		return "", "", err
	}
	if sub := pod.Spec.Subdomain; sub != "" {
		if msgs := validation.IsDNS1123Label(sub); len(msgs) > 0 {
			return "", "", field.Invalid(spec.Child("subdomain"), sub, strings.Join(msgs, "; "))
		}
		domain = sub + "." + pod.Namespace + ".svc"
		if clusterDomain != "" {
			domain += "." + clusterDomain
		}
	}
	return hostname, domain, nil
}

// truncateHostname cuts a host name to what the kernel accepts.
func truncateHostname(pod *corev1.Pod, hostname string) (string, error) {
	if len(hostname) <= maxHostnameLen {
		return hostname, nil
	}
	cut := strings.TrimRight(hostname[:maxHostnameLen], "-.")
	if cut == "" {
		return "", fmt.Errorf("hostname for pod %q was invalid: %q", pod.Name, hostname)
	}
	return cut, nil
}

// kernelHostname is the host name the pod's UTS namespace gets: the FQDN
// when the pod sets setHostnameAsFQDN and has a domain, else the host name.
func kernelHostname(pod *corev1.Pod, hostname, domain string) (string, error) {
	if domain == "" || pod.Spec.SetHostnameAsFQDN == nil || !*pod.Spec.SetHostnameAsFQDN {
		return hostname, nil
	}
	fqdn := hostname + "." + domain
	if len(fqdn) > maxFQDNLen {
		return "", fmt.Errorf("failed to construct FQDN from pod hostname and cluster domain, FQDN %s is too long (%d characters is the max, %d characters requested)",
			fqdn, maxFQDNLen, len(fqdn))
	}
	return fqdn, nil
}
