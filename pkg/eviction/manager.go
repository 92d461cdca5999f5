// Package eviction is nodelet's node-pressure eviction manager, after the
// kubelet's: every period it reads the node's usage, compares it with the
// eviction thresholds (evictionHard, evictionSoft and their grace periods
// and minimum reclaims), reports the MemoryPressure, DiskPressure and
// PIDPressure node conditions, refuses new pods the conditions forbid, and
// when a threshold is met first reclaims what the node can (dead
// containers, unused images) and then evicts one pod at a time, ranked as
// the kubelet ranks them.
//
// It owns the decision and nothing else: usage, the list of pods, stopping
// a pod and the node-level clean-ups all come through Deps, which a
// provider supplies. It never talks to the API server and never evicts a
// critical (static, mirror or system-critical priority) pod.
package eviction

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/clock"
)

// Defaults of Options.
const (
	DefaultPeriod                   = 10 * time.Second
	DefaultPressureTransitionPeriod = 5 * time.Minute
)

const (
	// hardGracePeriodSeconds is how long a pod evicted for a hard
	// threshold gets to stop: the kubelet's "immediate" eviction.
	hardGracePeriodSeconds = 1
	// defaultPodGracePeriodSeconds is a pod's grace period when its spec
	// does not say (the API server defaults it to this).
	defaultPodGracePeriodSeconds = 30
	// cleanupTimeout is how long an evicted pod may stay among the active
	// pods before the manager evicts another: the kubelet waits as long
	// for an evicted pod to be cleaned up.
	cleanupTimeout = 30 * time.Second
)

// Options configures a Manager; zero fields take defaults.
type Options struct {
	// NodeName names the node in events.
	NodeName string
	// Thresholds are the eviction thresholds, from ParseThresholds. None:
	// the manager only reports healthy conditions.
	Thresholds []Threshold
	// PressureTransitionPeriod is how long a pressure condition stays True
	// after its threshold was last met (default 5m), so that a node hovering
	// at a threshold does not flap.
	PressureTransitionPeriod time.Duration
	// MaxPodGracePeriodSeconds caps the grace period of pods evicted for a
	// soft threshold; 0 lets each pod have its own.
	MaxPodGracePeriodSeconds int64
	// Period is the time between two synchronizations (default 10s).
	Period time.Duration
	// Clock is the time source (default the real clock).
	Clock clock.WithTicker
}

// Deps are what the manager reads and acts through. Summary, ActivePods and
// Evict are required; the others are optional.
type Deps struct {
	// Summary returns the node's and its pods' usage.
	Summary func(ctx context.Context) (*statsv1alpha1.Summary, error)
	// ActivePods returns the node's pods that have not finished, with spec
	// and status.
	ActivePods func() []*corev1.Pod
	// Evict stops the pod, giving it gracePeriodSeconds whatever its spec
	// says, and fails it with status (status.Apply sets the phase, reason,
	// message and condition). It may return once the stop has begun; the
	// manager evicts no other pod while this one stays active, for up to
	// 30s.
	Evict func(ctx context.Context, pod *corev1.Pod, gracePeriodSeconds int64, status EvictionStatus) error

	// DeleteDeadContainers and DeleteUnusedImages free disk space before
	// any pod is evicted for a disk signal; nil when there is nothing of the
	// kind to delete.
	DeleteDeadContainers func(ctx context.Context) error
	DeleteUnusedImages   func(ctx context.Context) error
	// Pressure is where the manager sets the node's pressure conditions,
	// which the node's provider reports and admits pods against (nil: the
	// manager's own).
	Pressure *Pressure
	// NodeConditionsChanged asks for a node status report now; it must not
	// block.
	NodeConditionsChanged func()
	// Recorder, when set, records the kubelet's events: EvictionThresholdMet
	// on the node, Evicted on each evicted pod.
	Recorder record.EventRecorder
}

// Manager is the eviction manager of one node.
type Manager struct {
	deps    Deps
	opts    Options
	nodeRef *corev1.ObjectReference

	mu sync.Mutex
	// firstMet holds, for each threshold (by index) met now or not yet
	// reclaimed, when it was first met without a break.
	firstMet map[int]time.Time
	// met are the thresholds that drove eviction at the last
	// synchronization; they stay met until their minimum reclaim is done.
	met map[int]bool
	// conditionLastMet is when a threshold raising each condition was
	// last met; conditions are the conditions reported.
	conditionLastMet map[corev1.NodeConditionType]time.Time
	pressure         *Pressure
	last             observations
	// pending is the last evicted pod, until it has left the active pods.
	pending *pendingEviction
	// evictions counts the pods evicted, by signal.
	evictions map[Signal]int
}

type pendingEviction struct {
	uid string
	at  time.Time
}

