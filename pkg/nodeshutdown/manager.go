// Package nodeshutdown is graceful node shutdown, as the kubelet does it:
// once told that the host is going down, the node refuses new pods and
// reports NotReady, and its pods are stopped group by group, the lowest
// priority first, each group within its share of the shutdown grace period,
// and failed with the kubelet's reason and message. It owns only that
// sequence; it never decides that the host shuts down (Shutdown is called
// for that), and an agent that merely stops or restarts never calls it, so
// workloads outlive agent restarts.
package nodeshutdown

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/provider"
)

// The kubelet's words for a pod stopped by a node shutdown and for one
// refused during it, and for the node meanwhile.
const (
	TerminatedReason  = "Terminated"
	TerminatedMessage = "Pod was terminated in response to imminent node shutdown."
	RejectedReason    = "NodeShutdown"
	RejectedMessage   = "Pod was rejected as the node is shutting down."
	NotReadyMessage   = "node is shutting down"
)

// SystemCriticalPriority is the priority from which a pod is critical
// (system-cluster-critical and system-node-critical).
const SystemCriticalPriority = 2000000000

// Group is a range of pod priorities and the time its pods get to stop:
// from Priority up to the next group's.
type Group struct {
	Priority int32
	Grace    time.Duration
}

// Groups are the shutdown groups of the kubelet's settings: byPriority
// when given, else the ordinary pods with grace less criticalGrace and the
// critical ones with criticalGrace. None (shutdown disabled) when grace is 0
// and byPriority empty.
func Groups(grace, criticalGrace time.Duration, byPriority []Group) []Group {
	if len(byPriority) > 0 {
		groups := append([]Group(nil), byPriority...)
		sort.Slice(groups, func(i, j int) bool { return groups[i].Priority < groups[j].Priority })
		return groups
	}
	if grace <= 0 {
		return nil
	}
	return []Group{
		{Priority: 0, Grace: grace - criticalGrace},
		{Priority: SystemCriticalPriority, Grace: criticalGrace},
	}
}

// Budget is how long a shutdown of groups may take at most.
func Budget(groups []Group) time.Duration {
	var d time.Duration
	for _, g := range groups {
		d += g.Grace
	}
	return d
}

// Deps are what the manager acts through.
type Deps struct {
	// ActivePods are the node's pods that have not finished.
	ActivePods func() []*corev1.Pod
	// Stop stops pod within grace (its preStop hooks included) and fails
	// it with status's reason, message and conditions.
	Stop func(pod *corev1.Pod, grace time.Duration, status corev1.PodStatus) error
	// NodeConditionsChanged asks for the node's status to be reported now.
	NodeConditionsChanged func()
	Recorder              record.EventRecorder
	// State is where the manager marks the node as shutting down, which
	// the node's provider admits pods and reports readiness by (nil: the
	// manager's own).
	State *State
}

// Options are the manager's settings.
type Options struct {
	NodeName string
	Groups   []Group
	// Poll is how often stopped pods are checked (default 1s).
	Poll  time.Duration
	Clock clock.Clock
}

// State tells whether a node is shutting down. It is made before the
// node's provider, which admits pods and reports readiness by it, and set
// by the Manager built after the provider.
type State struct {
	mu           sync.Mutex
	shuttingDown bool
}

// ShuttingDown tells whether the node's shutdown has begun.
func (s *State) ShuttingDown() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.shuttingDown
}

// begin marks the shutdown as begun and tells whether it already was.
func (s *State) begin() (again bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	again, s.shuttingDown = s.shuttingDown, true
	return again
}

// Admit refuses every pod once the node is shutting down.
func (s *State) Admit(*corev1.Pod) error {
	if s.ShuttingDown() {
		return provider.Reject(RejectedReason, "%s", RejectedMessage)
	}
	return nil
}

// NotReady says why the node is not ready while it shuts down ("" before).
func (s *State) NotReady() string {
	if s.ShuttingDown() {
		return NotReadyMessage
	}
	return ""
}

// Manager runs one node's shutdown.
type Manager struct {
	deps Deps
	opts Options
}

