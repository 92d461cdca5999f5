package sim

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/podrules"
	"github.com/nodelet/nodelet/pkg/provider"
)

// A pod's life is a chain of steps, each at a time: start (Pending to
// Running), exit (its containers end their run), restart (the crash-loop
// back-off is over) and terminate (a deleted pod is gone). A pod has at
// most one step ahead and at most one timer, armed for it while it is in
// the future. A step taken may set the next one.

type step int

const (
	stepNone step = iota
	stepStart
	stepExit
	stepRestart
	stepTerminate
	stepStage // play st.stage
)

// backOff is the wait before restarting containers that have restarted
// restarts times already: the kubelet's crash-loop back-off steps
// (podrules.BackOff), 10 s after the first exit, doubling with every
// restart, at most 5 min. Unlike the kubelet's rule for a real container
// (podrules.RestartBackOff), every exit backs off, the first one too, and a
// long run does not start the back-off over, as Options.CompleteRatio
// documents.
func backOff(restarts int32) time.Duration {
	return podrules.BackOff(int(restarts))
}

// armed is one timer of the injected clock. The field holding it (a pod's
// timer, the node's flip) is guarded by p.mu, and so is done: set when the
// timer fired or was cancelled. timer is set once AfterFunc has returned.
type armed struct {
	timer clock.Timer
	done  bool
}

// cancelLocked empties the slot. The caller stops the returned timer (if
// any) once it has released the lock: a fake clock runs callbacks holding
// its own lock, and callbacks take p.mu.
func cancelLocked(slot **armed) clock.Timer {
	a := *slot
	*slot = nil
	if a == nil {
		return nil
	}
	a.done = true
	return a.timer
}

func stopTimer(t clock.Timer) {
	if t != nil {
		t.Stop()
	}
}

// startTimer arms a, already put in *slot, to call fire after d. It is
// called without the lock. If a was cancelled meanwhile, the timer is
// stopped at once.
func (p *Provider) startTimer(slot **armed, a *armed, d time.Duration, fire func()) {
	t := p.clock.AfterFunc(d, fire)
	p.mu.Lock()
	keep := *slot == a && !a.done
	if keep {
		a.timer = t
	}
	p.mu.Unlock()
	if !keep {
		t.Stop()
	}
}

// firedLocked tells whether a is still the slot's timer, and empties the
// slot if so. The caller holds the lock.
func firedLocked(slot **armed, a *armed) bool {
	if a.done || *slot != a {
		return false
	}
	a.done = true
	*slot = nil
	return true
}

// async runs fn in a goroutine of its own. A timer callback uses it to arm
// the next timer: it may neither read the clock nor arm a timer itself,
// since a fake clock calls it holding its own lock.
func (p *Provider) async(fn func()) {
	p.rearming.Add(1)
	go func() {
		defer p.rearming.Done()
		fn()
	}()
}

// currentLocked tells whether st is still stored and its schedule still
// the one of generation gen. The caller holds the lock.
func (p *Provider) currentLocked(st *simPod, gen uint64) bool {
	return p.pods[key(st.pod.Namespace, st.pod.Name)] == st && st.gen == gen
}

// schedule takes the pod's steps that are due, each at the time it was
// due, then arms a timer for the next one. It is called without the lock
// and never from a timer callback.
func (p *Provider) schedule(logger klog.Logger, st *simPod, gen uint64) {
	for {
		now := p.clock.Now()
		p.mu.Lock()
		if !p.currentLocked(st, gen) || st.step == stepNone {
			p.mu.Unlock()
			return
		}
		at := st.stepAt
		if at.After(now) {
			old := cancelLocked(&st.timer)
			a := &armed{}
			st.timer = a
			p.mu.Unlock()
			stopTimer(old)
			p.startTimer(&st.timer, a, at.Sub(now), func() { p.fire(logger, st, gen, a) })
			return
		}
		p.stepLocked(logger, st)
		p.unlockAndNotify()
	}
}

