package lifecycle

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/nodelet/nodelet/pkg/podrules"
)

// Deciding apart from doing. Each time a pod worker looks at its pod it
// first decides what to do, as the kubelet computes a pod's actions before
// it carries them out: computePodActions is a pure function from a podView
// (the snapshot the status is computed from) and the time to podActions.
// The worker's executor (step, in containers.go) carries them out against
// the runtime and decides nothing but how. The pod's policies live here
// and nowhere else: the restart policy, init containers in order, sidecars
// (started before the app containers, stopped after them, left alone once
// the app containers are ending), the crash-loop back-off, in-place
// resize, the order containers stop in, a sandbox that died, a pod that
// ended (its volumes torn down, nothing of it run again), and when to
// come back.

// podActions is one step of a pod worker: what to do, in order.
type podActions struct {
	// pod is the spec the actions were decided from.
	pod *corev1.Pod

	// terminate: the pod is deleted: its containers stop as stop says,
	// then its sandbox, volumes and state go.
	terminate bool
	// evict: the node evicts the pod: its containers stop as stop says and
	// it fails with the eviction's reason.
	evict *Eviction
	// failed: the pod has failed for good: nothing starts; only its probes
	// stop.
	failed bool
	// ended: the pod ended (its phase is final and nothing of it runs, or
	// its volumes were torn down for that already): nothing of it starts
	// or is set up again, as the kubelet runs a terminal pod no more;
	// only its probes stop. tearDownVolumes: its volumes are still there
	// and are torn down, as the kubelet's volume manager drops a
	// terminated pod's volumes before the pod is deleted.
	ended, tearDownVolumes bool
	// deadlineExceeded: the pod was active longer than its
	// activeDeadlineSeconds: its containers stop as stop says and it fails.
	deadlineExceeded bool
	// stop is how the containers of a pod that ends (terminate, evict,
	// deadlineExceeded) stop.
	stop *stopActions

	// replaceSandbox: the sandbox does not run (it died, or a container
	// start found it gone): a new one is set up, the dead one's records
	// standing for the pod's until then.
	replaceSandbox bool
	// setUp says whether the volumes and sandbox are set up first.
	setUp setUpAction

	// containers are the actions on the pod's containers, in order.
	containers []containerAction
	// stopSidecars, when set, stops the sidecars after the containers'
	// actions: the app containers are done for good.
	stopSidecars *stopActions

	// next is when to look again at the latest: at the active deadline, at
	// the end of a back-off; 0 when only an event (an exit, a probe, a
	// change of the pod) calls for another look. The executor may come
	// back sooner: a start that fails is tried again after retryAfter.
	next time.Duration
}

// setUpAction is what the pod's volumes and sandbox need before any
// container starts.
type setUpAction int

const (
	// setUpNone: both are ready.
	setUpNone setUpAction = iota
	// setUpNow: set them up, then decide the containers against the
	// sandbox set up (computeContainerActions).
	setUpNow
	// setUpLater: set them up once the back-off of the set-ups that failed
	// is over (next); nothing else until then.
	setUpLater
)

// containerActionKind is what an action does to a container.
type containerActionKind int

const (
	// actStart starts the container's attempt `attempt`: its first, a
	// restart whose back-off is over, or the first of a new image.
	actStart containerActionKind = iota
	// actRestartLost stops the attempt the runtime lost track of (it may
	// still run) and starts the next at once.
	actRestartLost
	// actWaitBackOff keeps an exited container waiting in
	// CrashLoopBackOff until its back-off is over.
	actWaitBackOff
	// actSyncProbes runs the probes of the running attempt, or stops those
	// of an attempt that exited.
	actSyncProbes
	// actResize gives the running attempt the resources its spec now has,
	// in place (by a restart if the runtime cannot).
	actResize
	// actRestartToResize stops the running attempt and starts the next at
	// once: its resize policy asks for a restart.
	actRestartToResize
	// actRestartForImage stops the running attempt and starts the next at
	// once with the new image its spec names; its back-off starts over.
	actRestartForImage
	// actGoOnIfStarted: the rest of the plan is carried out only if the
	// sidecar still runs started (the action before may have restarted
	// it); otherwise it waits for the next step.
	actGoOnIfStarted
)

// containerAction is one action on one container.
type containerAction struct {
	kind      containerActionKind
	container *corev1.Container
	// latest is the container's latest attempt as decided on (zero for a
	// container never started).
	latest ContainerStatus
	// attempt is the attempt actStart starts; newImage: the first attempt
	// of the new image its spec names, its back-off counting from there.
	attempt  int
	newImage bool
	// backOff is actWaitBackOff's whole back-off, wait what is left of it.
	backOff, wait time.Duration
}

