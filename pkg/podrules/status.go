package podrules

import corev1 "k8s.io/api/core/v1"

// The kubelet's rules for a pod's phase and its five standard conditions,
// read from the states of its containers as the API status records them.
// A provider that builds a status afresh (lifecycle) and one that changes
// a status in place (sim) both fill in the containers' states, then ask
// Phase and SetConditions: given the same states, they report the same
// pod. None of these allocates unless a condition's message lists
// containers.

// TerminatedReason is the reason of a container that exited with code,
// when the runtime gives none more precise (OOMKilled, StartError):
// Completed for 0, Error for any other code.
func TerminatedReason(code int32) string {
	if code == 0 {
		return "Completed"
	}
	return "Error"
}

// Sidecars tells which init containers of a pod are sidecars: whether
// the i-th of its init container statuses is a sidecar's.
type Sidecars func(i int) bool

// SpecSidecars is Sidecars as pod's spec has them (IsSidecar), for init
// container statuses kept in the spec's order.
func SpecSidecars(pod *corev1.Pod) Sidecars {
	return func(i int) bool {
		return i < len(pod.Spec.InitContainers) && IsSidecar(&pod.Spec.InitContainers[i])
	}
}

// InitCompleted tells whether an init container in state cs has
// completed: it is no sidecar and exited with code 0. The kubelet reports
// a completed init container as ready.
func InitCompleted(cs *corev1.ContainerStatus, sidecar bool) bool {
	t := cs.State.Terminated
	return t != nil && t.ExitCode == 0 && !sidecar
}

// initIncomplete tells whether an init container in state cs keeps the
// pod from being initialized: a sidecar until it has started (never run,
// or running but not yet past its startup probe), any other until it has
// completed.
func initIncomplete(cs *corev1.ContainerStatus, sidecar bool) bool {
	if !sidecar {
		return !InitCompleted(cs, false)
	}
	neverRan := cs.State.Waiting != nil && cs.LastTerminationState.Terminated == nil
	return neverRan || cs.State.Running != nil && (cs.Started == nil || !*cs.Started)
}

// Initialized tells whether every init container, in the states status
// records, lets the pod's containers start.
func Initialized(status *corev1.PodStatus, sidecar Sidecars) bool {
	for i := range status.InitContainerStatuses {
		if initIncomplete(&status.InitContainerStatuses[i], sidecar(i)) {
			return false
		}
	}
	return true
}

// Phase is the phase the kubelet reports for a pod whose containers are
// in the states status records: Failed once an init container failed for good;
// Pending while initialization is incomplete or a container never
// started; Running while a container runs or waits to restart; then
// Failed if a container failed, else Succeeded. stopped: the pod was
// deleted and all of it stopped, so it is Succeeded if every container
// succeeded and Failed otherwise, whatever the containers got to.
func Phase(status *corev1.PodStatus, sidecar Sidecars, stopped bool) corev1.PodPhase {
	n := countContainers(status.ContainerStatuses)
	var phase corev1.PodPhase
	switch {
	case initFailed(status, sidecar) && (n.running > 0 || sidecarRunning(status, sidecar)):
		// As the kubelet: no terminal phase while a container still runs
		// (the sidecars being stopped).
		phase = corev1.PodPending
	case initFailed(status, sidecar):
		phase = corev1.PodFailed
	case !Initialized(status, sidecar) || n.waiting > 0:
		phase = corev1.PodPending
	case n.running > 0:
		phase = corev1.PodRunning
	case n.failed > 0:
		phase = corev1.PodFailed
	default:
		phase = corev1.PodSucceeded
	}
	if stopped && !IsFinal(phase) {
		phase = corev1.PodFailed
		if n.failed == 0 && n.succeeded == len(status.ContainerStatuses) {
			phase = corev1.PodSucceeded
		}
	}
	return phase
}

// IsFinal tells whether phase is one a pod never leaves.
func IsFinal(phase corev1.PodPhase) bool {
	return phase == corev1.PodSucceeded || phase == corev1.PodFailed
}

// initFailed tells whether an init container (no sidecar) ended for good
// with a code other than 0.
func initFailed(status *corev1.PodStatus, sidecar Sidecars) bool {
	for i := range status.InitContainerStatuses {
		t := status.InitContainerStatuses[i].State.Terminated
		if t != nil && t.ExitCode != 0 && !sidecar(i) {
			return true
		}
	}
	return false
}

// sidecarRunning tells whether a sidecar (restartable init container)
// runs.
func sidecarRunning(status *corev1.PodStatus, sidecar Sidecars) bool {
	for i := range status.InitContainerStatuses {
		if status.InitContainerStatuses[i].State.Running != nil && sidecar(i) {
			return true
		}
	}
	return false
}

// containerCounts counts a pod's (non-init) containers by state.
type containerCounts struct {
	running, waiting, succeeded, failed int
}

func countContainers(statuses []corev1.ContainerStatus) containerCounts {
	var n containerCounts
	for i := range statuses {
		cs := &statuses[i]
		switch {
		case cs.State.Running != nil:
			n.running++
		case cs.State.Terminated != nil && cs.State.Terminated.ExitCode == 0:
			n.succeeded++
		case cs.State.Terminated != nil:
			n.failed++
		case cs.LastTerminationState.Terminated != nil:
			n.running++ // waiting to restart: the kubelet counts it as running
		default:
			n.waiting++
		}
	}
	return n
}
