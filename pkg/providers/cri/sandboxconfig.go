package cri

import (
	"fmt"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	netutils "k8s.io/utils/net"

	"github.com/nodelet/nodelet/pkg/podrules"
)

// sandboxParams are the inputs of a pod's sandbox configuration that the
// runtime works out before RunPodSandbox. The runtime handler of the pod's
// RuntimeClass is an argument of RunPodSandbox, not part of them.
type sandboxParams struct {
	// Attempt counts the sandboxes created for the pod before this one.
	Attempt uint32
	// DNS is the pod's resolver configuration (podDNSConfig).
	DNS *runtimeapi.DNSConfig
	// CgroupParent is the pod's cgroup, in the runtime's cgroup driver's
	// form ("kubepods-burstable-pod<uid>.slice" or a path).
	CgroupParent string
	// ExtraGroups are supplemental groups the pod's volumes need.
	ExtraGroups []int64
	// UserNamespace is the pod's user namespace when it has one
	// (spec.hostUsers false); nil for the node's.
	UserNamespace *runtimeapi.UserNamespace
}

// sandboxConfig is the configuration of the pod's sandbox, as the kubelet
// builds it: the pod's identity and attempt, its host name (not on the host
// network), log directory, DNS, the port mappings of its containers, labels
// and annotations, and the Linux settings: cgroup parent, sysctls, security
// context and the pod's resources and overhead. An error names the field of
// the pod that cannot be translated.
func sandboxConfig(pod *corev1.Pod, node nodeSettings, p sandboxParams) (*runtimeapi.PodSandboxConfig, error) {
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{
			Name:      pod.Name,
			Namespace: pod.Namespace,
			Uid:       string(pod.UID),
			Attempt:   p.Attempt,
		},
		LogDirectory: podLogDir(node.PodLogsDir, pod.Namespace, pod.Name, pod.UID),
		DnsConfig:    p.DNS,
		PortMappings: portMappings(pod),
		Labels:       sandboxLabels(pod, node.NodeName),
		Annotations:  sandboxAnnotations(pod),
	}
	if !pod.Spec.HostNetwork {
		hostname, domain, err := podHostnameAndDomain(pod, node.DNS.ClusterDomain)
		if err != nil {
			return nil, err
		}
		if cfg.Hostname, err = kernelHostname(pod, hostname, domain); err != nil {
			return nil, err
		}
	}
	sc, err := sandboxSecurityContext(pod, p.ExtraGroups, p.UserNamespace)
	if err != nil {
		return nil, err
	}
	sysctls := map[string]string{}
	if pod.Spec.SecurityContext != nil {
		for _, s := range pod.Spec.SecurityContext.Sysctls {
			sysctls[podrules.SysctlDots(s.Name)] = s.Value
		}
	}
	resources, overhead := sandboxResources(pod, node)
	cfg.Linux = &runtimeapi.LinuxPodSandboxConfig{
		CgroupParent:    p.CgroupParent,
		SecurityContext: sc,
		Sysctls:         sysctls,
		Resources:       resources,
		Overhead:        overhead,
	}
	return cfg, nil
}

// podLogDir is the directory of a pod's container logs, as the kubelet
// names it: <root>/<namespace>_<name>_<uid>.
func podLogDir(root, namespace, name string, uid types.UID) string {
	return filepath.Join(root, fmt.Sprintf("%s_%s_%s", namespace, name, uid))
}

// portMappings are the ports of the pod's regular containers, as the kubelet
// passes them (with or without a host port; runtimes map only those with
// one). A port whose name another port of the same container already has
// is left out.
func portMappings(pod *corev1.Pod) []*runtimeapi.PortMapping {
	var mappings []*runtimeapi.PortMapping
	for _, c := range pod.Spec.Containers {
		names := map[string]bool{}
		for _, p := range c.Ports {
			name := p.Name
			if name == "" {
				family := "any"
				if ip := p.HostIP; ip != "" {
					family = "v4"
					if netutils.IsIPv6String(ip) {
						family = "v6"
					}
				}
				name = fmt.Sprintf("%s-%s-%s:%d:%d", family, p.Protocol, p.HostIP, p.ContainerPort, p.HostPort)
			}
			if names[name] {
				continue
			}
			names[name] = true
			mappings = append(mappings, &runtimeapi.PortMapping{
				Protocol:      runtimeProtocol(p.Protocol),
				ContainerPort: p.ContainerPort,
				HostPort:      p.HostPort,
				HostIp:        p.HostIP,
			})
		}
	}
	return mappings
}

// runtimeProtocol converts a port's protocol; TCP when unset or unknown.
func runtimeProtocol(p corev1.Protocol) runtimeapi.Protocol {
	switch p {
	case corev1.ProtocolUDP:
		return runtimeapi.Protocol_UDP
	case corev1.ProtocolSCTP:
		return runtimeapi.Protocol_SCTP
	}
	return runtimeapi.Protocol_TCP
}
