package podrules

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestIsSidecar(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	other := corev1.ContainerRestartPolicy("Never")
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "init"}, {Name: "proxy", RestartPolicy: &always}},
		Containers:     []corev1.Container{{Name: "app"}, {Name: "app-always", RestartPolicy: &always}},
	}}
	tests := []struct {
		name       string
		c          corev1.Container
		sidecar    bool // IsSidecar: the container alone, read as an init container
		podSidecar bool // IsPodSidecar: one of the pod's init containers too
	}{
		{"init container", pod.Spec.InitContainers[0], false, false},
		{"restartable init container", pod.Spec.InitContainers[1], true, true},
		{"other restart policy", corev1.Container{Name: "init", RestartPolicy: &other}, false, false},
		{"regular container", pod.Spec.Containers[0], false, false},
		{"regular container with restartPolicy Always", pod.Spec.Containers[1], true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := IsSidecar(&tt.c); got != tt.sidecar {
				t.Errorf("IsSidecar = %t, want %t", got, tt.sidecar)
			}
			if got := IsPodSidecar(pod, &tt.c); got != tt.podSidecar {
				t.Errorf("IsPodSidecar = %t, want %t", got, tt.podSidecar)
			}
		})
	}
}
