package podservice

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Ping asks the service for its capacity: the node is healthy while the
// service answers. A new capacity is reported at once.
func (p *Provider) Ping(ctx context.Context) error {
	c, err := p.client.capacity(ctx)
	if err != nil {
		return err
	}
	capacity, err := resources(c)
	if err != nil {
		return fmt.Errorf("pod service: capacity: %w", err)
	}
	p.mu.Lock()
	changed := !equality.Semantic.DeepEqual(p.capacity, capacity)
	p.capacity = capacity
	notify := p.notifyNode
	p.mu.Unlock()
	if changed && notify != nil {
		notify()
	}
	return nil
}

// resources is the service's capacity as the node's.
func resources(c Capacity) (corev1.ResourceList, error) {
	out := corev1.ResourceList{}
	for name, v := range map[corev1.ResourceName]string{corev1.ResourceCPU: c.CPU, corev1.ResourceMemory: c.Memory} {
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return nil, fmt.Errorf("%s %q: %w", name, v, err)
		}
		out[name] = q
	}
	if c.Pods < 0 {
		return nil, fmt.Errorf("pods %d: must not be negative", c.Pods)
	}
	out[corev1.ResourcePods] = *resource.NewQuantity(int64(c.Pods), resource.DecimalSI)
	return out, nil
}

// NotifyNodeStatus is how the provider asks for the node's status to be
// reported: when Ping learns a new capacity.
func (p *Provider) NotifyNodeStatus(_ context.Context, notify func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.notifyNode = notify
}

// ConfigureNode describes the node: the service's capacity (or
// Options.Capacity), healthy conditions, its address and kubelet port, and
// the well-known labels it does not have yet.
func (p *Provider) ConfigureNode(_ context.Context, node *corev1.Node) {
	if node.Labels == nil {
		node.Labels = map[string]string{}
	}
	for k, v := range map[string]string{
		corev1.LabelHostname:   node.Name,
		corev1.LabelOSStable:   "linux",
		corev1.LabelArchStable: "amd64",
		"type":                 "podservice",
	} {
		if _, ok := node.Labels[k]; !ok {
			node.Labels[k] = v
		}
	}

	s := &node.Status
	capacity := p.opts.Capacity
	if len(capacity) == 0 {
		p.mu.Lock()
		capacity = p.capacity
		p.mu.Unlock()
	}
	s.Capacity, s.Allocatable = capacity.DeepCopy(), capacity.DeepCopy()
	setCondition(s, corev1.NodeReady, corev1.ConditionTrue, "PodServiceReady", "the pod service answers")
	setCondition(s, corev1.NodeMemoryPressure, corev1.ConditionFalse, "PodServiceHasMemory", "the pod service places pods by their requests")
	setCondition(s, corev1.NodeDiskPressure, corev1.ConditionFalse, "PodServiceHasDisk", "the pod service places pods by their requests")
	setCondition(s, corev1.NodePIDPressure, corev1.ConditionFalse, "PodServiceHasPIDs", "the pod service places pods by their requests")

	s.Addresses = nil
	if p.opts.Address != "" {
		s.Addresses = append(s.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: p.opts.Address})
	}
	s.Addresses = append(s.Addresses, corev1.NodeAddress{Type: corev1.NodeHostName, Address: node.Name})
	s.DaemonEndpoints.KubeletEndpoint.Port = p.opts.Port

	s.NodeInfo.KubeletVersion = p.opts.Version
	s.NodeInfo.OperatingSystem = "linux"
	s.NodeInfo.Architecture = "amd64"
	s.NodeInfo.ContainerRuntimeVersion = "podservice://v1"
	s.NodeInfo.OSImage = "pod service at " + p.opts.URL
}

// setCondition sets a condition's status, reason and message, keeping its
// times, which the agent owns.
func setCondition(s *corev1.NodeStatus, typ corev1.NodeConditionType, status corev1.ConditionStatus, reason, message string) {
	for i := range s.Conditions {
		if c := &s.Conditions[i]; c.Type == typ {
			c.Status, c.Reason, c.Message = status, reason, message
			return
		}
	}
	s.Conditions = append(s.Conditions, corev1.NodeCondition{Type: typ, Status: status, Reason: reason, Message: message})
}
