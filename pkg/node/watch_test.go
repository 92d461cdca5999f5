package node

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestConditionsOverwritten(t *testing.T) {
	ready := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue}
	unknown := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionUnknown}
	other := corev1.NodeCondition{Type: "Example", Status: corev1.ConditionFalse}
	tests := []struct {
		name    string
		applied []appliedCondition
		current []corev1.NodeCondition
		want    bool
	}{
		{"same", []appliedCondition{{ready.Type, ready.Status}}, []corev1.NodeCondition{ready, other}, false},
		{"marked unknown by the node lifecycle controller", []appliedCondition{{ready.Type, ready.Status}}, []corev1.NodeCondition{unknown}, true},
		{"another writer's condition changes", []appliedCondition{{ready.Type, ready.Status}}, []corev1.NodeCondition{ready, {Type: "Example", Status: corev1.ConditionTrue}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := conditionsOverwritten(tt.applied, tt.current); got != tt.want {
				t.Errorf("conditionsOverwritten() = %v, want %v", got, tt.want)
			}
		})
	}
}