// fire is the callback of a pod's timer.
func (p *Provider) fire(logger klog.Logger, st *simPod, gen uint64, a *armed) {
	p.mu.Lock()
	if !firedLocked(&st.timer, a) || !p.currentLocked(st, gen) {
		p.mu.Unlock()
		return
	}
	p.stepLocked(logger, st)
	more := st.step != stepNone
	p.unlockAndNotify()
	if more {
		p.async(func() { p.schedule(logger, st, gen) })
	}
}

// stepLocked takes the pod's next step, at the time it was due, and sets
// the one after it. The caller holds the lock and then calls
// unlockAndNotify.
func (p *Provider) stepLocked(logger klog.Logger, st *simPod) {
	at, s := st.stepAt, st.step
	st.step = stepNone
	switch s {
	case stepStart:
		if st.status.Phase != corev1.PodPending {
			return
		}
		if !p.volumesAttachedLocked(logger, st) {
			st.step, st.stepAt = stepStart, at.Add(volumeRecheck)
			return
		}
		p.startLocked(st, at)
		logger.V(4).Info("Simulated pod is running", "pod", klog.KObj(st.pod))
	case stepStage:
		if p.pingError() != nil {
			// A wedged node plays nothing, as it terminates nothing.
			st.stepAt = at.Add(volumeRecheck)
			st.step = stepStage
			return
		}
		p.playLocked(logger, st, at)
		return // playLocked notifies what changed
	case stepExit:
		p.exitLocked(logger, st, at)
	case stepRestart:
		setRestarted(st.pod, st.own(), at)
		p.runLocked(st, at)
		logger.V(4).Info("Simulated pod restarted its containers", "pod", klog.KObj(st.pod))
	case stepTerminate:
		if p.pingError() != nil {
			// An unhealthy node is wedged, as one whose kubelet hangs: its
			// pods, and the volumes they mount, stay until it recovers.
			st.step, st.stepAt = stepTerminate, at.Add(volumeRecheck)
			return
		}
		p.terminateLocked(st, at)
		logger.V(4).Info("Simulated pod terminated", "pod", klog.KObj(st.pod))
		return // gone: nothing to notify twice
	}
	p.queueNotify(st)
}

// startLocked runs a pending pod at `at`. The caller holds the lock and
// notifies.
func (p *Provider) startLocked(st *simPod, at time.Time) {
	setRunning(st.pod, st.own(), at)
	p.runLocked(st, at)
}

// runLocked sets the end of the run of containers started at `at`, for a
// pod that completes or fails.
func (p *Provider) runLocked(st *simPod, at time.Time) {
	if st.outcome == runForever {
		return
	}
	st.step = stepExit
	st.stepAt = at.Add(p.opts.RunDuration + p.jitterLocked(p.opts.RunJitter))
}

// resumeLocked sets the next step of a restored running pod from its
// status: the restart of containers in CrashLoopBackOff, or the end of the
// current run.
func (p *Provider) resumeLocked(st *simPod, now time.Time) {
	s := &st.status
	for i := range s.ContainerStatuses {
		cs := &s.ContainerStatuses[i]
		if w := cs.State.Waiting; w == nil || w.Reason != reasonBackOff {
			continue
		}
		st.step, st.stepAt = stepRestart, now
		if t := cs.LastTerminationState.Terminated; t != nil && !t.FinishedAt.IsZero() {
			st.stepAt = t.FinishedAt.Add(backOff(cs.RestartCount))
		}
		return
	}
	started := now
	for i := range s.ContainerStatuses {
		if r := s.ContainerStatuses[i].State.Running; r != nil && !r.StartedAt.IsZero() {
			started = r.StartedAt.Time
			break
		}
	}
	p.runLocked(st, started)
}

