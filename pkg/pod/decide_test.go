package pod

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
)

func testPod(uid, node string, mutate ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: k8stypes.UID("uid-" + uid)},
		Spec: corev1.PodSpec{
			NodeName:      node,
			RestartPolicy: corev1.RestartPolicyAlways,
			Containers:    []corev1.Container{{Name: "c"}},
		},
	}
	for _, m := range mutate {
		m(p)
	}
	return p
}

func runningStatus(p *corev1.Pod) {
	now := metav1.Now()
	p.Status.Phase = corev1.PodRunning
	p.Status.StartTime = &now
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c", Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}}
}

func TestDecideProviderPod(t *testing.T) {
	tests := []struct {
		name     string
		prov     *corev1.Pod
		api      *corev1.Pod
		expected danglingDecision
	}{
		{"api has it", testPod("a", "n1"), testPod("a", "n1"), keepPod},
		{"api does not have it", testPod("a", "n1"), nil, deleteInProv},
		{"api has a newer pod of that name", testPod("a", "n1"), testPod("b", "n1"), deleteInProv},
		{"api pod moved to another node", testPod("a", "n1"), testPod("a", "n2"), deleteInProv},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := decideProviderPod(tt.prov, tt.api); got != tt.expected {
				t.Errorf("decideProviderPod() = %v, want %v", got, tt.expected)
			}
		})
	}
}

func TestDecideLostPod(t *testing.T) {
	never := func(p *corev1.Pod) { p.Spec.RestartPolicy = corev1.RestartPolicyNever }
	deleting := func(p *corev1.Pod) { now := metav1.Now(); p.DeletionTimestamp = &now }
	succeeded := func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }
	tests := []struct {
		name       string
		pod        *corev1.Pod
		canRestore bool
		expected   lostAction
	}{
		{"new pod is created", testPod("a", "n"), false, createPod},
		{"new pod is created even if the provider restores", testPod("a", "n"), true, createPod},
		{"started pod is restored", testPod("a", "n", runningStatus), true, restorePod},
		{"started pod with Always is recreated", testPod("a", "n", runningStatus), false, createPod},
		{"started pod with Never fails", testPod("a", "n", runningStatus, never), false, failPod},
		{"started pod with Never is restored when possible", testPod("a", "n", runningStatus, never), true, restorePod},
		{"finished pod stays finished", testPod("a", "n", runningStatus, succeeded), true, nothing},
		{"deleting pod finishes its deletion", testPod("a", "n", runningStatus, deleting), true, finishDel},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := decideLostPod(tt.pod, tt.canRestore); got != tt.expected {
				t.Errorf("decideLostPod() = %v, want %v", got, tt.expected)
			}
		})
	}
}
