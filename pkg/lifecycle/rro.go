package lifecycle

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// RecursiveReadOnlyMounts is implemented by a runtime that can make a
// mount read-only recursively (the mounts below its source too) for some
// pods: the cri runtime, where the pod's runtime handler says so. A
// runtime without it makes none so.
type RecursiveReadOnlyMounts interface {
	// RecursiveReadOnlyHandler names the runtime handler that runs pod
	// ("" for the runtime's default) and tells whether it makes mounts
	// read-only recursively.
	RecursiveReadOnlyHandler(pod *corev1.Pod) (handler string, supported bool)
}

// RecursiveReadOnly decides, as the kubelet does, whether a mount is made
// read-only recursively by a runtime handler that supports it or not:
// never unless its recursiveReadOnly asks; IfPossible where the handler
// supports it; Enabled where it does, and otherwise the container cannot
// be created, nor when the mount is not read-only or propagates mounts.
func RecursiveReadOnly(m Mount, handler string, supported bool) (bool, error) {
	switch m.RecursiveReadOnly {
	case "", corev1.RecursiveReadOnlyDisabled:
		return false, nil
	case corev1.RecursiveReadOnlyIfPossible:
		return supported && m.ReadOnly && noPropagation(m), nil
	case corev1.RecursiveReadOnlyEnabled:
		switch {
		case !m.ReadOnly:
			return false, fmt.Errorf("volume mount at %s: recursiveReadOnly Enabled needs readOnly", m.Destination)
		case !noPropagation(m):
			return false, fmt.Errorf("volume mount at %s: recursiveReadOnly Enabled needs mountPropagation None, not %s", m.Destination, m.Propagation)
		case !supported:
			return false, fmt.Errorf("volume mount at %s: recursiveReadOnly Enabled, but the runtime handler %q does not support recursive read-only mounts", m.Destination, handler)
		}
		return true, nil
	}
	return false, fmt.Errorf("volume mount at %s: unknown recursiveReadOnly %q", m.Destination, m.RecursiveReadOnly)
}

func noPropagation(m Mount) bool {
	return m.Propagation == "" || m.Propagation == corev1.MountPropagationNone
}

// recursiveReadOnlyHandler is what rt says of the handler that runs pod,
// asked only when one of its mounts may be read-only recursively.
func recursiveReadOnlyHandler(rt Runtime, pod *corev1.Pod) (string, bool) {
	inner, _ := unwrapped(rt)
	r, ok := inner.(RecursiveReadOnlyMounts)
	if !ok || !asksRecursiveReadOnly(pod) {
		return "", false
	}
	return r.RecursiveReadOnlyHandler(pod)
}

func asksRecursiveReadOnly(pod *corev1.Pod) bool {
	asks := func(mounts []corev1.VolumeMount) bool {
		for _, vm := range mounts {
			if vm.ReadOnly && vm.RecursiveReadOnly != nil && *vm.RecursiveReadOnly != corev1.RecursiveReadOnlyDisabled {
				return true
			}
		}
		return false
	}
	for i := range pod.Spec.InitContainers {
		if asks(pod.Spec.InitContainers[i].VolumeMounts) {
			return true
		}
	}
	for i := range pod.Spec.Containers {
		if asks(pod.Spec.Containers[i].VolumeMounts) {
			return true
		}
	}
	for i := range pod.Spec.EphemeralContainers {
		if asks(pod.Spec.EphemeralContainers[i].VolumeMounts) {
			return true
		}
	}
	return false
}

// volumeMountStatuses are a container's volume mounts as its status
// reports them, as the kubelet's: each read-only one says whether it is
// read-only recursively (Enabled) or not (Disabled), as the handler makes
// it; a mount the handler refuses is Disabled.
func volumeMountStatuses(c *corev1.Container, handler string, supported bool) []corev1.VolumeMountStatus {
	var out []corev1.VolumeMountStatus
	for _, vm := range c.VolumeMounts {
		st := corev1.VolumeMountStatus{Name: vm.Name, MountPath: vm.MountPath, ReadOnly: vm.ReadOnly}
		if vm.ReadOnly {
			m := Mount{Destination: vm.MountPath, ReadOnly: true}
			if vm.MountPropagation != nil {
				m.Propagation = *vm.MountPropagation
			}
			if vm.RecursiveReadOnly != nil {
				m.RecursiveReadOnly = *vm.RecursiveReadOnly
			}
			mode := corev1.RecursiveReadOnlyDisabled
			if rro, err := RecursiveReadOnly(m, handler, supported); err == nil && rro {
				mode = corev1.RecursiveReadOnlyEnabled
			}
			st.RecursiveReadOnly = &mode
		}
		out = append(out, st)
	}
	return out
}