// New builds a Manager. It does no I/O.
func New(deps Deps, opts Options) (*Manager, error) {
	if deps.Summary == nil || deps.ActivePods == nil || deps.Evict == nil {
		return nil, errors.New("eviction manager: Summary, ActivePods and Evict are required")
	}
	if opts.Period < 0 || opts.PressureTransitionPeriod < 0 || opts.MaxPodGracePeriodSeconds < 0 {
		return nil, errors.New("eviction manager: period, pressure transition period and max pod grace period must not be negative")
	}
	for _, t := range opts.Thresholds {
		if _, ok := signalInfo[t.Signal]; !ok {
			return nil, fmt.Errorf("eviction manager: unsupported signal %q", t.Signal)
		}
	}
	if opts.Period == 0 {
		opts.Period = DefaultPeriod
	}
	if opts.PressureTransitionPeriod == 0 {
		opts.PressureTransitionPeriod = DefaultPressureTransitionPeriod
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if deps.Pressure == nil {
		deps.Pressure = NewPressure()
	}
	return &Manager{
		deps:             deps,
		opts:             opts,
		nodeRef:          &corev1.ObjectReference{Kind: "Node", Name: opts.NodeName, UID: types.UID(opts.NodeName)},
		firstMet:         map[int]time.Time{},
		met:              map[int]bool{},
		conditionLastMet: map[corev1.NodeConditionType]time.Time{},
		pressure:         deps.Pressure,
		evictions:        map[Signal]int{},
	}, nil
}

// Run synchronizes every period until ctx is done.
func (m *Manager) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	ticker := m.opts.Clock.NewTicker(m.opts.Period)
	defer ticker.Stop()
	for {
		if _, err := m.Synchronize(ctx); err != nil {
			logger.Error(err, "Eviction manager: synchronize failed")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C():
		}
	}
}

// Synchronize is one pass of the loop (Run calls it every period): it
// observes the signals, updates the node conditions, and reclaims or evicts
// at most one pod when a threshold is met. It returns the pod evicted, if
// any. Calls must not overlap; it is exported for tests and for callers
// that drive the manager themselves instead of Run.
func (m *Manager) Synchronize(ctx context.Context) (*corev1.Pod, error) {
	if len(m.opts.Thresholds) == 0 {
		return nil, nil
	}
	logger := klog.FromContext(ctx)
	summary, err := m.deps.Summary(ctx)
	if err != nil {
		return nil, fmt.Errorf("eviction manager: get stats summary: %w", err)
	}
	obs := observe(summary)
	now := m.opts.Clock.Now()

	m.mu.Lock()
	// Met now, or met before and not yet back above its minimum reclaim.
	metNow := m.thresholdsMet(obs, false)
	for i := range m.met {
		if m.thresholdMet(i, obs, true) {
			metNow[i] = true
		}
	}
	firstMet := map[int]time.Time{}
	for i := range metNow {
		at, ok := m.firstMet[i]
		if !ok {
			at = now
		}
		firstMet[i] = at
	}
	m.firstMet = firstMet
	for i := range metNow {
		m.conditionLastMet[signalInfo[m.opts.Thresholds[i].Signal].condition] = now
	}
	conditions := map[corev1.NodeConditionType]bool{}
	for c, at := range m.conditionLastMet {
		if at.Equal(now) || now.Sub(at) < m.opts.PressureTransitionPeriod {
			conditions[c] = true
		}
	}
	changed := m.pressure.set(conditions)
	met := map[int]bool{}
	for i, at := range firstMet {
		if now.Sub(at) >= m.opts.Thresholds[i].GracePeriod {
			met[i] = true
		}
	}
	m.met = met
	// Act only on figures newer than at the last pass: stats that have not
	// been refreshed still show the pressure an eviction already relieved.
	var act []int
	for i := range met {
		s := m.opts.Thresholds[i].Signal
		last, seen := m.last[s]
		if o := obs[s]; !seen || o.time.IsZero() || o.time.After(last.time) {
			act = append(act, i)
		}
	}
	m.last = obs
	m.mu.Unlock()

	if changed {
		logger.V(2).Info("Eviction manager: node conditions changed", "conditions", slices.Collect(maps.Keys(conditions)))
		if m.deps.NodeConditionsChanged != nil {
			m.deps.NodeConditionsChanged()
		}
	}
	if len(act) == 0 {
		return nil, nil
	}
	// Memory first, as the kubelet does; then in the order of Signals, a
	// hard threshold before a soft one of the same signal.
	slices.SortFunc(act, func(a, b int) int {
		if d := signalOrder(m.opts.Thresholds[a].Signal) - signalOrder(m.opts.Thresholds[b].Signal); d != 0 {
			return d
		}
		return cmpTrueFirst(m.opts.Thresholds[a].Hard(), m.opts.Thresholds[b].Hard())
	})
	t := m.opts.Thresholds[act[0]]
	res := signalInfo[t.Signal].resource
	if !m.evictionAllowed(now) {
		logger.V(2).Info("Eviction manager: waiting for the pod evicted last to be cleaned up", "resourceName", res)
		return nil, nil
	}
	logger.Info("Eviction manager: attempting to reclaim", "resourceName", res, "signal", t.Signal)
	if m.deps.Recorder != nil {
		m.deps.Recorder.Eventf(m.nodeRef, corev1.EventTypeWarning, "EvictionThresholdMet", "Attempting to reclaim %s", res)
	}

	if t.Signal != SignalMemoryAvailable && t.Signal != SignalPIDAvailable {
		freed, fresh := m.reclaimNodeLevel(ctx)
		if freed {
			logger.Info("Eviction manager: able to reduce resource pressure without evicting pods", "resourceName", res)
			return nil, nil
		}
		if fresh != nil {
			summary, obs = fresh, observe(fresh)
		}
	}

	pods := m.deps.ActivePods()
	if len(pods) == 0 {
		logger.Info("Eviction manager: eviction thresholds have been met, but no pods are active to evict")
		return nil, nil
	}
	stats := podStatsByUID(summary)
	for _, c := range rank(t.Signal, pods, stats) {
		if critical(c.pod) {
			continue
		}
		grace := int64(hardGracePeriodSeconds)
		if !t.Hard() {
			grace = defaultPodGracePeriodSeconds
			if p := c.pod.Spec.TerminationGracePeriodSeconds; p != nil {
				grace = *p
			}
			if limit := m.opts.MaxPodGracePeriodSeconds; limit > 0 {
				grace = min(grace, limit)
			}
		}
		status := evictionStatus(t, c.pod, c.stats, obs[t.Signal], metav1.NewTime(now))
		if m.deps.Recorder != nil {
			m.deps.Recorder.AnnotatedEventf(c.pod, status.Annotations, corev1.EventTypeWarning, Reason, "%s", status.Message)
		}
		logger.Info("Eviction manager: evicting pod", "pod", klog.KObj(c.pod), "signal", t.Signal, "gracePeriod", grace, "message", status.Message)
		// One attempt per pass, whatever its outcome, as the kubelet makes:
		// the next pass sees whether the pressure is gone.
		m.mu.Lock()
		m.pending = &pendingEviction{uid: string(c.pod.UID), at: now}
		m.mu.Unlock()
		if err := m.deps.Evict(ctx, c.pod, grace, status); err != nil {
			return nil, fmt.Errorf("eviction manager: evict pod %s/%s: %w", c.pod.Namespace, c.pod.Name, err)
		}
		m.mu.Lock()
		m.evictions[t.Signal]++
		m.mu.Unlock()
		return c.pod, nil
	}
	logger.Info("Eviction manager: unable to evict any pods from the node")
	return nil, nil
}

