package podrules

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ContainerFieldPath is the field path of the pod's container named name
// (spec.initContainers[i], spec.containers[i] or
// spec.ephemeralContainers[i]), for the messages that name a field; a name
// the pod lacks is spec.containers[name].
func ContainerFieldPath(pod *corev1.Pod, name string) *field.Path {
	spec := field.NewPath("spec")
	for i, c := range pod.Spec.InitContainers {
		if c.Name == name {
			return spec.Child("initContainers").Index(i)
		}
	}
	for i, c := range pod.Spec.Containers {
		if c.Name == name {
			return spec.Child("containers").Index(i)
		}
	}
	for i, c := range pod.Spec.EphemeralContainers {
		if c.Name == name {
			return spec.Child("ephemeralContainers").Index(i)
		}
	}
	return spec.Child("containers").Key(name)
}