// stopActions stops those containers of groups that run, within grace of
// when it begins: group after group, the containers of a group together,
// each after its preStop hook when hooks is set.
type stopActions struct {
	groups [][]*corev1.Container
	grace  time.Duration
	hooks  bool
}

// computePodActions decides one step of the pod as v shows it at now: a
// pod that ends stops; otherwise its volumes and sandbox are set up if
// they need it, and its containers get what computeContainerActions says.
func computePodActions(v *podView, now time.Time) podActions {
	a := podActions{pod: v.pod}
	switch {
	case v.deleting:
		a.terminate, a.stop = true, stopEverything(v.pod, v.grace, true)
		return a
	case v.evict != nil && v.failReason == "":
		a.evict, a.stop = v.evict, stopEverything(v.pod, v.evict.Grace, true)
		return a
	case v.volumesTornDown || ended(v):
		a.ended, a.tearDownVolumes = true, !v.volumesTornDown
		return a
	case v.failReason != "":
		a.failed = true
		return a
	}
	a.replaceSandbox = v.sandboxSetUp && replaceSandbox(v.sandbox, v.sandboxRefused, v.appsDone)
	if v.volumesReady && v.sandboxSetUp && !a.replaceSandbox {
		return computeContainerActions(v, now)
	}
	a.setUp = setUpNow
	if wait := v.setUpRetryAt.Sub(now); wait > 0 {
		a.setUp, a.next = setUpLater, wait
	}
	return a
}

// computeContainerActions decides what the containers of a pod whose
// sandbox is set up need at now: past its active deadline the pod stops;
// otherwise its init containers start in order, each once the one before
// has completed (a sidecar: has started), then its app and ephemeral
// containers; once the app containers are done for good, its sidecars
// stop.
func computeContainerActions(v *podView, now time.Time) podActions {
	a := podActions{pod: v.pod}
	if d := v.pod.Spec.ActiveDeadlineSeconds; d != nil {
		deadline := v.startTime.Add(time.Duration(*d) * time.Second)
		if !now.Before(deadline) {
			a.deadlineExceeded, a.stop = true, stopEverything(v.pod, gracePeriod(v.pod), false)
			return a
		}
		a.next = deadline.Sub(now)
	}
	if !a.initContainers(v, now) {
		return a
	}
	for i := range v.regular {
		a.appContainer(v, &v.regular[i], now)
	}
	for i := range v.ephemeral {
		// An ephemeral container runs once, never restarted.
		if cv := &v.ephemeral[i]; cv.latest == nil {
			a.start(cv, cv.firstAttempt, false)
		}
	}
	if v.appsDone {
		a.stopSidecars = &stopActions{groups: sidecarsLastFirst(v.pod), grace: gracePeriod(v.pod), hooks: true}
	}
	return a
}

// initContainers plans the init containers in order. It returns false
// when one holds the rest back, so that nothing after it is planned.
func (a *podActions) initContainers(v *podView, now time.Time) bool {
	for i := range v.init {
		var goOn bool
		if v.init[i].sidecar {
			goOn = a.sidecar(v, i, now)
		} else {
			goOn = a.initContainer(v, &v.init[i], now)
		}
		if !goOn {
			return false
		}
	}
	return true
}

// initContainer plans an init container that runs to completion: what
// follows waits until it has. One that failed for good fails the pod.
func (a *podActions) initContainer(v *podView, cv *containerView, now time.Time) bool {
	st := cv.latest
	switch {
	case st == nil:
		a.start(cv, cv.firstAttempt, false)
	case st.State == StateRunning:
		a.add(actSyncProbes, cv)
	case cv.lost:
		a.add(actRestartLost, cv)
	case st.ExitCode == 0:
		a.add(actSyncProbes, cv)
		return true
	case cv.restarts(v.pod, true):
		a.restart(cv, now)
	default:
		// Failed for good: the pod fails, and what still runs (its
		// sidecars) stops as the kubelet kills a pod, with preStop hooks
		// and its grace period.
		a.stop = stopEverything(v.pod, gracePeriod(v.pod), true)
	}
	return false
}

// sidecar plans the i-th init container, a sidecar: the next container
// starts once it has started (its startup probe passed), and it runs as
// long as the app containers do, restarted whatever the pod's policy.
func (a *podActions) sidecar(v *podView, i int, now time.Time) bool {
	cv := &v.init[i]
	st := cv.latest
	switch {
	case st == nil:
		a.start(cv, cv.firstAttempt, false)
		return false
	case st.State == StateRunning && newImage(cv):
		// Restarted at once with the image its spec names, as an app
		// container; what already followed it goes on.
		a.add(actSyncProbes, cv)
		a.add(actRestartForImage, cv)
		return startedAfter(v, i)
	case st.State == StateRunning:
		a.add(actSyncProbes, cv)
		resizing := a.resize(cv)
		if !startedOnceProbed(cv) {
			return false
		}
		if resizing {
			a.add(actGoOnIfStarted, cv)
		}
		return true
	case cv.lost:
		a.add(actRestartLost, cv)
		return false
	}
	a.add(actSyncProbes, cv)
	if !v.appsEnding {
		// Once the app containers are ending, a sidecar that exits is not
		// restarted, as the kubelet does not while it stops the pod's
		// last app container.
		a.restart(cv, now)
	}
	// Exited before the pod got further: what follows waits for it to run
	// again and start.
	return startedAfter(v, i)
}

