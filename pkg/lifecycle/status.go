package lifecycle

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/pkg/podrules"
)

// A pod's status is computed, every time, from a view of its containers:
// what the runtime recorded about their latest and previous runs, what the
// probes say, and why a container that does not run is waiting. Nothing
// in the status is kept anywhere else, so a restarted agent computes the
// same status from the same records. The same view is what a step of the
// pod worker is decided from (computePodActions, in plan.go); the fields
// only that decision reads say so.

// containerView is what the status of one container is computed from.
type containerView struct {
	spec     *corev1.Container
	latest   *ContainerStatus // nil: never started
	previous *ContainerStatus
	// waiting says why a container that is not running waits (for
	// example CrashLoopBackOff, or a configuration error); an empty reason
	// is the default (ContainerCreating, PodInitializing), whose message
	// says why the pod's set-up failed, if it did.
	waitingReason, waitingMessage string
	// final: an exited container that will not run again.
	final bool
	// sidecar: a restartable init container.
	sidecar bool
	// started and ready are the startup and readiness probes' verdicts for
	// a running container.
	started, ready bool
	// applied are the resources the running attempt has, if known.
	applied *corev1.ResourceRequirements
	// mounts are the container's volume mounts as its status says them.
	mounts []corev1.VolumeMountStatus

	// For the decision only:
	// lost: the latest attempt exited as one the runtime lost track of.
	lost bool
	// probeKilled: the latest attempt exited killed for a failed liveness
	// or startup probe; killing: the latest attempt runs, and its kill for
	// a failed probe has begun.
	probeKilled, killing bool
	// image is the image the agent last started the container with (""
	// for an attempt it did not start); backOffFrom is the first attempt
	// of that image, from which its back-off counts.
	image       string
	backOffFrom int
	// firstAttempt is the attempt a container never started starts as.
	firstAttempt int
	// probing: the probes run for the latest attempt, so started is
	// theirs; otherwise a probe sync starts them afresh.
	probing bool
}

// podView is what a pod's status is computed from.
type podView struct {
	pod    *corev1.Pod
	hostIP string
	// podIPs are the sandbox's IPs.
	podIPs []string
	// hostNetwork: the pod uses the node's network (spec.hostNetwork, or a
	// sandbox with no IPs of its own), so its IP is the node's. A pod
	// with neither a sandbox yet nor host network has no IP.
	hostNetwork bool
	startTime   time.Time
	sandbox     bool // the sandbox runs: containers can start
	init        []containerView
	regular     []containerView
	ephemeral   []containerView
	// failReason and failMessage fail the whole pod (DeadlineExceeded,
	// Evicted); conditions are added with them (an eviction's
	// DisruptionTarget).
	failReason, failMessage string
	conditions              []corev1.PodCondition
	// terminated: the pod was deleted and everything of it stopped.
	terminated bool
	// appsDone: every app container exited and will not run again.
	appsDone bool
	// appsEnding: every app container exited or is being killed, and will
	// not run again (appsDone, or a kill for a failed probe in a pod whose
	// policy is Never under way).
	appsEnding bool

	// For the decision only:
	// deleting: the pod is deleted; its containers stop within grace.
	deleting bool
	grace    time.Duration
	// evict is an eviction the node asked for, not carried out yet.
	evict *Eviction
	// sandboxSetUp: the pod has a sandbox (sandbox says whether it runs);
	// sandboxRefused: a container start found it gone. volumesReady: the
	// volumes are set up. setUpRetryAt: when a set-up that failed is due
	// again.
	sandboxSetUp, sandboxRefused, volumesReady bool
	setUpRetryAt                               time.Time
	// volumesTornDown: the pod ended and its volumes were torn down; they
	// are never set up again.
	volumesTornDown bool
}

// exitedForGood tells whether the container's latest attempt, exited, is
// its last: the pod is over (failed, or deleted and stopped), its restart
// policy does not run it again (and the runtime did not lose track of
// it), or it is a sidecar of a pod whose app containers are ending.
func (cv *containerView) exitedForGood(pod *corev1.Pod, init, over, appsEnding bool) bool {
	return over || !(cv.lost || cv.restarts(pod, init)) || cv.sidecar && appsEnding
}

func terminatedState(uid types.UID, st *ContainerStatus) *corev1.ContainerStateTerminated {
	return &corev1.ContainerStateTerminated{
		ExitCode:    int32(st.ExitCode),
		Signal:      int32(st.Signal),
		Reason:      st.Reason,
		Message:     st.Message,
		StartedAt:   metav1.NewTime(st.StartedAt),
		FinishedAt:  metav1.NewTime(st.FinishedAt),
		ContainerID: st.ID,
	}
}

