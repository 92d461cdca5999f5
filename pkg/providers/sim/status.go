package sim

import (
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/pkg/podrules"
)

// The statuses a simulated pod goes through, written the way the kubelet
// writes them: pending (accepted, containers being created), running (every
// container up and ready), for some pods exited (in CrashLoopBackOff, then
// running again) and finished (Succeeded or Failed, on their own or after
// the pod was deleted).

// podConditions is how many conditions the provider sets on a pod.
const podConditions = 5

// The functions below change a pod's status, s, in place; pod, whose spec
// they follow, is only read.

// setPending gives a newly accepted pod its first status.
func setPending(pod *corev1.Pod, s *corev1.PodStatus, now time.Time, hostIP, podIP string) {
	t := metav1.NewTime(now)
	s.Reason, s.Message = "", ""
	s.HostIP = hostIP
	s.HostIPs = nil
	if hostIP != "" {
		s.HostIPs = []corev1.HostIP{{IP: hostIP}}
	}
	s.PodIP = podIP
	s.PodIPs = nil
	if podIP != "" {
		s.PodIPs = []corev1.PodIP{{IP: podIP}}
	}
	s.StartTime = &t

	hasInit := len(pod.Spec.InitContainers) > 0
	waiting := "ContainerCreating"
	if hasInit {
		waiting = "PodInitializing"
	}
	s.InitContainerStatuses = waitingStatuses(pod.Spec.InitContainers, "PodInitializing")
	s.ContainerStatuses = waitingStatuses(pod.Spec.Containers, waiting)
	s.EphemeralContainerStatuses = nil

	s.Conditions = slices.Grow(s.Conditions, max(0, podConditions-len(s.Conditions)))
	setPhase(pod, s, t, false, false)
}

// setRunning starts every container at now: init containers have completed
// (sidecars keep running), the others run and are ready. Restart counts
// already reported are kept.
func setRunning(pod *corev1.Pod, s *corev1.PodStatus, now time.Time) {
	t := metav1.NewTime(now)
	s.InitContainerStatuses = runningStatuses(pod, pod.Spec.InitContainers, s.InitContainerStatuses, t, true)
	s.ContainerStatuses = runningStatuses(pod, pod.Spec.Containers, s.ContainerStatuses, t, false)
	setPhase(pod, s, t, true, false)
}

// setFinished ends the pod at now: containers still running stop with exit
// code 0 (they were asked to), keeping the time they started; containers
// waiting in CrashLoopBackOff keep their last termination as their state,
// and waiting ones that never ran end with exit code 0, except init
// containers, which stay waiting (a pod deleted before it was initialized
// never was); containers that already terminated stay as they were. The
// pod has Succeeded if every container ended with exit code 0, else
// Failed; the phase is returned.
func setFinished(pod *corev1.Pod, s *corev1.PodStatus, now time.Time) corev1.PodPhase {
	t := metav1.NewTime(now)
	sidecar := podrules.SpecSidecars(pod)
	for i := range s.InitContainerStatuses {
		cs := &s.InitContainerStatuses[i]
		if cs.State.Waiting != nil && cs.LastTerminationState.Terminated == nil {
			continue
		}
		stopContainer(cs, t)
		// As the kubelet: a completed init container stays ready.
		cs.Ready = podrules.InitCompleted(cs, sidecar(i))
	}
	for i := range s.ContainerStatuses {
		stopContainer(&s.ContainerStatuses[i], t)
	}
	setPhase(pod, s, t, false, true)
	return s.Phase
}

// stopContainer ends the container in state cs at t, as setFinished does.
func stopContainer(cs *corev1.ContainerStatus, t metav1.Time) {
	switch {
	case cs.State.Terminated != nil:
		// A completed init container, or a run that ended.
	case cs.State.Waiting != nil && cs.LastTerminationState.Terminated != nil:
		cs.State = corev1.ContainerState{Terminated: cs.LastTerminationState.Terminated.DeepCopy()}
	default:
		var started metav1.Time
		if cs.State.Running != nil {
			started = cs.State.Running.StartedAt
		}
		cs.State = corev1.ContainerState{Terminated: terminated(0, started, t, cs.ContainerID)}
	}
	cs.Ready = false
	cs.Started = ptr(false)
}

// setPhase sets the pod's phase and its five conditions from its
// containers' states, by the kubelet's rules (podrules): sandbox, its
// containers can run; stopped, all of it was stopped. A condition that
// keeps its status keeps its transition time.
func setPhase(pod *corev1.Pod, s *corev1.PodStatus, t metav1.Time, sandbox, stopped bool) {
	sidecar := podrules.SpecSidecars(pod)
	s.Phase = podrules.Phase(s, sidecar, stopped)
	podrules.SetConditions(s, sidecar, sandbox, t)
}

