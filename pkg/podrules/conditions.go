package podrules

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The five conditions the kubelet gives every pod, in the order it adds
// them, and their reasons and messages.
const (
	ReasonNotInitialized = "ContainersNotInitialized"
	ReasonNotReady       = "ContainersNotReady"
	ReasonPodCompleted   = "PodCompleted"
	ReasonPodFailed      = "PodFailed"
)

// SetConditions sets in status the five conditions the kubelet gives every
// pod, from its phase (set first) and its containers' states:
// PodScheduled; PodReadyToStartContainers while its sandbox runs
// (sandboxReady) and it is not final; PodInitialized, else which init
// containers are incomplete; ContainersReady and Ready while it runs with
// every container and sidecar ready, else which are not, or why it
// finished. Each is set with SetCondition: other conditions are kept.
func SetConditions(status *corev1.PodStatus, sidecar Sidecars, sandboxReady bool, now metav1.Time) {
	final := IsFinal(status.Phase)
	SetCondition(status, corev1.PodScheduled, corev1.ConditionTrue, "", "", now)
	SetCondition(status, corev1.PodReadyToStartContainers, conditionStatus(sandboxReady && !final), "", "", now)
	if Initialized(status, sidecar) {
		SetCondition(status, corev1.PodInitialized, corev1.ConditionTrue, "", "", now)
	} else {
		SetCondition(status, corev1.PodInitialized, corev1.ConditionFalse, ReasonNotInitialized, incompleteMessage(status, sidecar), now)
	}
	ready, reason, message := corev1.ConditionFalse, "", ""
	switch {
	case status.Phase == corev1.PodFailed:
		reason = ReasonPodFailed
	case final:
		reason = ReasonPodCompleted
	case status.Phase == corev1.PodRunning && allReady(status, sidecar):
		ready = corev1.ConditionTrue
	default:
		reason, message = ReasonNotReady, unreadyMessage(status, sidecar)
	}
	SetCondition(status, corev1.ContainersReady, ready, reason, message, now)
	SetCondition(status, corev1.PodReady, ready, reason, message, now)
}

// SetCondition sets one condition of status, moving its transition time
// to now only when its status changes; conditions of other types
// (readiness gates, disruption targets) are kept.
func SetCondition(status *corev1.PodStatus, typ corev1.PodConditionType, s corev1.ConditionStatus, reason, message string, now metav1.Time) {
	for i := range status.Conditions {
		c := &status.Conditions[i]
		if c.Type != typ {
			continue
		}
		if c.Status != s {
			c.LastTransitionTime = now
		}
		c.Status, c.Reason, c.Message = s, reason, message
		return
	}
	status.Conditions = append(status.Conditions, corev1.PodCondition{
		Type:               typ,
		Status:             s,
		Reason:             reason,
		Message:            message,
		LastTransitionTime: now,
	})
}

func conditionStatus(ok bool) corev1.ConditionStatus {
	if ok {
		return corev1.ConditionTrue
	}
	return corev1.ConditionFalse
}

// allReady tells whether every container and sidecar is ready.
func allReady(status *corev1.PodStatus, sidecar Sidecars) bool {
	ready := true
	eachUnready(status, sidecar, func(string) { ready = false })
	return ready
}

// eachUnready calls f with the name of each sidecar, then each container,
// that is not ready.
func eachUnready(status *corev1.PodStatus, sidecar Sidecars, f func(name string)) {
	for i := range status.InitContainerStatuses {
		cs := &status.InitContainerStatuses[i]
		if !cs.Ready && sidecar(i) {
			f(cs.Name)
		}
	}
	for i := range status.ContainerStatuses {
		if !status.ContainerStatuses[i].Ready {
			f(status.ContainerStatuses[i].Name)
		}
	}
}

// unreadyMessage is the kubelet's message of a pod that is not ready.
func unreadyMessage(status *corev1.PodStatus, sidecar Sidecars) string {
	var l nameList
	eachUnready(status, sidecar, l.size)
	l.start("containers with unready status: [")
	eachUnready(status, sidecar, l.add)
	return l.end()
}

// incompleteMessage is the kubelet's message of a pod that is not
// initialized.
func incompleteMessage(status *corev1.PodStatus, sidecar Sidecars) string {
	var l nameList
	eachIncomplete(status, sidecar, l.size)
	l.start("containers with incomplete status: [")
	eachIncomplete(status, sidecar, l.add)
	return l.end()
}

// eachIncomplete calls f with the name of each init container that keeps
// the pod from being initialized.
func eachIncomplete(status *corev1.PodStatus, sidecar Sidecars, f func(name string)) {
	for i := range status.InitContainerStatuses {
		cs := &status.InitContainerStatuses[i]
		if initIncomplete(cs, sidecar(i)) {
			f(cs.Name)
		}
	}
}

// nameList writes a message that lists names, "prefix[a b c]", in one
// allocation: the names are measured (size), then written (add).
type nameList struct {
	b     strings.Builder
	n     int // the bytes of the names and their separators
	names int
}

func (l *nameList) size(name string) { l.n += len(name) + 1 }

func (l *nameList) start(prefix string) {
	l.b.Grow(len(prefix) + l.n + 1)
	l.b.WriteString(prefix)
}

func (l *nameList) add(name string) {
	if l.names > 0 {
		l.b.WriteByte(' ')
	}
	l.b.WriteString(name)
	l.names++
}

func (l *nameList) end() string {
	l.b.WriteByte(']')
	return l.b.String()
}
