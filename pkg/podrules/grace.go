package podrules

import (
	"time"

	corev1 "k8s.io/api/core/v1"
)

// DefaultGracePeriod is the grace period of a pod that names none: the API
// server's default of spec.terminationGracePeriodSeconds.
const DefaultGracePeriod = corev1.DefaultTerminationGracePeriodSeconds * time.Second

// GracePeriod is how long a deleted pod's containers get between SIGTERM
// and SIGKILL: the deletion's (metadata.deletionGracePeriodSeconds), else
// spec.terminationGracePeriodSeconds. ok says whether the pod names one;
// when it names none the grace period is DefaultGracePeriod.
func GracePeriod(pod *corev1.Pod) (grace time.Duration, ok bool) {
	switch {
	case pod.DeletionGracePeriodSeconds != nil:
		return time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second, true
	case pod.Spec.TerminationGracePeriodSeconds != nil:
		return time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second, true
	}
	return DefaultGracePeriod, false
}

// ProbeGracePeriod is the grace period of a container killed because probe
// (a liveness or startup probe) failed: the probe's own
// terminationGracePeriodSeconds where set, else the pod's GracePeriod.
func ProbeGracePeriod(pod *corev1.Pod, probe *corev1.Probe) time.Duration {
	if probe.TerminationGracePeriodSeconds != nil {
		return time.Duration(*probe.TerminationGracePeriodSeconds) * time.Second
	}
	grace, _ := GracePeriod(pod)
	return grace
}