// terminated is the state of a container that exited with code.
func terminated(code int32, started, finished metav1.Time, containerID string) *corev1.ContainerStateTerminated {
	return &corev1.ContainerStateTerminated{
		ExitCode:    code,
		Reason:      podrules.TerminatedReason(code),
		StartedAt:   started,
		FinishedAt:  finished,
		ContainerID: containerID,
	}
}

// exitContainers ends the run of every running (non-init) container at
// now with exit code code.
func exitContainers(s *corev1.PodStatus, now time.Time, code int32) {
	t := metav1.NewTime(now)
	for i := range s.ContainerStatuses {
		cs := &s.ContainerStatuses[i]
		if cs.State.Running == nil {
			continue
		}
		cs.State = corev1.ContainerState{Terminated: terminated(code, cs.State.Running.StartedAt, t, cs.ContainerID)}
		cs.Ready = false
		cs.Started = ptr(false)
	}
}

// reasonBackOff is the kubelet's Waiting reason of a container that waits
// to be restarted after it exited.
const reasonBackOff = "CrashLoopBackOff"

// setBackOff moves the containers that exited at now to Waiting
// CrashLoopBackOff for d, their exit kept as their last termination state;
// the pod stays Running but is not ready.
func setBackOff(pod *corev1.Pod, s *corev1.PodStatus, now time.Time, d time.Duration) {
	t := metav1.NewTime(now)
	for i := range s.ContainerStatuses {
		cs := &s.ContainerStatuses[i]
		if cs.State.Terminated == nil {
			continue
		}
		cs.LastTerminationState = corev1.ContainerState{Terminated: cs.State.Terminated}
		cs.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
			Reason:  reasonBackOff,
			Message: fmt.Sprintf("back-off %s restarting failed container=%s pod=%s_%s(%s)", d, cs.Name, pod.Name, pod.Namespace, pod.UID),
		}}
	}
	setPhase(pod, s, t, true, false)
}

// setRestarted runs again, from now, the containers waiting in
// CrashLoopBackOff: each has one restart more and keeps its last
// termination state.
func setRestarted(pod *corev1.Pod, s *corev1.PodStatus, now time.Time) {
	t := metav1.NewTime(now)
	for i := range s.ContainerStatuses {
		cs := &s.ContainerStatuses[i]
		if w := cs.State.Waiting; w == nil || w.Reason != reasonBackOff {
			continue
		}
		cs.RestartCount++
		cs.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: t}}
		cs.Ready = true
		cs.Started = ptr(true)
	}
	setPhase(pod, s, t, true, false)
}

// restartCount is the most restarts of any of the pod's (non-init)
// containers, by its status s.
func restartCount(s *corev1.PodStatus) int32 {
	var n int32
	for _, cs := range s.ContainerStatuses {
		n = max(n, cs.RestartCount)
	}
	return n
}

func waitingStatuses(containers []corev1.Container, reason string) []corev1.ContainerStatus {
	if len(containers) == 0 {
		return nil
	}
	out := make([]corev1.ContainerStatus, len(containers))
	for i := range containers {
		out[i] = corev1.ContainerStatus{
			Name:    containers[i].Name,
			Image:   containers[i].Image,
			State:   corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}},
			Started: ptr(false),
		}
	}
	return out
}

func runningStatuses(pod *corev1.Pod, containers []corev1.Container, old []corev1.ContainerStatus, t metav1.Time, init bool) []corev1.ContainerStatus {
	if len(containers) == 0 {
		return nil
	}
	out := make([]corev1.ContainerStatus, len(containers))
	for i := range containers {
		c := &containers[i]
		cs := corev1.ContainerStatus{
			Name:        c.Name,
			Image:       c.Image,
			ImageID:     "sim://" + c.Image,
			ContainerID: "sim://" + string(pod.UID) + "/" + c.Name,
			Ready:       true,
		}
		for j := range old {
			if old[j].Name == c.Name {
				cs.RestartCount = old[j].RestartCount
				break
			}
		}
		if init && !podrules.IsSidecar(c) {
			cs.State.Terminated = &corev1.ContainerStateTerminated{
				ExitCode:    0,
				Reason:      podrules.TerminatedReason(0),
				StartedAt:   t,
				FinishedAt:  t,
				ContainerID: cs.ContainerID,
			}
			cs.Started = ptr(false)
		} else {
			cs.State.Running = &corev1.ContainerStateRunning{StartedAt: t}
			cs.Started = ptr(true)
		}
		out[i] = cs
	}
	return out
}

func ptr[T any](v T) *T { return &v }