// exitLocked ends the run of the pod's containers at `at` with the pod's
// outcome, then follows its restart policy: the pod finishes, or its
// containers wait in CrashLoopBackOff for their restart.
func (p *Provider) exitLocked(logger klog.Logger, st *simPod, at time.Time) {
	code := int32(0)
	if st.outcome == fail {
		code = 1
	}
	exitContainers(st.own(), at, code)
	restart := false
	switch st.pod.Spec.RestartPolicy {
	case corev1.RestartPolicyNever:
	case corev1.RestartPolicyOnFailure:
		restart = code != 0
	default: // Always, the API's default
		restart = true
	}
	if !restart {
		phase := setFinished(st.pod, st.own(), at)
		p.finishLocked(st)
		logger.V(4).Info("Simulated pod finished", "pod", klog.KObj(st.pod), "phase", phase)
		return
	}
	restarts := restartCount(&st.status)
	d := backOff(restarts)
	setBackOff(st.pod, st.own(), at, d)
	st.step, st.stepAt = stepRestart, at.Add(d)
	logger.V(4).Info("Simulated pod's containers exited; back-off before restarting", "pod", klog.KObj(st.pod), "exitCode", code, "backOff", d)
}

// finishLocked releases what a pod that Succeeded or Failed held: it no
// longer counts against the node's capacity and its IP is free again; it
// stays, with its final status, until deleted.
func (p *Provider) finishLocked(st *simPod) {
	p.used.Sub(st.req)
	p.ips.release(st.ip)
	st.ip = 0
	st.finished = true
	p.finished++
	p.volumesChanged = p.volumesChanged || len(st.volumes) > 0
}

// terminateLocked ends a deleted pod at `at`: it is removed, what it held
// is released and its final status queued for notification.
func (p *Provider) terminateLocked(st *simPod, at time.Time) {
	p.removeLocked(st)
	p.notifyStoppedLocked(st, at)
}

// notifyStoppedLocked queues the final status of a pod removed: its
// containers stopped at `at`, unless it had finished before. The caller
// holds the lock.
func (p *Provider) notifyStoppedLocked(st *simPod, at time.Time) {
	if !st.finished {
		setFinished(st.pod, st.own(), at)
	}
	p.queueNotify(st)
}

// removeLocked removes the pod and releases what it held. The caller
// holds the lock.
func (p *Provider) removeLocked(st *simPod) {
	delete(p.pods, key(st.pod.Namespace, st.pod.Name))
	p.volumesChanged = p.volumesChanged || (len(st.volumes) > 0 && !st.finished)
	if st.finished {
		p.finished--
		return
	}
	p.used.Sub(st.req)
	p.ips.release(st.ip)
	st.ip = 0
}

// Evict fails a running pod at once (a simulated pod needs no grace), as
// the kubelet fails a pod it evicts: its containers stop, the pod is Failed
// with the eviction's reason, message and conditions (a DisruptionTarget),
// and it stays until deleted. A pod that finished or is being deleted is
// left alone.
func (p *Provider) Evict(pod *corev1.Pod, e provider.Eviction) error {
	now := p.clock.Now()
	p.mu.Lock()
	st, ok := p.pods[key(pod.Namespace, pod.Name)]
	if !ok || st.pod.UID != pod.UID {
		p.mu.Unlock()
		return fmt.Errorf("evict pod %s: %w", klog.KObj(pod), provider.ErrNotFound)
	}
	if st.finished || st.deleting {
		p.mu.Unlock()
		return nil
	}
	st.gen++ // what was scheduled for the pod no longer happens
	st.step = stepNone
	forgetView(st)
	s := st.own()
	setFinished(st.pod, s, now)
	s.Phase, s.Reason, s.Message = corev1.PodFailed, e.Reason, e.Message
	t := metav1.NewTime(now)
	podrules.SetConditions(s, podrules.SpecSidecars(st.pod), false, t) // not ready now as a failed pod
	for _, c := range e.Conditions {
		podrules.SetCondition(s, c.Type, c.Status, c.Reason, c.Message, t)
	}
	p.finishLocked(st)
	p.queueNotify(st)
	p.unlockAndNotify()
	return nil
}
