package podrules

import corev1 "k8s.io/api/core/v1"

// PodStarted tells whether a pod's reported status shows that it was ever
// started: a start time, or a container that left its first Waiting state.
func PodStarted(pod *corev1.Pod) bool {
	if pod.Status.StartTime != nil {
		return true
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.State.Waiting == nil || cs.RestartCount > 0 {
			return true
		}
	}
	return false
}