// New returns the node's shutdown manager; it does nothing until Shutdown.
func New(deps Deps, opts Options) *Manager {
	if opts.Poll == 0 {
		opts.Poll = time.Second
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if deps.State == nil {
		deps.State = &State{}
	}
	return &Manager{deps: deps, opts: opts}
}

// Enabled tells whether the settings give pods any time to stop.
func (m *Manager) Enabled() bool { return len(m.opts.Groups) > 0 }

// ShuttingDown tells whether Shutdown was called.
func (m *Manager) ShuttingDown() bool { return m.deps.State.ShuttingDown() }

// Admit is the manager's State's Admit.
func (m *Manager) Admit(pod *corev1.Pod) error { return m.deps.State.Admit(pod) }

// NotReady is the manager's State's NotReady.
func (m *Manager) NotReady() string { return m.deps.State.NotReady() }

// ErrDisabled is returned by Shutdown when no grace period is configured.
var ErrDisabled = errors.New("graceful node shutdown is not configured (shutdownGracePeriod is 0)")

// Shutdown shuts the node down: from now on it refuses pods and is
// NotReady, and its pods are stopped group by group, the lowest priority
// first, each pod within the lesser of its own grace period and its
// group's. A group's pods stop together; the next group starts when they
// have all finished or the group's time is up. progress, when set, is told
// each step. It returns when every group is done or ctx ends.
func (m *Manager) Shutdown(ctx context.Context, progress func(string)) error {
	if !m.Enabled() {
		return ErrDisabled
	}
	logger := klog.FromContext(ctx)
	say := func(format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		logger.Info(msg)
		if progress != nil {
			progress(msg)
		}
	}
	again := m.deps.State.begin()
	if !again && m.deps.NodeConditionsChanged != nil {
		m.deps.NodeConditionsChanged()
	}
	pods := m.deps.ActivePods()
	say("Shutting down the node: %d pods to stop within %s", len(pods), Budget(m.opts.Groups))
	if m.deps.Recorder != nil {
		// The node's reference as the kubelet makes it, its name as UID.
		ref := &corev1.ObjectReference{Kind: "Node", Name: m.opts.NodeName, UID: types.UID(m.opts.NodeName)}
		m.deps.Recorder.Eventf(ref, corev1.EventTypeNormal, RejectedReason,
			"Node %s is shutting down: stopping %d pods within %s", m.opts.NodeName, len(pods), Budget(m.opts.Groups))
	}
	for i, g := range m.opts.Groups {
		var group []*corev1.Pod
		for _, pod := range pods {
			if groupOf(m.opts.Groups, priority(pod)) == i {
				group = append(group, pod)
			}
		}
		if len(group) == 0 {
			continue
		}
		say("Stopping %d pods of priority %d and above within %s", len(group), g.Priority, g.Grace)
		status := terminatedStatus(metav1.NewTime(m.opts.Clock.Now()))
		for _, pod := range group {
			grace := g.Grace
			if s := pod.Spec.TerminationGracePeriodSeconds; s != nil && time.Duration(*s)*time.Second < grace {
				grace = time.Duration(*s) * time.Second
			}
			if err := m.deps.Stop(pod, grace, status); err != nil && !errors.Is(err, provider.ErrNotFound) {
				logger.Error(err, "Unable to stop a pod for the node's shutdown", "pod", klog.KObj(pod))
			}
		}
		if !m.waitStopped(ctx, group, g.Grace) {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			say("Pods of priority %d and above still stopping after %s; going on", g.Priority, g.Grace)
		}
	}
	say("Node shutdown done")
	return nil
}

// waitStopped waits until none of pods is active, for at most d; false
// when some still are.
func (m *Manager) waitStopped(ctx context.Context, pods []*corev1.Pod, d time.Duration) bool {
	deadline := m.opts.Clock.Now().Add(d)
	for {
		if !anyActive(m.deps.ActivePods(), pods) {
			return true
		}
		if !m.opts.Clock.Now().Before(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-m.opts.Clock.After(min(m.opts.Poll, deadline.Sub(m.opts.Clock.Now()))):
		}
	}
}

// anyActive tells whether one of pods is among active.
func anyActive(active, pods []*corev1.Pod) bool {
	uids := make(map[string]bool, len(active))
	for _, p := range active {
		uids[string(p.UID)] = true
	}
	for _, p := range pods {
		if uids[string(p.UID)] {
			return true
		}
	}
	return false
}

// groupOf is the index of the group a pod of priority p belongs to: the
// last whose priority is at most p (the first for pods below them all).
func groupOf(groups []Group, p int32) int {
	i := 0
	for j, g := range groups {
		if g.Priority <= p {
			i = j
		}
	}
	return i
}

func priority(pod *corev1.Pod) int32 {
	if pod.Spec.Priority != nil {
		return *pod.Spec.Priority
	}
	return 0
}

// terminatedStatus is what a pod stopped by the shutdown ends with: Failed,
// the kubelet's reason and message, and its DisruptionTarget condition.
func terminatedStatus(now metav1.Time) corev1.PodStatus {
	return corev1.PodStatus{
		Phase:   corev1.PodFailed,
		Reason:  TerminatedReason,
		Message: TerminatedMessage,
		Conditions: []corev1.PodCondition{{
			Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, LastTransitionTime: now,
			Reason: "TerminationByKubelet", Message: TerminatedMessage,
		}},
	}
}
