package podrules

import corev1 "k8s.io/api/core/v1"

// IsSidecar tells whether an init container is a sidecar (a restartable
// init container): its restartPolicy is Always. It is meant for init
// containers: on a regular container the field is that container's own
// restart policy and does not make it a sidecar; a caller holding a
// container that may come from any list asks IsPodSidecar.
func IsSidecar(c *corev1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}

// IsPodSidecar tells whether c is a sidecar of pod: one of its init
// containers (by name) and restartable.
func IsPodSidecar(pod *corev1.Pod, c *corev1.Container) bool {
	if !IsSidecar(c) {
		return false
	}
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == c.Name {
			return true
		}
	}
	return false
}
