package lifecycle

import (
	"context"
	"errors"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/lifecycle/csimount"
	"github.com/nodelet/nodelet/pkg/lifecycle/env"
	"github.com/nodelet/nodelet/pkg/lifecycle/hostvolume"
	"github.com/nodelet/nodelet/pkg/podrules"
)

var metav1Zero metav1.Time

const (
	// retryAfter is how soon a failed set-up (volumes, sandbox,
	// configuration) is tried again.
	retryAfter = 5 * time.Second
	// CSI volumes that cannot be set up are tried again after a back-off
	// from csiBackOff doubling to csiMaxWait while they wait for the API (or
	// at once when the API changes), or to csiMaxBackOff when they fail.
	csiBackOff    = time.Second
	csiMaxWait    = 10 * time.Second
	csiMaxBackOff = time.Minute
)

// workerDeps are the parts every pod worker of a node shares.
type workerDeps struct {
	ctx         context.Context // the workers' life
	clock       clock.WithTicker
	runtime     Runtime
	volumes     *hostvolume.Manager
	csi         *csimount.Manager // nil: no CSI volumes
	env         env.Getter
	recorder    record.EventRecorder
	states      stateStore
	nodeName    string
	address     string
	allocatable func() corev1.ResourceList
	probes      *ProbeMetrics // nil: not counted
}

// workerOwner is what a pod worker tells its manager: a new status to
// publish, and that the pod is gone.
type workerOwner interface {
	published(pod *corev1.Pod)
	forget(w *podWorker)
}

// podWorker supervises one pod: one goroutine that, whenever something
// happens (a container exits, a probe flips, the pod is deleted, a timer
// is due), compares what runs with what should and acts, then reports the
// status.
type podWorker struct {
	deps                 *workerDeps
	owner                workerOwner
	uid                  types.UID
	namespace, name      string
	kickCh               chan struct{}
	done                 chan struct{}
	terminateImmediately chan struct{}

	mu          sync.Mutex
	pod         *corev1.Pod
	status      corev1.PodStatus
	startTime   time.Time
	sandbox     Sandbox
	volumePaths map[string]string
	containers  map[string]*containerState
	failReason  string
	failMessage string
	// failConditions are added to the status of a failed pod.
	failConditions []corev1.PodCondition
	// evictReq asks the worker to stop and fail the pod.
	evictReq *Eviction
	deleting bool
	grace    time.Duration
	gone     bool
	// dead is the pod's sandbox that died, until one is set up in its
	// place (which then carries its records: replacement).
	dead Sandbox
	// refused is the pod's sandbox when a container start found it gone
	// (ErrSandboxGone) or dead: the next step replaces it, and no
	// container starts in it meanwhile.
	refused Sandbox
	// final is the terminated pod's status, computed last before its
	// sandbox was removed: reported as it is once the sandbox is gone.
	final *corev1.PodStatus
	// volumesTornDown: the pod ended and its volumes were torn down; they
	// are never set up again, also by a restarted agent.
	volumesTornDown bool

	// setUpFailures counts the set-ups of CSI volumes that failed in a
	// row; setUpRetryAt is when the next is due.
	setUpFailures int
	setUpRetryAt  time.Time
	// waitingForVolumes: the pod's CSI volumes wait for the API (a claim
	// to be bound, a volume to be attached), so an API change retries them.
	waitingForVolumes bool
	// abortWait ends the wait untilEnding gave out, if one is under way,
	// when the pod is deleted or evicted.
	abortWait context.CancelCauseFunc
	// unmountWarned: a FailedUnmount Event was recorded.
	unmountWarned bool
}

// containerState is what the worker knows of a container beyond the
// runtime's records.
type containerState struct {
	waitingReason, waitingMessage string
	// warned is the waiting reason an Event was already recorded for.
	warned string
	// probes run for one attempt of the container.
	probeAttempt   int
	probeCancel    context.CancelFunc
	started, ready bool
	hasStartup     bool
	// image is the image the agent last started the container with ("" for
	// an attempt it did not start); a new image in the spec restarts the
	// container at once, and its back-off counts from backOffFrom, the
	// first attempt of that image.
	image       string
	backOffFrom int
	// firstAttempt is the attempt the container's first start in this pod
	// worker runs: 0, or where a static pod created again with the UID of
	// one that terminated goes on from.
	firstAttempt int
	// killedAttempt is 1 + the attempt killed for a failed liveness or
	// startup probe (0: none): it restarts unless the pod's policy is
	// Never, whatever its exit code, as the kubelet restarts it.
	killedAttempt int
	// lostAttempt is 1 + the attempt the runtime lost track of (0: none),
	// kept once the runtime reports it otherwise (a stop makes it exited).
	lostAttempt int
	// applied are the resources the running attempt has: the spec's when
	// it started, then each in-place resize's. Nil when not known (an
	// attempt the agent did not start): its spec's are assumed.
	applied *corev1.ResourceRequirements
}

