package sim

import (
	"context"
	"runtime"

	corev1 "k8s.io/api/core/v1"
)

// NodeType is the value of the "type" label a simulated node gets unless the
// label is already set.
const NodeType = "nodelet-sim"

// Ping reports the simulated node healthy: it always is.
func (p *Provider) Ping(context.Context) error { return nil }

// ConfigureNode describes the simulated node: capacity and allocatable,
// healthy conditions, addresses, nodeInfo and the kubelet endpoint. It adds
// the well-known node labels that are not set yet. Conditions of other types
// are kept, and heartbeat and transition times are left to nodelet.
func (p *Provider) ConfigureNode(_ context.Context, node *corev1.Node) {
	if node.Labels == nil {
		node.Labels = map[string]string{}
	}
	for k, v := range map[string]string{
		corev1.LabelHostname:   p.opts.NodeName,
		corev1.LabelOSStable:   "linux",
		corev1.LabelArchStable: runtime.GOARCH,
		"type":                 NodeType,
	} {
		if _, ok := node.Labels[k]; !ok {
			node.Labels[k] = v
		}
	}

	s := &node.Status
	s.Capacity = p.opts.Capacity.DeepCopy()
	s.Allocatable = p.opts.Capacity.DeepCopy()
	setNodeCondition(s, corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "nodelet is posting ready status")
	setNodeCondition(s, corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available")
	setNodeCondition(s, corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure")
	setNodeCondition(s, corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available")

	s.Addresses = nil
	if p.opts.Address != "" {
		s.Addresses = append(s.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: p.opts.Address})
	}
	s.Addresses = append(s.Addresses, corev1.NodeAddress{Type: corev1.NodeHostName, Address: p.opts.NodeName})

	s.NodeInfo.KubeletVersion = p.opts.Version
	s.NodeInfo.OperatingSystem = "linux"
	s.NodeInfo.Architecture = runtime.GOARCH
	s.NodeInfo.ContainerRuntimeVersion = "sim://1"
	s.NodeInfo.KernelVersion = "nodelet sim"
	s.NodeInfo.OSImage = "nodelet sim"
	s.DaemonEndpoints.KubeletEndpoint.Port = p.opts.Port
}

// setNodeCondition sets one condition's status, reason and message, keeping
// its times.
func setNodeCondition(s *corev1.NodeStatus, typ corev1.NodeConditionType, status corev1.ConditionStatus, reason, message string) {
	for i := range s.Conditions {
		if c := &s.Conditions[i]; c.Type == typ {
			c.Status, c.Reason, c.Message = status, reason, message
			return
		}
	}
	s.Conditions = append(s.Conditions, corev1.NodeCondition{Type: typ, Status: status, Reason: reason, Message: message})
}