// evictionAllowed tells whether the pod evicted last has left the active
// pods (or was given long enough), so that another may be evicted.
func (m *Manager) evictionAllowed(now time.Time) bool {
	m.mu.Lock()
	p := m.pending
	m.mu.Unlock()
	if p == nil || now.Sub(p.at) >= cleanupTimeout {
		return true
	}
	for _, pod := range m.deps.ActivePods() {
		if string(pod.UID) == p.uid {
			return false
		}
	}
	m.mu.Lock()
	m.pending = nil
	m.mu.Unlock()
	return true
}

// reclaimNodeLevel deletes dead containers, then unused images, and tells
// whether that brought every threshold back above its minimum reclaim. It
// returns the summary taken afterwards, if any.
func (m *Manager) reclaimNodeLevel(ctx context.Context) (bool, *statsv1alpha1.Summary) {
	logger := klog.FromContext(ctx)
	ran := false
	for _, f := range []struct {
		name string
		fn   func(context.Context) error
	}{{"delete dead containers", m.deps.DeleteDeadContainers}, {"delete unused images", m.deps.DeleteUnusedImages}} {
		if f.fn == nil {
			continue
		}
		ran = true
		if err := f.fn(ctx); err != nil {
			logger.Info("Eviction manager: node-level reclaim failed", "step", f.name, "err", err)
		}
	}
	if !ran {
		return false, nil
	}
	summary, err := m.deps.Summary(ctx)
	if err != nil {
		logger.Error(err, "Eviction manager: get stats summary after reclaim")
		return false, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.thresholdsMet(observe(summary), true)) == 0, summary
}

// thresholdsMet returns the thresholds obs meets, regardless of grace
// periods. m.mu is held.
func (m *Manager) thresholdsMet(obs observations, withMinReclaim bool) map[int]bool {
	met := map[int]bool{}
	for i := range m.opts.Thresholds {
		if m.thresholdMet(i, obs, withMinReclaim) {
			met[i] = true
		}
	}
	return met
}

// thresholdMet tells whether the signal of threshold i is below it (or,
// withMinReclaim, below it plus its minimum reclaim). A signal without
// figures meets nothing.
func (m *Manager) thresholdMet(i int, obs observations, withMinReclaim bool) bool {
	t := m.opts.Thresholds[i]
	o, ok := obs[t.Signal]
	if !ok {
		return false
	}
	limit := t.Value.of(o.capacity)
	if withMinReclaim && t.MinReclaim != nil {
		limit += t.MinReclaim.of(o.capacity)
	}
	return o.available < limit
}

func signalOrder(s Signal) int { return slices.Index(Signals, s) }

// Evictions returns how many pods the manager has evicted, by signal.
func (m *Manager) Evictions() map[Signal]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.evictions)
}