func newPodWorker(deps *workerDeps, owner workerOwner, pod *corev1.Pod, startTime time.Time) *podWorker {
	w := &podWorker{
		deps: deps, owner: owner, uid: pod.UID, namespace: pod.Namespace, name: pod.Name,
		kickCh: make(chan struct{}, 1), done: make(chan struct{}), terminateImmediately: make(chan struct{}),
		pod: pod.DeepCopy(), startTime: startTime, containers: map[string]*containerState{},
	}
	w.status = corev1.PodStatus{Phase: corev1.PodPending}
	return w
}

func (w *podWorker) start() { go w.run(w.deps.ctx) }

// seedStatus computes an adopted pod's status from the runtime's records
// before anything reads it: a restarted agent reports the containers that
// run, never the placeholder of a new pod (a Running pod going back to
// Pending in the API until the worker's first step). A running container
// is started and ready as its probes begin: at once without probes. A
// deleted pod whose sandbox is already gone reports its final status.
func (w *podWorker) seedStatus() {
	w.mu.Lock()
	if w.finalKeptLocked() {
		w.status = *w.final.DeepCopy()
		w.mu.Unlock()
		return
	}
	if w.sandbox != nil {
		cs := append(append([]corev1.Container(nil), w.pod.Spec.InitContainers...), w.pod.Spec.Containers...)
		for i := range cs {
			c := &cs[i]
			if st, ok := w.sandbox.Container(c.Name); ok && st.State == StateRunning {
				state := w.containerLocked(c.Name)
				state.started = c.StartupProbe == nil
				state.ready = c.ReadinessProbe == nil && state.started
			}
		}
	}
	v := w.viewLocked()
	w.mu.Unlock()
	s := podStatus(v)
	w.mu.Lock()
	w.status = s
	w.mu.Unlock()
}

// finalKeptLocked tells whether the final status kept is the pod's status:
// its sandbox is removed, or the pod is deleted and its containers have
// stopped (the final status is kept after they stop). The runtime's
// records are not read again then: a removal cut short (the agent killed,
// the runtime failing half-way) can leave the sandbox without them.
func (w *podWorker) finalKeptLocked() bool {
	return w.final != nil && (w.sandbox == nil || w.deleting)
}

func (w *podWorker) kick() {
	select {
	case w.kickCh <- struct{}{}:
	default:
	}
}

func (w *podWorker) state() *podState {
	w.mu.Lock()
	defer w.mu.Unlock()
	return &podState{Pod: w.pod, StartTime: w.startTime, FailReason: w.failReason, FailMessage: w.failMessage,
		Deleting: w.deleting, Grace: w.grace, Final: w.final, VolumesTornDown: w.volumesTornDown}
}

func (w *podWorker) spec() *corev1.Pod {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pod
}

func (w *podWorker) finished() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.status.Phase == corev1.PodSucceeded || w.status.Phase == corev1.PodFailed
}

func (w *podWorker) snapshot() *corev1.Pod {
	w.mu.Lock()
	defer w.mu.Unlock()
	pod := w.pod.DeepCopy()
	pod.Status = *w.status.DeepCopy()
	return pod
}

func (w *podWorker) update(pod *corev1.Pod) {
	w.mu.Lock()
	w.pod = pod.DeepCopy()
	// Set up again (unless the pod ended: its volumes are gone for good):
	// downward API files follow labels and annotations.
	w.volumePaths = nil
	w.mu.Unlock()
	if err := w.deps.states.save(w.state()); err != nil {
		klog.FromContext(w.deps.ctx).Error(err, "Saving pod state failed", "pod", klog.KObj(pod))
	}
	w.kick()
}

func (w *podWorker) delete(grace time.Duration) {
	w.mu.Lock()
	first := !w.deleting
	if first || grace < w.grace {
		w.grace = grace
	}
	w.deleting = true
	immediate := w.grace == 0
	w.abortWaitLocked()
	w.mu.Unlock()
	if first {
		// Saved before anything stops: an agent killed from here on must
		// not set the pod up again when it restarts.
		if err := w.deps.states.save(w.state()); err != nil {
			klog.FromContext(w.deps.ctx).Error(err, "Saving pod state failed", "pod", klog.KRef(w.namespace, w.name))
		}
	}
	if immediate {
		select {
		case <-w.terminateImmediately:
		default:
			close(w.terminateImmediately)
		}
	}
	w.kick()
}