// appContainer plans an app container: started, kept in step with its
// spec (image, resources) while it runs, restarted by the pod's restart
// policy once it exits.
func (a *podActions) appContainer(v *podView, cv *containerView, now time.Time) {
	st := cv.latest
	if st == nil {
		a.start(cv, cv.firstAttempt, false)
		return
	}
	a.add(actSyncProbes, cv)
	switch {
	case st.State == StateRunning && newImage(cv):
		a.add(actRestartForImage, cv)
	case st.State == StateRunning:
		a.resize(cv)
	case cv.lost:
		a.add(actRestartLost, cv)
	case cv.restarts(v.pod, false):
		a.restart(cv, now)
	}
}

// restart plans the restart of an exited container: at once when its
// spec names a new image (its back-off starts over, as the kubelet's),
// else once its crash-loop back-off is over, waiting in CrashLoopBackOff
// until then.
func (a *podActions) restart(cv *containerView, now time.Time) {
	st := cv.latest
	if newImage(cv) {
		a.start(cv, st.Attempt+1, true)
		return
	}
	d := backOff(st, cv.backOffFrom)
	wait := st.FinishedAt.Add(d).Sub(now)
	if wait <= 0 {
		a.start(cv, st.Attempt+1, false)
		return
	}
	a.containers = append(a.containers, containerAction{kind: actWaitBackOff, container: cv.spec, latest: *st, backOff: d, wait: wait})
	a.next = sooner(a.next, wait)
}

// resize plans the in-place resize of a running container whose spec asks
// for other resources than it has: by a restart when its resize policy
// asks for one for a resource that changed. It says whether it planned one.
func (a *podActions) resize(cv *containerView) bool {
	if cv.applied == nil || equality.Semantic.DeepEqual(*cv.applied, cv.spec.Resources) {
		return false
	}
	if resizeNeedsRestart(cv.spec, cv.applied) {
		a.add(actRestartToResize, cv)
	} else {
		a.add(actResize, cv)
	}
	return true
}

// add plans an action on the container's latest attempt.
func (a *podActions) add(kind containerActionKind, cv *containerView) {
	act := containerAction{kind: kind, container: cv.spec}
	if cv.latest != nil {
		act.latest = *cv.latest
	}
	a.containers = append(a.containers, act)
}

// start plans the start of the container's attempt; imageChanged: the
// first attempt of a new image.
func (a *podActions) start(cv *containerView, attempt int, imageChanged bool) {
	a.add(actStart, cv)
	last := &a.containers[len(a.containers)-1]
	last.attempt, last.newImage = attempt, imageChanged
}

// sooner is the sooner of two waits, 0 standing for none.
func sooner(a, b time.Duration) time.Duration {
	if b > 0 && (a <= 0 || b < a) {
		return b
	}
	return a
}

// restarts tells whether a container that exited with code runs again
// under the pod's restart policy. An init container that succeeded never
// runs again; a sidecar always does (until the app containers are done).
// restarts tells whether the container's latest attempt, exited, runs
// again: by restarts, and also, as the kubelet restarts it, after a kill
// for a failed probe whatever its exit code, unless the pod's policy is
// Never.
func (cv *containerView) restarts(pod *corev1.Pod, init bool) bool {
	if cv.probeKilled && pod.Spec.RestartPolicy != corev1.RestartPolicyNever {
		return true
	}
	return restarts(pod, cv.spec, init, cv.latest.ExitCode)
}

func restarts(pod *corev1.Pod, c *corev1.Container, init bool, code int) bool {
	if init && podrules.IsSidecar(c) {
		return true
	}
	if init && code == 0 {
		return false
	}
	switch pod.Spec.RestartPolicy {
	case corev1.RestartPolicyNever:
		return false
	case corev1.RestartPolicyOnFailure:
		return code != 0
	}
	return true
}

