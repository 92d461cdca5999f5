package sim

import (
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The three statuses a simulated pod goes through, written the way the
// kubelet writes them: pending (accepted, containers being created),
// running (every container up and ready) and terminated (every container
// exited 0 after the pod was deleted).

// setPending gives a newly accepted pod its first status.
func setPending(pod *corev1.Pod, now time.Time, hostIP, podIP string) {
	t := metav1.NewTime(now)
	s := &pod.Status
	s.Phase = corev1.PodPending
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

	unready := "containers with unready status: [" + names(pod.Spec.Containers) + "]"
	setCondition(s, corev1.PodScheduled, corev1.ConditionTrue, "", "", t)
	setCondition(s, corev1.PodReadyToStartContainers, corev1.ConditionFalse, "", "", t)
	if hasInit {
		setCondition(s, corev1.PodInitialized, corev1.ConditionFalse, "ContainersNotInitialized",
			"containers with incomplete status: ["+names(pod.Spec.InitContainers)+"]", t)
	} else {
		// As the kubelet: a pod without init containers is initialized at once.
		setCondition(s, corev1.PodInitialized, corev1.ConditionTrue, "", "", t)
	}
	setCondition(s, corev1.ContainersReady, corev1.ConditionFalse, "ContainersNotReady", unready, t)
	setCondition(s, corev1.PodReady, corev1.ConditionFalse, "ContainersNotReady", unready, t)
}

// setRunning starts every container at now: init containers have completed
// (sidecars keep running), the others run and are ready. Restart counts
// already reported are kept.
func setRunning(pod *corev1.Pod, now time.Time) {
	t := metav1.NewTime(now)
	s := &pod.Status
	s.Phase = corev1.PodRunning
	s.InitContainerStatuses = runningStatuses(pod, pod.Spec.InitContainers, s.InitContainerStatuses, t, true)
	s.ContainerStatuses = runningStatuses(pod, pod.Spec.Containers, s.ContainerStatuses, t, false)
	for _, c := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		setCondition(s, c, corev1.ConditionTrue, "", "", t)
	}
}

// setTerminated stops every container at now with exit code 0, keeping the
// time it started; the pod has succeeded.
func setTerminated(pod *corev1.Pod, now time.Time) {
	t := metav1.NewTime(now)
	s := &pod.Status
	s.Phase = corev1.PodSucceeded
	for _, statuses := range [][]corev1.ContainerStatus{s.InitContainerStatuses, s.ContainerStatuses} {
		for i := range statuses {
			cs := &statuses[i]
			if cs.State.Terminated != nil {
				continue // a completed init container stays as it was
			}
			var started metav1.Time
			if cs.State.Running != nil {
				started = cs.State.Running.StartedAt
			}
			cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode:    0,
				Reason:      "Completed",
				StartedAt:   started,
				FinishedAt:  t,
				ContainerID: cs.ContainerID,
			}}
			cs.Ready = false
			cs.Started = ptr(false)
		}
	}
	setCondition(s, corev1.PodReadyToStartContainers, corev1.ConditionFalse, "", "", t)
	setCondition(s, corev1.ContainersReady, corev1.ConditionFalse, "PodCompleted", "", t)
	setCondition(s, corev1.PodReady, corev1.ConditionFalse, "PodCompleted", "", t)
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
		sidecar := c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
		if init && !sidecar {
			cs.State.Terminated = &corev1.ContainerStateTerminated{
				ExitCode:    0,
				Reason:      "Completed",
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

// setCondition sets one condition, moving its transition time only when its
// status changes; conditions of other types (readiness gates, disruption
// targets) are kept.
func setCondition(s *corev1.PodStatus, typ corev1.PodConditionType, status corev1.ConditionStatus, reason, message string, now metav1.Time) {
	for i := range s.Conditions {
		c := &s.Conditions[i]
		if c.Type != typ {
			continue
		}
		if c.Status != status {
			c.LastTransitionTime = now
		}
		c.Status, c.Reason, c.Message = status, reason, message
		return
	}
	s.Conditions = append(s.Conditions, corev1.PodCondition{
		Type:               typ,
		Status:             status,
		Reason:             reason,
		Message:            message,
		LastTransitionTime: now,
	})
}

func names(containers []corev1.Container) string {
	n := make([]string, len(containers))
	for i := range containers {
		n[i] = containers[i].Name
	}
	return strings.Join(n, " ")
}

func ptr[T any](v T) *T { return &v }