// errPodEnding is why untilEnding's context ends early: the pod is
// deleted or evicted.
var errPodEnding = errors.New("the pod is being deleted or evicted")

// untilEnding is ctx for a wait of the worker's that the pod's end makes
// pointless, a set-up of CSI volumes or a postStart hook: it ends, with
// errPodEnding as its cause, as soon as the pod is deleted or evicted (at
// once if it already is), so that the worker goes on to stop the pod
// within its grace period instead of waiting. release ends it once the
// wait is over. The worker waits for one thing at a time, so one wait is
// under way at most.
func (w *podWorker) untilEnding(ctx context.Context) (_ context.Context, release func()) {
	wctx, cancel := context.WithCancelCause(ctx)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.endingLocked() {
		cancel(errPodEnding)
		return wctx, func() {}
	}
	w.abortWait = cancel
	return wctx, func() {
		w.mu.Lock()
		w.abortWait = nil
		w.mu.Unlock()
		cancel(nil)
	}
}

// abortWaitLocked ends the wait under way, if any: the pod is ending.
func (w *podWorker) abortWaitLocked() {
	if w.abortWait != nil {
		w.abortWait(errPodEnding)
	}
}

// endingLocked tells whether the pod was deleted, or evicted and its
// worker not yet stopping it: what the worker is doing is cut short, and
// the next step stops the pod.
func (w *podWorker) endingLocked() bool {
	return w.deleting || w.evictReq != nil
}

// ending is endingLocked for a caller that does not hold w.mu.
func (w *podWorker) ending() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.endingLocked()
}

func (w *podWorker) logger(ctx context.Context) klog.Logger {
	return klog.FromContext(ctx).WithValues("pod", klog.KRef(w.namespace, w.name))
}

// event records an Event on the pod.
func (w *podWorker) event(typ, reason, format string, args ...any) {
	w.deps.recorder.Eventf(w.spec(), typ, reason, format, args...)
}

func (w *podWorker) run(ctx context.Context) {
	defer close(w.done)
	timer := w.deps.clock.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		next := w.sync(ctx)
		w.mu.Lock()
		gone := w.gone
		w.mu.Unlock()
		if gone {
			return
		}
		if !timer.Stop() {
			select {
			case <-timer.C():
			default:
			}
		}
		if next > 0 {
			timer.Reset(next)
		} else {
			timer.Reset(time.Hour)
		}
		select {
		case <-ctx.Done():
			w.stopProbes()
			return
		case <-w.kickCh:
		case <-timer.C():
		}
	}
}

// sync brings the pod one step closer to what it should be, reports its
// status, and says when it wants to look again (0: when something
// happens). What to do is decided from a snapshot of the pod
// (computePodActions); step and terminate carry it out.
func (w *podWorker) sync(ctx context.Context) time.Duration {
	w.mu.Lock()
	v := w.viewOfLocked(w.pod, false)
	v.evict, w.evictReq = w.evictReq, nil
	w.mu.Unlock()
	plan := computePodActions(v, w.deps.clock.Now())
	if plan.terminate {
		w.report() // not ready while it terminates
		if err := w.terminate(ctx, plan.stop); err != nil {
			w.logger(ctx).Error(err, "Terminating pod failed; retrying")
			return retryAfter
		}
		return 0
	}
	next := w.step(ctx, plan)
	w.report()
	return next
}

// report computes the status and publishes it if it changed.
func (w *podWorker) report() {
	w.mu.Lock()
	if w.finalKeptLocked() {
		w.mu.Unlock()
		return // the records it came from are gone, or going
	}
	v := w.viewLocked()
	w.mu.Unlock()
	s := podStatus(v)
	w.mu.Lock()
	changed := statusChanged(&w.status, &s)
	if changed {
		w.status = s
	}
	w.mu.Unlock()
	if changed {
		w.owner.published(w.snapshot())
	}
}

// viewLocked is the view the pod's status is computed from.
func (w *podWorker) viewLocked() *podView { return w.viewOfLocked(w.pod, true) }