// containerStatus is the API status of one container.
func containerStatus(uid types.UID, v *containerView, defaultWaiting string) corev1.ContainerStatus {
	c := v.spec
	cs := corev1.ContainerStatus{Name: c.Name, Image: c.Image, ImageID: c.Image, Started: new(bool), VolumeMounts: v.mounts}
	if v.previous != nil && v.previous.State == StateExited {
		cs.LastTerminationState.Terminated = terminatedState(uid, v.previous)
	}
	st := v.latest
	if st == nil {
		reason := defaultWaiting
		if v.waitingReason != "" {
			reason = v.waitingReason
		}
		msg := v.waitingMessage
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: reason, Message: msg}
		return cs
	}
	cs.RestartCount = int32(st.Attempt)
	cs.ContainerID = st.ID
	// The resources it was given, as the kubelet reports a created
	// container's: its limits and requests, and the requests allocated.
	cs.Resources = c.Resources.DeepCopy()
	if v.applied != nil && st.State == StateRunning {
		cs.Resources = v.applied.DeepCopy()
	}
	cs.AllocatedResources = c.Resources.Requests.DeepCopy()
	if st.Image != "" {
		cs.Image, cs.ImageID = st.Image, st.ImageID
	}
	switch {
	case st.State == StateRunning:
		cs.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(st.StartedAt)}
		*cs.Started = v.started
		cs.Ready = v.ready
	case v.final:
		cs.State.Terminated = terminatedState(uid, st)
	default:
		// Exited, and will run again: its last run is the last state.
		cs.LastTerminationState.Terminated = terminatedState(uid, st)
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: v.waitingReason, Message: v.waitingMessage}
		if cs.State.Waiting.Reason == "" {
			cs.State.Waiting.Reason = "ContainerCreating"
		}
	}
	return cs
}

// setAddresses sets the host's and the pod's IPs in s.
func setAddresses(s *corev1.PodStatus, v *podView) {
	if v.hostIP != "" {
		s.HostIPs = []corev1.HostIP{{IP: v.hostIP}}
	}
	podIPs := v.podIPs
	if len(podIPs) == 0 && v.hostNetwork && v.hostIP != "" {
		podIPs = []string{v.hostIP}
	}
	for _, ip := range podIPs {
		s.PodIPs = append(s.PodIPs, corev1.PodIP{IP: ip})
	}
	if len(podIPs) > 0 {
		s.PodIP = podIPs[0]
	}
}

// podStatus computes the status of a pod as the kubelet reports it.
func podStatus(v *podView) corev1.PodStatus {
	pod := v.pod
	s := corev1.PodStatus{
		HostIP:             v.hostIP,
		QOSClass:           podrules.QOSClass(pod),
		ObservedGeneration: pod.Generation,
	}
	setAddresses(&s, v)
	if !v.startTime.IsZero() {
		t := metav1.NewTime(v.startTime)
		s.StartTime = &t
	}

	sidecar := func(i int) bool { return v.init[i].sidecar }
	for i := range v.init {
		iv := &v.init[i]
		cs := containerStatus(pod.UID, iv, "PodInitializing")
		if podrules.InitCompleted(&cs, iv.sidecar) {
			cs.Ready = true // a completed init container is ready, as the kubelet reports it
		}
		s.InitContainerStatuses = append(s.InitContainerStatuses, cs)
	}
	regularWaiting := "ContainerCreating"
	if !podrules.Initialized(&s, sidecar) {
		regularWaiting = "PodInitializing"
	}
	for i := range v.regular {
		s.ContainerStatuses = append(s.ContainerStatuses, containerStatus(pod.UID, &v.regular[i], regularWaiting))
	}
	for i := range v.ephemeral {
		s.EphemeralContainerStatuses = append(s.EphemeralContainerStatuses, containerStatus(pod.UID, &v.ephemeral[i], "ContainerCreating"))
	}

	if v.failReason != "" {
		s.Phase = corev1.PodFailed
		s.Reason, s.Message = v.failReason, v.failMessage
	} else {
		// Once deleted and stopped (terminated), as the containers ended.
		s.Phase = podrules.Phase(&s, sidecar, v.terminated)
	}
	podrules.SetConditions(&s, sidecar, v.sandbox, metav1.Now())
	for i := range s.Conditions {
		s.Conditions[i].ObservedGeneration = pod.Generation
	}
	for _, c := range v.conditions {
		c.ObservedGeneration = pod.Generation
		s.Conditions = append(s.Conditions, c)
	}
	return s
}
