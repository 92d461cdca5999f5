package podrules

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestContainerFieldPath(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		InitContainers:      []corev1.Container{{Name: "i"}},
		Containers:          []corev1.Container{{Name: "a"}, {Name: "b"}},
		EphemeralContainers: []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "e"}}},
	}}
	for name, want := range map[string]string{
		"i": "spec.initContainers[0]", "b": "spec.containers[1]", "e": "spec.ephemeralContainers[0]", "x": "spec.containers[x]",
	} {
		if got := ContainerFieldPath(pod, name).String(); got != want {
			t.Errorf("ContainerFieldPath(%q) = %q, want %q", name, got, want)
		}
	}
}
