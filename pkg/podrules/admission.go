package podrules

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Refusal is why admission refuses a pod, as the kubelet words it: Reason
// is a CamelCase word, Message says why. It is not an error: a provider
// returns it as the contract's error, provider.Reject(r.Reason, "%s",
// r.Message), which fails the pod with both and is not retried.
type Refusal struct {
	Reason  string
	Message string
}

func refuse(reason, format string, args ...any) *Refusal {
	return &Refusal{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// Requests is what one pod asks of the node, in the units of the kubelet's
// admission messages.
type Requests struct {
	MilliCPU    int64
	MemoryBytes int64
}

// Add adds o to r.
func (r *Requests) Add(o Requests) {
	r.MilliCPU += o.MilliCPU
	r.MemoryBytes += o.MemoryBytes
}

// Sub takes o from r.
func (r *Requests) Sub(o Requests) {
	r.MilliCPU -= o.MilliCPU
	r.MemoryBytes -= o.MemoryBytes
}

func (r *Requests) atLeast(o Requests) {
	r.MilliCPU = max(r.MilliCPU, o.MilliCPU)
	r.MemoryBytes = max(r.MemoryBytes, o.MemoryBytes)
}

func containerRequests(c *corev1.Container) Requests {
	return listRequests(c.Resources.Requests)
}

func listRequests(l corev1.ResourceList) Requests {
	var r Requests
	if q, ok := l[corev1.ResourceCPU]; ok {
		r.MilliCPU = q.MilliValue()
	}
	if q, ok := l[corev1.ResourceMemory]; ok {
		r.MemoryBytes = q.Value()
	}
	return r
}

// PodRequests computes a pod's effective requests as the kubelet does
// (k8s.io/component-helpers/resource.PodRequests): the sum of its containers
// and restartable (sidecar) init containers, or the largest init container
// plus the sidecars started before it if that is more; pod-level requests
// replace the containers' where set; the pod overhead comes on top.
func PodRequests(pod *corev1.Pod) Requests {
	var sum, sidecars, initMax Requests
	for i := range pod.Spec.Containers {
		sum.Add(containerRequests(&pod.Spec.Containers[i]))
	}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		r := containerRequests(c)
		if IsSidecar(c) {
			sum.Add(r)
			sidecars.Add(r)
			initMax.atLeast(sidecars)
			continue
		}
		r.Add(sidecars)
		initMax.atLeast(r)
	}
	sum.atLeast(initMax)
	if pr := pod.Spec.Resources; pr != nil {
		if q, ok := pr.Requests[corev1.ResourceCPU]; ok {
			sum.MilliCPU = q.MilliValue()
		}
		if q, ok := pr.Requests[corev1.ResourceMemory]; ok {
			sum.MemoryBytes = q.Value()
		}
	}
	sum.Add(listRequests(pod.Spec.Overhead))
	return sum
}

// AdmitOS rejects, like the kubelet, a pod whose spec.os names another
// operating system than the node's (always Linux); nil admits it.
func AdmitOS(pod *corev1.Pod) *Refusal {
	if pod.Spec.OS != nil && pod.Spec.OS.Name != corev1.Linux {
		return refuse("PodOSNotSupported", "Failed to admit pod as the OS field doesn't match node OS: pod asks for %s, node runs %s", pod.Spec.OS.Name, corev1.Linux)
	}
	return nil
}

// AdmitAppArmor rejects, like the kubelet, a pod that asks for an AppArmor
// profile (other than unconfined, in a security context or the deprecated
// annotation) on a node that cannot enforce one; nil admits it.
func AdmitAppArmor(pod *corev1.Pod, enforced bool) *Refusal {
	if enforced || !RequiresAppArmor(pod) {
		return nil
	}
	return refuse("AppArmor", "Cannot enforce AppArmor: AppArmor is not enabled on the host")
}

// RequiresAppArmor tells whether the pod asks for an AppArmor profile
// other than unconfined: on itself, a container (ephemeral ones too) or
// in the deprecated annotations.
func RequiresAppArmor(pod *corev1.Pod) bool {
	confined := func(p *corev1.AppArmorProfile) bool {
		return p != nil && p.Type != corev1.AppArmorProfileTypeUnconfined
	}
	if sc := pod.Spec.SecurityContext; sc != nil && confined(sc.AppArmorProfile) {
		return true
	}
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			if c.SecurityContext != nil && confined(c.SecurityContext.AppArmorProfile) {
				return true
			}
		}
	}
	for _, c := range pod.Spec.EphemeralContainers {
		if c.SecurityContext != nil && confined(c.SecurityContext.AppArmorProfile) {
			return true
		}
	}
	for k, v := range pod.Annotations {
		if strings.HasPrefix(k, corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix) && v != corev1.DeprecatedAppArmorBetaProfileNameUnconfined {
			return true
		}
	}
	return false
}