// backOff is the wait before the restart of a container that exited after
// the run st, its attempt-th restart: the kubelet's crash-loop back-off
// (podrules.RestartBackOff), counting the attempts since the from-th, when
// the container's spec last changed. The first exit since then, or after a
// long run, restarts at once; the next waits 10 s, doubling each time up to
// 5 min.
func backOff(st *ContainerStatus, from int) time.Duration {
	return podrules.RestartBackOff(st.Attempt-from, st.FinishedAt.Sub(st.StartedAt))
}

// newImage tells whether the container's spec names another image than the
// agent last started it with.
func newImage(cv *containerView) bool {
	return cv.image != "" && cv.image != cv.spec.Image
}

// startedOnceProbed tells whether a running container has started (passed
// its startup probe) once its probes run for its attempt: probes that do
// not yet are started afresh, and the container has started at once if it
// has no startup probe.
func startedOnceProbed(cv *containerView) bool {
	if cv.probing {
		return cv.started
	}
	return cv.spec.StartupProbe == nil
}

// startedAfter says whether a container after the i-th init container, init
// or regular, ever ran.
func startedAfter(v *podView, i int) bool {
	for _, cv := range v.init[i+1:] {
		if cv.latest != nil {
			return true
		}
	}
	for _, cv := range v.regular {
		if cv.latest != nil {
			return true
		}
	}
	return false
}

// appsDone tells whether every app container has exited and will not run
// again.
func appsDone(pod *corev1.Pod, regular []containerView) bool {
	for i := range regular {
		cv := &regular[i]
		st := cv.latest
		if st == nil || st.State == StateRunning || cv.lost || cv.restarts(pod, false) {
			return false
		}
	}
	return true
}

// appsEnding tells whether every app container has exited or is being
// killed, and will not run again: a container killed for a failed probe
// in a pod whose policy is Never ends with the kill. The pod is ending from
// then on: its sidecars are not restarted, nor killed for failed probes.
func appsEnding(pod *corev1.Pod, regular []containerView) bool {
	for i := range regular {
		cv := &regular[i]
		st := cv.latest
		switch {
		case st == nil || cv.lost:
			return false
		case st.State == StateRunning:
			if !cv.killing || pod.Spec.RestartPolicy != corev1.RestartPolicyNever {
				return false
			}
		case cv.restarts(pod, false):
			return false
		}
	}
	return true
}

// ended tells whether the pod ended: its phase, as its status reports it,
// is final (Succeeded or Failed), and none of its containers runs.
func ended(v *podView) bool {
	for _, list := range [][]containerView{v.init, v.regular, v.ephemeral} {
		for i := range list {
			if st := list[i].latest; st != nil && st.State == StateRunning {
				return false
			}
		}
	}
	return podrules.IsFinal(podStatus(v).Phase)
}

// replaceSandbox decides whether the pod's sandbox is replaced before any
// container starts: when it does not run (not ready, or a container start
// found it gone), unless the pod's containers are done for good, whose
// sandbox is not set up again, as the kubelet's is not.
func replaceSandbox(ready, refused, done bool) bool {
	return (!ready || refused) && !done
}

// resizeNeedsRestart says whether a resource that changed from applied
// has the RestartContainer resize policy.
func resizeNeedsRestart(c *corev1.Container, applied *corev1.ResourceRequirements) bool {
	for _, p := range c.ResizePolicy {
		if p.RestartPolicy != corev1.RestartContainer {
			continue
		}
		changed := func(list, old corev1.ResourceList) bool {
			q, ok := list[p.ResourceName]
			o, had := old[p.ResourceName]
			return ok != had || q.Cmp(o) != 0
		}
		if changed(c.Resources.Requests, applied.Requests) || changed(c.Resources.Limits, applied.Limits) {
			return true
		}
	}
	return false
}

// stopEverything stops a pod that ends within grace: its app containers,
// an init container that runs and its ephemeral containers first,
// together; then its sidecars one by one, the last started first. A
// regular container whose own restartPolicy is Always is no sidecar.
func stopEverything(pod *corev1.Pod, grace time.Duration, hooks bool) *stopActions {
	var first []*corev1.Container
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers, ephemeralContainers(pod)} {
		for i := range list {
			if c := &list[i]; !podrules.IsPodSidecar(pod, c) {
				first = append(first, c)
			}
		}
	}
	groups := append([][]*corev1.Container{first}, sidecarsLastFirst(pod)...)
	return &stopActions{groups: groups, grace: grace, hooks: hooks}
}

// sidecarsLastFirst are the pod's sidecars, one to a group, the last
// started first.
func sidecarsLastFirst(pod *corev1.Pod) [][]*corev1.Container {
	var groups [][]*corev1.Container
	for i := len(pod.Spec.InitContainers) - 1; i >= 0; i-- {
		if c := &pod.Spec.InitContainers[i]; podrules.IsSidecar(c) {
			groups = append(groups, []*corev1.Container{c})
		}
	}
	return groups
}
