package eviction

import (
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

// SetNodeConditions sets the node's MemoryPressure, DiskPressure and
// PIDPressure conditions from the last synchronization: True while a
// threshold raising it is met and for the pressure transition period
// after. Their times are left to the node controller.
func (m *Manager) SetNodeConditions(node *corev1.Node) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, c := range pressureConditions {
		if m.conditions[c.typ] {
			hostnode.SetCondition(&node.Status, c.typ, corev1.ConditionTrue, c.trueReason, c.trueMsg)
		} else {
			hostnode.SetCondition(&node.Status, c.typ, corev1.ConditionFalse, c.falseReason, c.falseMsg)
		}
	}
}

// Conditions returns the pressure conditions now True, in the order
// MemoryPressure, DiskPressure, PIDPressure.
func (m *Manager) Conditions() []corev1.NodeConditionType {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.conditionsLocked()
}

func (m *Manager) conditionsLocked() []corev1.NodeConditionType {
	var out []corev1.NodeConditionType
	for _, c := range pressureConditions {
		if m.conditions[c.typ] {
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
func (m *Manager) Admit(pod *corev1.Pod) error {
	m.mu.Lock()
	conds := m.conditionsLocked()
	m.mu.Unlock()
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