// safeSysctls are the sysctls every pod may set, as the kubelet's: they are
// namespaced and cannot harm other pods or the node.
var safeSysctls = map[string]bool{
	"kernel.shm_rmid_forced":              true,
	"net.ipv4.ip_local_port_range":        true,
	"net.ipv4.tcp_syncookies":             true,
	"net.ipv4.ping_group_range":           true,
	"net.ipv4.ip_unprivileged_port_start": true,
	"net.ipv4.ip_local_reserved_ports":    true,
	"net.ipv4.tcp_keepalive_time":         true,
	"net.ipv4.tcp_fin_timeout":            true,
	"net.ipv4.tcp_keepalive_intvl":        true,
	"net.ipv4.tcp_keepalive_probes":       true,
	"net.ipv4.tcp_rmem":                   true,
	"net.ipv4.tcp_wmem":                   true,
}

// SysctlDots writes a sysctl name with dots as separators, as the kubelet
// reads "kernel/shm_rmid_forced": when the first separator is a slash,
// slashes and dots swap.
func SysctlDots(name string) string {
	i := strings.IndexAny(name, "./")
	if i < 0 || name[i] == '.' {
		return name
	}
	return strings.Map(func(r rune) rune {
		switch r {
		case '.':
			return '/'
		case '/':
			return '.'
		}
		return r
	}, name)
}

// AdmitSysctls rejects, like the kubelet, a pod that sets a sysctl outside
// the safe set and allowed (names, or prefixes ending in "*"), and a pod on
// the host's network or IPC namespace that sets one of that namespace; nil
// admits it.
func AdmitSysctls(pod *corev1.Pod, allowed []string) *Refusal {
	sc := pod.Spec.SecurityContext
	if sc == nil {
		return nil
	}
	for _, s := range sc.Sysctls {
		name := SysctlDots(s.Name)
		ok := safeSysctls[name]
		for _, a := range allowed {
			if a == name || strings.HasSuffix(a, "*") && strings.HasPrefix(name, strings.TrimSuffix(a, "*")) {
				ok = true
			}
		}
		if !ok {
			return refuse("SysctlForbidden", "forbidden sysctl: %q not allowlisted", s.Name)
		}
		if pod.Spec.HostNetwork && strings.HasPrefix(name, "net.") {
			return refuse("SysctlForbidden", "forbidden sysctl: %q not allowed with host net enabled", s.Name)
		}
		if pod.Spec.HostIPC && (strings.HasPrefix(name, "kernel.shm") || strings.HasPrefix(name, "kernel.msg") || strings.HasPrefix(name, "kernel.sem") || strings.HasPrefix(name, "fs.mqueue.")) {
			return refuse("SysctlForbidden", "forbidden sysctl: %q not allowed with host ipc enabled", s.Name)
		}
	}
	return nil
}

// Admit decides, like the kubelet's resource admission, whether a pod asking
// for req fits beside the pods already admitted (count pods using used) on
// a node of this capacity. A resource missing from capacity is not limited;
// a resource the pod does not request is not checked. A refusal's reason is
// OutOfpods, OutOfcpu or OutOfmemory; nil admits the pod.
func Admit(capacity corev1.ResourceList, req, used Requests, count int) *Refusal {
	const msg = "Node didn't have enough resource: %s, requested: %d, used: %d, capacity: %d"
	if q, ok := capacity[corev1.ResourcePods]; ok && int64(count)+1 > q.Value() {
		return refuse("OutOfpods", msg, corev1.ResourcePods, 1, count, q.Value())
	}
	if q, ok := capacity[corev1.ResourceCPU]; ok && req.MilliCPU > 0 && req.MilliCPU+used.MilliCPU > q.MilliValue() {
		return refuse("OutOfcpu", msg, corev1.ResourceCPU, req.MilliCPU, used.MilliCPU, q.MilliValue())
	}
	if q, ok := capacity[corev1.ResourceMemory]; ok && req.MemoryBytes > 0 && req.MemoryBytes+used.MemoryBytes > q.Value() {
		return refuse("OutOfmemory", msg, corev1.ResourceMemory, req.MemoryBytes, used.MemoryBytes, q.Value())
	}
	return nil
}
