package eviction

import (
	"maps"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/hostnode"
	"github.com/nodelet/nodelet/pkg/podrules"
	"github.com/nodelet/nodelet/pkg/provider"
)

// pressureConditions are the conditions the manager reports, with the
// kubelet's reasons and messages when True and when False.
var pressureConditions = []struct {
	typ                   corev1.NodeConditionType
	trueReason, trueMsg   string
	falseReason, falseMsg string
}{
	{corev1.NodeMemoryPressure, "KubeletHasInsufficientMemory", "kubelet has insufficient memory available", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"},
	{corev1.NodeDiskPressure, "KubeletHasDiskPressure", "kubelet has disk pressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"},
	{corev1.NodePIDPressure, "KubeletHasInsufficientPID", "kubelet has insufficient PID available", "KubeletHasSufficientPID", "kubelet has sufficient PID available"},
}

// Pressure is a node's pressure conditions as its eviction manager last
// found them: what the node reports, and what new pods are admitted
// against. It is made before the provider that reads it and the manager
// that sets it; without a manager, the node has no pressure.
type Pressure struct {
	mu         sync.Mutex
	conditions map[corev1.NodeConditionType]bool
}

// NewPressure returns a node's pressure, none yet.
func NewPressure() *Pressure {
	return &Pressure{conditions: map[corev1.NodeConditionType]bool{}}
}

// set replaces the conditions True and tells whether they changed.
func (p *Pressure) set(conditions map[corev1.NodeConditionType]bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	changed := !maps.Equal(conditions, p.conditions)
	p.conditions = conditions
	return changed
}

// SetNodeConditions sets the node's MemoryPressure, DiskPressure and
// PIDPressure conditions from the last synchronization: True while a
// threshold raising it is met and for the pressure transition period
// after. Their times are left to the node controller.
func (p *Pressure) SetNodeConditions(node *corev1.Node) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range pressureConditions {
		if p.conditions[c.typ] {
			hostnode.SetCondition(&node.Status, c.typ, corev1.ConditionTrue, c.trueReason, c.trueMsg)
		} else {
			hostnode.SetCondition(&node.Status, c.typ, corev1.ConditionFalse, c.falseReason, c.falseMsg)
		}
	}
}

// Conditions returns the pressure conditions now True, in the order
// MemoryPressure, DiskPressure, PIDPressure.
func (p *Pressure) Conditions() []corev1.NodeConditionType {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []corev1.NodeConditionType
	for _, c := range pressureConditions {
		if p.conditions[c.typ] {
			out = append(out, c.typ)
		}
	}
	return out
}

// memoryPressureTaint is the taint a BestEffort pod must tolerate to be
// admitted under memory pressure alone.
var memoryPressureTaint = corev1.Taint{Key: corev1.TaintNodeMemoryPressure, Effect: corev1.TaintEffectNoSchedule}

// Admit decides, as the kubelet's eviction admission does, whether a new
// pod may start under the current pressure conditions: under memory
// pressure alone, every pod but a BestEffort one that does not tolerate
// the node.kubernetes.io/memory-pressure taint; under disk or PID pressure,
// only critical pods. The error is a *provider.Rejection with reason
// Evicted.
func (p *Pressure) Admit(pod *corev1.Pod) error {
	conds := p.Conditions()
	if len(conds) == 0 || critical(pod) {
		return nil
	}
	if len(conds) == 1 && conds[0] == corev1.NodeMemoryPressure {
		if podrules.QOSClass(pod) != corev1.PodQOSBestEffort {
			return nil
		}
		for i := range pod.Spec.Tolerations {
			if pod.Spec.Tolerations[i].ToleratesTaint(klog.Background(), &memoryPressureTaint, false) {
				return nil
			}
		}
	}
	return provider.Reject(Reason, "The node had condition: %v. ", conds)
}

// Pressure is where the manager sets its node's pressure conditions.
func (m *Manager) Pressure() *Pressure { return m.pressure }

// SetNodeConditions is the manager's Pressure's SetNodeConditions.
func (m *Manager) SetNodeConditions(node *corev1.Node) { m.pressure.SetNodeConditions(node) }

// Conditions is the manager's Pressure's Conditions.
func (m *Manager) Conditions() []corev1.NodeConditionType { return m.pressure.Conditions() }

// Admit is the manager's Pressure's Admit.
func (m *Manager) Admit(pod *corev1.Pod) error { return m.pressure.Admit(pod) }
