package podrules

import corev1 "k8s.io/api/core/v1"

// hostPort is one host port a pod binds: its address ("" for all of the
// node's), protocol and port.
type hostPort struct {
	ip       string
	protocol corev1.Protocol
	port     int32
}

// hostPorts calls f with each host port pod binds for as long as it
// runs: those of its containers and of its sidecars (init containers
// that restart always), as the scheduler counts them.
func hostPorts(pod *corev1.Pod, f func(hostPort)) {
	each := func(c *corev1.Container) {
		for _, p := range c.Ports {
			if p.HostPort <= 0 {
				continue
			}
			hp := hostPort{ip: p.HostIP, protocol: p.Protocol, port: p.HostPort}
			if hp.ip == "0.0.0.0" {
				hp.ip = ""
			}
			if hp.protocol == "" {
				hp.protocol = corev1.ProtocolTCP
			}
			f(hp)
		}
	}
	for i := range pod.Spec.InitContainers {
		if IsSidecar(&pod.Spec.InitContainers[i]) {
			each(&pod.Spec.InitContainers[i])
		}
	}
	for i := range pod.Spec.Containers {
		each(&pod.Spec.Containers[i])
	}
}

// conflicts tells whether two host ports cannot both be bound: the same
// protocol and port on the same address, or on all of them for either.
func (a hostPort) conflicts(b hostPort) bool {
	return a.protocol == b.protocol && a.port == b.port && (a.ip == "" || b.ip == "" || a.ip == b.ip)
}

// AdmitHostPorts decides, like the kubelet's admission (the scheduler's
// NodePorts predicate, which a pod bound to the node by name never
// passed), whether pod's host ports are free beside those of the pods
// running on the node. A refusal's reason is NodePorts; nil admits the
// pod.
func AdmitHostPorts(pod *corev1.Pod, running []*corev1.Pod) *Refusal {
	var want []hostPort
	hostPorts(pod, func(hp hostPort) { want = append(want, hp) })
	if len(want) == 0 {
		return nil
	}
	conflict := false
	for _, other := range running {
		hostPorts(other, func(used hostPort) {
			for _, hp := range want {
				conflict = conflict || hp.conflicts(used)
			}
		})
		if conflict {
			return refuse("NodePorts", "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports")
		}
	}
	return nil
}
