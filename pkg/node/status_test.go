package node

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestSetConditionTimes(t *testing.T) {
	previous := []corev1.NodeCondition{
		{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastTransitionTime: hour1, LastHeartbeatTime: hour1},
		{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, LastTransitionTime: hour1, LastHeartbeatTime: hour1},
		{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse}, // no transition time recorded
	}
	tests := []struct {
		name           string
		cond           corev1.NodeCondition
		wantTransition metav1.Time
	}{
		{"status unchanged keeps the transition time", corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue}, hour1},
		{"status changed transitions now", corev1.NodeCondition{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionTrue}, hour2},
		{"new condition transitions now", corev1.NodeCondition{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse}, hour2},
		{"unchanged without a previous time transitions now", corev1.NodeCondition{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse}, hour2},
		{"provider's own times are overridden", corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastTransitionTime: hour2, LastHeartbeatTime: hour2}, hour1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status := &corev1.NodeStatus{Conditions: []corev1.NodeCondition{tt.cond}}
			setConditionTimes(status, previous, hour2)
			got := status.Conditions[0]
			if !got.LastHeartbeatTime.Equal(&hour2) {
				t.Errorf("heartbeat = %v, want now %v", got.LastHeartbeatTime, hour2)
			}
			if !got.LastTransitionTime.Equal(&tt.wantTransition) {
				t.Errorf("transition = %v, want %v", got.LastTransitionTime, tt.wantTransition)
			}
		})
	}
}

func TestSetReady(t *testing.T) {
	providerReady := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "provider says so"}
	pingErr := errors.New("backend unreachable")
	tests := []struct {
		name       string
		conditions []corev1.NodeCondition
		pingErr    error
		want       corev1.NodeCondition
	}{
		{"ping ok keeps the provider's Ready", []corev1.NodeCondition{providerReady}, nil, providerReady},
		{"ping ok without a provider Ready adds nodelet's",
			nil, nil,
			corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "NodeletReady", Message: "nodelet is posting ready status"}},
		{"failed ping overrides the provider's Ready",
			[]corev1.NodeCondition{providerReady}, pingErr,
			corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "ProviderPingFailed", Message: "backend unreachable"}},
		{"failed ping without a provider Ready",
			nil, pingErr,
			corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "ProviderPingFailed", Message: "backend unreachable"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status := &corev1.NodeStatus{Conditions: append([]corev1.NodeCondition{
				{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse},
			}, tt.conditions...)}
			setReady(status, tt.pingErr)
			if len(status.Conditions) != 2 || status.Conditions[0].Type != corev1.NodeMemoryPressure {
				t.Fatalf("conditions = %+v, want MemoryPressure and Ready", status.Conditions)
			}
			if got := status.Conditions[1]; got != tt.want {
				t.Errorf("Ready = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestStatusChangedIgnoresConditionTimes(t *testing.T) {
	applied := newAppliedStatus(&corev1.NodeStatus{
		Capacity:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")},
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: hour1, LastTransitionTime: hour1}},
	})
	same := &corev1.NodeStatus{
		Capacity:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1000m")},
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
	}
	if statusChanged(applied, same) {
		t.Error("a status differing only in condition times and quantity spelling counts as changed")
	}
	changed := same.DeepCopy()
	changed.Conditions[0].Status = corev1.ConditionFalse
	if !statusChanged(applied, changed) {
		t.Error("a condition status change is not seen")
	}
	bigger := same.DeepCopy()
	bigger.Capacity[corev1.ResourceCPU] = resource.MustParse("2")
	if !statusChanged(applied, bigger) {
		t.Error("a capacity change is not seen")
	}
	attached := same.DeepCopy()
	attached.VolumesAttached = []corev1.AttachedVolume{{Name: "kubernetes.io/csi/example^vol-1", DevicePath: "/dev/x"}}
	if !statusChanged(applied, attached) {
		t.Error("a volume attached is not seen")
	}
	if got := applied.conditions; len(got) != 1 || got[0] != (appliedCondition{corev1.NodeReady, corev1.ConditionTrue}) {
		t.Errorf("applied conditions = %+v", got)
	}
}
