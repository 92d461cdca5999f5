package podservice

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// phases are the service's pod phases as Kubernetes names them.
var phases = map[string]corev1.PodPhase{
	PhasePending:   corev1.PodPending,
	PhaseRunning:   corev1.PodRunning,
	PhaseSucceeded: corev1.PodSucceeded,
	PhaseFailed:    corev1.PodFailed,
}

// podStatus maps the service's status of pod to the pod's status, on a
// node whose address is hostIP. The pod's spec gives the containers and
// their order; a container the service does not report yet is waiting to
// be created.
func podStatus(pod *corev1.Pod, s Status, hostIP string) corev1.PodStatus {
	out := corev1.PodStatus{Phase: phases[s.Phase], Message: s.Message, HostIP: hostIP, PodIP: s.IP}
	if out.Phase == "" {
		out.Phase = corev1.PodPending
		out.Reason = "UnknownServicePhase"
		out.Message = fmt.Sprintf("the pod service reports phase %q", s.Phase)
	}
	if hostIP != "" {
		out.HostIPs = []corev1.HostIP{{IP: hostIP}}
	}
	if s.IP != "" {
		out.PodIPs = []corev1.PodIP{{IP: s.IP}}
	}
	out.StartTime = timeOf(s.CreatedAt)

	reported := make(map[string]ContainerStatus, len(s.Containers))
	for _, cs := range s.Containers {
		reported[cs.Name] = cs
	}
	var unready []string
	for _, c := range pod.Spec.Containers {
		cs := containerStatus(pod, c, reported[c.Name])
		if !cs.Ready {
			unready = append(unready, c.Name)
		}
		out.ContainerStatuses = append(out.ContainerStatuses, cs)
	}
	out.Conditions = conditions(out.Phase, unready)
	return out
}

// containerStatus maps the service's status of container c; the zero
// ContainerStatus (not reported) is waiting to be created.
func containerStatus(pod *corev1.Pod, c corev1.Container, s ContainerStatus) corev1.ContainerStatus {
	out := corev1.ContainerStatus{Name: c.Name, Image: c.Image, RestartCount: s.Restarts}
	id := "podservice://" + pod.Namespace + "/" + pod.Name + "/" + c.Name
	switch s.State {
	case StateRunning:
		out.State.Running = &corev1.ContainerStateRunning{StartedAt: deref(timeOf(s.StartedAt))}
		out.Ready = true
		out.ContainerID = id
	case StateTerminated:
		reason := s.Reason
		if reason == "" {
			reason = "Completed"
			if s.ExitCode != 0 {
				reason = "Error"
			}
		}
		out.State.Terminated = &corev1.ContainerStateTerminated{
			ExitCode: s.ExitCode, Reason: reason, Message: s.Message, ContainerID: id,
			StartedAt: deref(timeOf(s.StartedAt)), FinishedAt: deref(timeOf(s.FinishedAt)),
		}
		out.ContainerID = id
	default: // Waiting, or not reported yet
		reason := s.Reason
		if reason == "" {
			reason = "ContainerCreating"
		}
		out.State.Waiting = &corev1.ContainerStateWaiting{Reason: reason, Message: s.Message}
	}
	started := out.State.Running != nil
	out.Started = &started
	return out
}

// conditions are the pod's conditions in phase with the containers named
// in unready not ready. The pod is bound (scheduled) and has no init
// containers (initialized); the agent keeps Ready False while a readiness
// gate is not met.
func conditions(phase corev1.PodPhase, unready []string) []corev1.PodCondition {
	ready := corev1.PodCondition{Type: corev1.ContainersReady, Status: corev1.ConditionTrue}
	switch {
	case phase == corev1.PodSucceeded || phase == corev1.PodFailed:
		ready.Status, ready.Reason = corev1.ConditionFalse, "PodCompleted"
	case phase != corev1.PodRunning || len(unready) > 0:
		ready.Status, ready.Reason = corev1.ConditionFalse, "ContainersNotReady"
		ready.Message = fmt.Sprintf("containers with unready status: [%s]", strings.Join(unready, " "))
	}
	podReady := ready
	podReady.Type = corev1.PodReady
	return []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue},
		ready,
		podReady,
	}
}

// timeOf is t as the API's time, nil for nil.
func timeOf(t *time.Time) *metav1.Time {
	if t == nil {
		return nil
	}
	mt := metav1.NewTime(*t)
	return &mt
}

// deref is *t, or the zero time for nil.
func deref(t *metav1.Time) metav1.Time {
	if t == nil {
		return metav1.Time{}
	}
	return *t
}