// viewOfLocked is the view of the pod with the spec pod: what its status
// is computed from, and a step decided from. Only the status reads each
// container's previous attempt (its last termination state); a decision
// does not, so previous leaves that read out of every step.
func (w *podWorker) viewOfLocked(pod *corev1.Pod, previous bool) *podView {
	v := &podView{
		pod: pod, hostIP: w.deps.address, startTime: w.startTime,
		failReason: w.failReason, failMessage: w.failMessage, conditions: w.failConditions,
		terminated: w.gone, deleting: w.deleting, grace: w.grace,
		sandboxSetUp: w.sandbox != nil, sandboxRefused: w.sandbox != nil && w.sandbox == w.refused,
		volumesReady: w.volumePaths != nil, setUpRetryAt: w.setUpRetryAt,
		volumesTornDown: w.volumesTornDown,
	}
	if w.sandbox != nil {
		v.sandbox = w.sandbox.Ready()
		v.podIPs = w.sandbox.IPs()
	}
	if len(v.podIPs) == 0 && !v.sandbox && w.final != nil {
		// A sandbox stopped once the pod ended (and read again by a
		// restarted agent) has no IPs: the pod keeps those it had, as
		// the kubelet keeps an exited pod's.
		for _, ip := range w.final.PodIPs {
			v.podIPs = append(v.podIPs, ip.IP)
		}
	}
	v.hostNetwork = pod.Spec.HostNetwork || (w.sandbox != nil && len(v.podIPs) == 0)
	// Until a sandbox that died is replaced, its records are the pod's.
	records := w.sandbox
	if records == nil && w.dead != nil {
		records = w.dead
	}
	for i := range pod.Spec.Containers {
		v.regular = append(v.regular, w.containerViewLocked(pod, &pod.Spec.Containers[i], false, records, false, previous))
	}
	v.appsDone = records != nil && appsDone(pod, v.regular)
	v.appsEnding = records != nil && appsEnding(pod, v.regular)
	for i := range pod.Spec.InitContainers {
		v.init = append(v.init, w.containerViewLocked(pod, &pod.Spec.InitContainers[i], true, records, v.appsEnding, previous))
	}
	for _, c := range ephemeralContainers(pod) {
		cv := w.containerViewLocked(pod, &c, false, records, false, previous)
		cv.final = cv.latest != nil && cv.latest.State == StateExited
		v.ephemeral = append(v.ephemeral, cv)
	}
	if previous { // the status's view: with the containers' mounts
		handler, supported := recursiveReadOnlyHandler(w.deps.runtime, pod)
		for _, l := range [][]containerView{v.init, v.regular, v.ephemeral} {
			for i := range l {
				l[i].mounts = volumeMountStatuses(l[i].spec, handler, supported)
			}
		}
	}
	return v
}

// containerViewLocked is the view of one container of pod from the
// runtime's records (none: never started) and what the worker knows of it.
// appsEnding: the pod's app containers are ending, so that its sidecars
// that exited do so for good.
func (w *podWorker) containerViewLocked(pod *corev1.Pod, c *corev1.Container, init bool, records Sandbox, appsEnding, previous bool) containerView {
	cv := containerView{spec: c, sidecar: init && podrules.IsSidecar(c)}
	cs := w.containerLocked(c.Name)
	cv.waitingReason, cv.waitingMessage = cs.waitingReason, cs.waitingMessage
	// A terminating pod's containers are not ready, as the kubelet
	// reports them, whatever their readiness probes said last.
	cv.started, cv.ready, cv.applied = cs.started, cs.ready && !w.deleting, cs.applied
	cv.image, cv.backOffFrom, cv.firstAttempt = cs.image, cs.backOffFrom, cs.firstAttempt
	if records == nil {
		return cv
	}
	if st, ok := records.Container(c.Name); ok {
		cv.latest = &st
		cv.probing = cs.probeCancel != nil && cs.probeAttempt == st.Attempt
		cv.killing = st.State == StateRunning && cs.killedAttempt == st.Attempt+1
		if st.State == StateExited {
			cv.lost = w.lostLocked(c.Name, st)
			cv.probeKilled = cs.killedAttempt == st.Attempt+1
			cv.final = cv.exitedForGood(pod, init, w.gone || w.failReason != "", appsEnding)
		}
	}
	if !previous {
		return cv
	}
	if prev, ok := records.Previous(c.Name); ok {
		cv.previous = &prev
	}
	return cv
}

func (w *podWorker) containerLocked(name string) *containerState {
	cs, ok := w.containers[name]
	if !ok {
		cs = &containerState{}
		w.containers[name] = cs
	}
	return cs
}

// lostLocked tells whether st is an attempt the runtime lost track of, now
// or when the worker last looked.
func (w *podWorker) lostLocked(name string, st ContainerStatus) bool {
	cs := w.containerLocked(name)
	if st.Unknown {
		cs.lostAttempt = st.Attempt + 1
	}
	return cs.lostAttempt == st.Attempt+1
}
