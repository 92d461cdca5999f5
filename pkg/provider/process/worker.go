package process

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/lifecycle/csimount"
	"github.com/nodelet/nodelet/pkg/lifecycle/env"
	"github.com/nodelet/nodelet/pkg/lifecycle/hostvolume"
	"github.com/nodelet/nodelet/pkg/lifecycle/probe"
	"github.com/nodelet/nodelet/pkg/provider/process/sandbox"
)

var metav1Zero metav1.Time

// Crash-loop back-off, as the kubelet's: 10 s doubling to 5 min, back to
// 10 s after a run of 10 min.
const (
	initialBackOff = 10 * time.Second
	maxBackOff     = 5 * time.Minute
	backOffReset   = 10 * time.Minute
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

// backOff is the wait before the restart of a container that exited after
// the run st, its attempt-th restart.
func backOff(st *sandbox.ContainerStatus) time.Duration {
	if st.FinishedAt.Sub(st.StartedAt) >= backOffReset {
		return initialBackOff
	}
	d := initialBackOff
	for i := 0; i < st.Attempt && d < maxBackOff; i++ {
		d *= 2
	}
	return min(d, maxBackOff)
}

// podWorker supervises one pod: one goroutine that, whenever something
// happens (a container exits, a probe flips, the pod is deleted, a timer
// is due), compares what runs with what should and acts, then reports the
// status.
type podWorker struct {
	p                    *Provider
	uid                  types.UID
	namespace, name      string
	kickCh               chan struct{}
	done                 chan struct{}
	terminateImmediately chan struct{}

	mu          sync.Mutex
	pod         *corev1.Pod
	status      corev1.PodStatus
	startTime   time.Time
	sandbox     *sandbox.Sandbox
	volumePaths map[string]string
	containers  map[string]*containerState
	failReason  string
	failMessage string
	deleting    bool
	grace       time.Duration
	gone        bool

	// setUpFailures counts the set-ups of CSI volumes that failed in a
	// row; setUpRetryAt is when the next is due.
	setUpFailures int
	setUpRetryAt  time.Time
	// waitingForVolumes: the pod's CSI volumes wait for the API (a claim
	// to be bound, a volume to be attached), so an API change retries them.
	waitingForVolumes bool
	// abortSetUp cancels a set-up of CSI volumes in progress when the pod
	// is deleted.
	abortSetUp context.CancelFunc
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
}

func newPodWorker(p *Provider, pod *corev1.Pod, startTime time.Time) *podWorker {
	w := &podWorker{
		p: p, uid: pod.UID, namespace: pod.Namespace, name: pod.Name,
		kickCh: make(chan struct{}, 1), done: make(chan struct{}), terminateImmediately: make(chan struct{}),
		pod: pod.DeepCopy(), startTime: startTime, containers: map[string]*containerState{},
	}
	w.status = corev1.PodStatus{Phase: corev1.PodPending}
	return w
}

func (w *podWorker) start() { go w.run(w.p.ctx) }

func (w *podWorker) kick() {
	select {
	case w.kickCh <- struct{}{}:
	default:
	}
}

func (w *podWorker) state() *podState {
	w.mu.Lock()
	defer w.mu.Unlock()
	return &podState{Pod: w.pod, StartTime: w.startTime, FailReason: w.failReason, FailMessage: w.failMessage}
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
	w.volumePaths = nil // set up again: downward API files follow labels and annotations
	w.mu.Unlock()
	if err := w.p.saveState(w.state()); err != nil {
		klog.FromContext(w.p.ctx).Error(err, "Saving pod state failed", "pod", klog.KObj(pod))
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
	if w.abortSetUp != nil {
		w.abortSetUp()
	}
	w.mu.Unlock()
	if immediate {
		select {
		case <-w.terminateImmediately:
		default:
			close(w.terminateImmediately)
		}
	}
	w.kick()
}

func (w *podWorker) logger(ctx context.Context) klog.Logger {
	return klog.FromContext(ctx).WithValues("pod", klog.KRef(w.namespace, w.name))
}

// event records an Event on the pod.
func (w *podWorker) event(typ, reason, format string, args ...any) {
	w.p.parts.Recorder.Eventf(w.spec(), typ, reason, format, args...)
}

func (w *podWorker) run(ctx context.Context) {
	defer close(w.done)
	timer := w.p.clock.NewTimer(time.Hour)
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
// happens).
func (w *podWorker) sync(ctx context.Context) time.Duration {
	w.mu.Lock()
	deleting := w.deleting
	w.mu.Unlock()
	if deleting {
		if err := w.terminate(ctx); err != nil {
			w.logger(ctx).Error(err, "Terminating pod failed; retrying")
			return retryAfter
		}
		return 0
	}
	next := w.step(ctx)
	w.report()
	return next
}

// report computes the status and publishes it if it changed.
func (w *podWorker) report() {
	w.mu.Lock()
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
		w.p.publish(w.snapshot())
	}
}

func (w *podWorker) viewLocked() *podView {
	v := &podView{
		pod: w.pod, hostIP: w.p.opts.Address, startTime: w.startTime,
		sandbox:    w.sandbox != nil && w.sandbox.Alive(),
		failReason: w.failReason, failMessage: w.failMessage,
		terminated: w.gone,
	}
	view := func(c *corev1.Container, init bool) containerView {
		cv := containerView{spec: c}
		cs := w.containerLocked(c.Name)
		cv.waitingReason, cv.waitingMessage = cs.waitingReason, cs.waitingMessage
		cv.started, cv.ready = cs.started, cs.ready
		if w.sandbox != nil {
			if st, ok := w.sandbox.Container(c.Name); ok {
				cv.latest = &st
				if st.State == sandbox.StateExited {
					cv.final = w.gone || w.failReason != "" || !restarts(w.pod, c, init, st.ExitCode)
				}
			}
			if prev, ok := w.sandbox.Previous(c.Name); ok {
				cv.previous = &prev
			}
		}
		return cv
	}
	for i := range w.pod.Spec.InitContainers {
		v.init = append(v.init, view(&w.pod.Spec.InitContainers[i], true))
	}
	for i := range w.pod.Spec.Containers {
		v.regular = append(v.regular, view(&w.pod.Spec.Containers[i], false))
	}
	return v
}

func (w *podWorker) containerLocked(name string) *containerState {
	cs, ok := w.containers[name]
	if !ok {
		cs = &containerState{}
		w.containers[name] = cs
	}
	return cs
}

// restarts tells whether a container that exited with code runs again
// under the pod's restart policy. An init container that succeeded never
// runs again.
func restarts(pod *corev1.Pod, c *corev1.Container, init bool, code int) bool {
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

// step acts on the pod: set-up, active deadline, init containers in order,
// then the containers.
func (w *podWorker) step(ctx context.Context) time.Duration {
	w.mu.Lock()
	pod, failed := w.pod, w.failReason != ""
	w.mu.Unlock()
	if failed {
		w.stopProbes()
		return 0
	}
	if ready, retry := w.setUp(ctx, pod); !ready {
		return retry
	}
	now := w.p.clock.Now()
	var next time.Duration
	if d := pod.Spec.ActiveDeadlineSeconds; d != nil {
		deadline := w.startTime.Add(time.Duration(*d) * time.Second)
		if !now.Before(deadline) {
			w.exceedDeadline(ctx, *d)
			return 0
		}
		next = deadline.Sub(now)
	}
	soonest := func(d time.Duration) {
		if d > 0 && (next == 0 || d < next) {
			next = d
		}
	}

	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		st, ok := w.sandbox.Container(c.Name)
		switch {
		case !ok:
			soonest(w.startContainer(ctx, pod, c, 0))
			return next
		case st.State == sandbox.StateRunning:
			w.syncProbes(ctx, pod, c, st)
			return next
		case st.ExitCode == 0:
			w.syncProbes(ctx, pod, c, st)
			continue
		case !restarts(pod, c, true, st.ExitCode):
			return next // the pod has failed
		default:
			soonest(w.restartAfterBackOff(ctx, pod, c, st))
			return next
		}
	}
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		st, ok := w.sandbox.Container(c.Name)
		if !ok {
			soonest(w.startContainer(ctx, pod, c, 0))
			continue
		}
		w.syncProbes(ctx, pod, c, st)
		if st.State != sandbox.StateRunning && restarts(pod, c, false, st.ExitCode) {
			soonest(w.restartAfterBackOff(ctx, pod, c, st))
		}
	}
	return next
}

// setUp prepares the pod's volumes and sandbox once. It reports whether
// they are ready, and if not when to try again.
func (w *podWorker) setUp(ctx context.Context, pod *corev1.Pod) (bool, time.Duration) {
	w.mu.Lock()
	paths, sb, retryAt := w.volumePaths, w.sandbox, w.setUpRetryAt
	w.mu.Unlock()
	if paths != nil && sb != nil {
		return true, 0
	}
	if wait := retryAt.Sub(w.p.clock.Now()); wait > 0 {
		return false, wait
	}
	if paths == nil {
		var err error
		if paths, err = w.setUpVolumes(ctx, pod); err != nil {
			return false, w.setUpFailed(ctx, err)
		}
	}
	if sb == nil {
		var err error
		sb, err = w.p.parts.Runtime.EnsureSandbox(ctx, sandbox.SandboxSpec{
			UID: pod.UID, Namespace: pod.Namespace, Name: pod.Name, Hostname: pod.Name, Resources: podResources(pod),
		})
		if err != nil {
			w.warnAll("FailedCreatePodSandBox", fmt.Sprintf("Failed to create pod sandbox: %v", err))
			return false, w.setUpFailed(ctx, err)
		}
	}
	w.mu.Lock()
	w.volumePaths, w.sandbox = paths, sb
	w.setUpFailures, w.setUpRetryAt, w.waitingForVolumes = 0, time.Time{}, false
	for _, cs := range w.containers {
		if cs.waitingReason == "ContainerCreating" {
			cs.waitingReason, cs.waitingMessage = "", ""
		}
	}
	w.mu.Unlock()
	return true, 0
}

// setUpVolumes prepares the pod's volumes: its CSI volumes through the CSI
// mounter (when there is one), the others through the volume manager.
func (w *podWorker) setUpVolumes(ctx context.Context, pod *corev1.Pod) (map[string]string, error) {
	mounter := w.p.parts.CSI
	local := pod
	if mounter != nil {
		local = withoutCSIVolumes(pod)
	}
	paths, err := w.p.parts.Volumes.SetUp(ctx, local)
	if err != nil {
		w.warnAll("FailedMount", fmt.Sprintf("MountVolume.SetUp failed: %v", err))
		return nil, err
	}
	if mounter == nil || len(local.Spec.Volumes) == len(pod.Spec.Volumes) {
		return paths, nil
	}
	// A deletion cancels the set-up: staging and publishing can take long.
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w.mu.Lock()
	if w.deleting {
		w.mu.Unlock()
		return nil, errors.New("pod is being deleted")
	}
	w.abortSetUp = cancel
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.abortSetUp = nil
		w.mu.Unlock()
	}()
	csiPaths, err := mounter.SetUp(sctx, pod)
	if err != nil {
		var se *csimount.SetUpError
		if sctx.Err() == nil && errors.As(err, &se) {
			w.warnAll(se.Reason(), se.Error())
		}
		return nil, err
	}
	maps.Copy(paths, csiPaths)
	return paths, nil
}

// withoutCSIVolumes is a copy of pod without the volumes the CSI mounter
// sets up.
func withoutCSIVolumes(pod *corev1.Pod) *corev1.Pod {
	c := pod.DeepCopy()
	c.Spec.Volumes = c.Spec.Volumes[:0]
	for _, v := range pod.Spec.Volumes {
		if !csimount.Handles(&v) {
			c.Spec.Volumes = append(c.Spec.Volumes, *v.DeepCopy())
		}
	}
	return c
}

// setUpFailed logs a failed set-up and says when to try again: CSI volumes
// after their back-off (or at once when the API changes, for those that
// wait for it), anything else after retryAfter.
func (w *podWorker) setUpFailed(ctx context.Context, err error) time.Duration {
	logger := w.logger(ctx)
	var se *csimount.SetUpError
	if !errors.As(err, &se) {
		logger.Error(err, "Setting up pod failed")
		return retryAfter
	}
	w.mu.Lock()
	deleting := w.deleting
	if se.Waiting() != w.waitingForVolumes {
		w.setUpFailures = 0 // waiting and failing back off apart
	}
	w.setUpFailures++
	limit := csiMaxBackOff
	if se.Waiting() {
		limit = csiMaxWait
	}
	wait := csiBackOff
	for i := 1; i < w.setUpFailures && wait < limit; i++ {
		wait *= 2
	}
	wait = min(wait, limit)
	w.setUpRetryAt = w.p.clock.Now().Add(wait)
	w.waitingForVolumes = se.Waiting()
	w.mu.Unlock()
	switch {
	case deleting:
		return 0 // the next sync terminates the pod
	case se.Reason() == "":
		logger.V(2).Info("Waiting for CSI volumes", "reason", se.Error(), "retryIn", wait)
	default:
		logger.Error(err, "Setting up CSI volumes failed", "retryIn", wait)
	}
	return wait
}

// volumesChanged retries a set-up that waits for the API at once.
func (w *podWorker) volumesChanged() {
	w.mu.Lock()
	waiting := w.waitingForVolumes
	if waiting {
		w.setUpRetryAt = time.Time{}
	}
	w.mu.Unlock()
	if waiting {
		w.kick()
	}
}

// warnAll makes every container wait in ContainerCreating with msg and
// records a Warning Event with reason, once per reason; an empty reason
// records none.
func (w *podWorker) warnAll(reason, msg string) {
	w.mu.Lock()
	first := reason != ""
	for _, c := range append(append([]corev1.Container{}, w.pod.Spec.InitContainers...), w.pod.Spec.Containers...) {
		cs := w.containerLocked(c.Name)
		if reason != "" {
			if cs.warned == reason {
				first = false
			}
			cs.warned = reason
		}
		cs.waitingReason, cs.waitingMessage = "ContainerCreating", msg
	}
	w.mu.Unlock()
	if first {
		w.event(corev1.EventTypeWarning, reason, "%s", msg)
	}
}

// wait makes a container wait with a reason; the first time for a reason a
// Warning Event says why.
func (w *podWorker) wait(c *corev1.Container, reason, msg string, warn bool) {
	w.mu.Lock()
	cs := w.containerLocked(c.Name)
	cs.waitingReason, cs.waitingMessage = reason, msg
	first := cs.warned != reason
	cs.warned = reason
	w.mu.Unlock()
	if warn && first {
		w.event(corev1.EventTypeWarning, "Failed", "Error: %s", msg)
	}
}

// exceedDeadline stops the pod's containers and fails it: it was active
// longer than activeDeadlineSeconds.
func (w *podWorker) exceedDeadline(ctx context.Context, seconds int64) {
	msg := fmt.Sprintf("Pod was active on the node longer than the specified deadline (%ds)", seconds)
	w.event(corev1.EventTypeNormal, "DeadlineExceeded", "%s", msg)
	w.stopProbes()
	w.stopAll(ctx, gracePeriod(w.spec()), false)
	w.mu.Lock()
	w.failReason, w.failMessage = "DeadlineExceeded", msg
	w.mu.Unlock()
	if err := w.p.saveState(w.state()); err != nil {
		w.logger(ctx).Error(err, "Saving pod state failed")
	}
}

// restartAfterBackOff restarts an exited container once its back-off has
// passed; until then it waits in CrashLoopBackOff.
func (w *podWorker) restartAfterBackOff(ctx context.Context, pod *corev1.Pod, c *corev1.Container, st sandbox.ContainerStatus) time.Duration {
	d := backOff(&st)
	at := st.FinishedAt.Add(d)
	if wait := at.Sub(w.p.clock.Now()); wait > 0 {
		w.mu.Lock()
		cs := w.containerLocked(c.Name)
		first := cs.waitingReason != "CrashLoopBackOff"
		cs.waitingReason = "CrashLoopBackOff"
		cs.waitingMessage = fmt.Sprintf("back-off %s restarting failed container=%s pod=%s_%s(%s)", d, c.Name, pod.Name, pod.Namespace, pod.UID)
		w.mu.Unlock()
		if first {
			w.event(corev1.EventTypeWarning, "BackOff", "Back-off restarting failed container %s in pod %s_%s(%s)", c.Name, pod.Name, pod.Namespace, pod.UID)
		}
		return wait
	}
	return w.startContainer(ctx, pod, c, st.Attempt+1)
}

// startContainer starts one attempt of a container. It returns when to
// try again if the container cannot start yet.
func (w *podWorker) startContainer(ctx context.Context, pod *corev1.Pod, c *corev1.Container, attempt int) time.Duration {
	logger := w.logger(ctx).WithValues("container", c.Name)
	if len(c.Command) == 0 {
		w.wait(c, "CreateContainerError", fmt.Sprintf("container %q has no command: the process provider runs the container's command and args from the host filesystem and does not pull image %q", c.Name, c.Image), true)
		return 0 // the command cannot change: nothing to retry
	}
	node := env.NodeInfo{NodeName: w.p.opts.NodeName, HostIP: w.p.opts.Address, Allocatable: w.p.allocatable()}
	vars, err := env.Environment(ctx, w.p.parts.Env, pod, c, node)
	if err != nil {
		w.wait(c, "CreateContainerConfigError", err.Error(), true)
		return retryAfter
	}
	byName := map[string]string{}
	for _, kv := range vars {
		k, v, _ := strings.Cut(kv, "=")
		byName[k] = v
	}
	w.mu.Lock()
	paths := w.volumePaths
	sb := w.sandbox
	w.mu.Unlock()
	mounts, err := hostvolume.ContainerMounts(pod, c, paths, byName)
	if err != nil {
		w.wait(c, "CreateContainerConfigError", err.Error(), true)
		return retryAfter
	}
	spec := sandbox.ContainerSpec{
		Name:       c.Name,
		Attempt:    attempt,
		Args:       expandArgs(append(append([]string{}, c.Command...), c.Args...), byName),
		Env:        vars,
		WorkingDir: c.WorkingDir,
		Resources:  resources(c),
		Stdin:      c.Stdin, StdinOnce: c.StdinOnce, TTY: c.TTY,
	}
	for _, m := range mounts {
		spec.Mounts = append(spec.Mounts, sandbox.Mount{Source: m.Source, Destination: m.Destination, ReadOnly: m.ReadOnly})
	}
	w.mu.Lock()
	cs := w.containerLocked(c.Name)
	cs.waitingReason, cs.waitingMessage, cs.warned = "", "", ""
	cs.started, cs.ready = false, false
	w.mu.Unlock()
	if err := sb.StartContainer(ctx, spec); err != nil {
		if ctx.Err() != nil {
			return 0 // the agent is stopping: the next one sees what the sandbox did
		}
		logger.Error(err, "Starting container failed")
		w.event(corev1.EventTypeWarning, "Failed", "Error: %v", err)
		return 0 // recorded as exited: the restart policy decides
	}
	logger.V(2).Info("Started container", "attempt", attempt)
	w.kick() // look again at once: its probes start, the next container may follow
	w.event(corev1.EventTypeNormal, "Started", "Started container %s", c.Name)
	if h := lifecycleHandler(c, true); h != nil {
		go w.postStart(ctx, c, attempt, h)
	}
	return 0
}

// expandArgs expands $(VAR) in a container's command and args with its
// environment, as the kubelet does.
func expandArgs(args []string, vars map[string]string) []string {
	for i := range args {
		args[i] = env.Expand(args[i], env.MapLookup(vars))
	}
	return args
}

func lifecycleHandler(c *corev1.Container, postStart bool) *corev1.LifecycleHandler {
	if c.Lifecycle == nil {
		return nil
	}
	if postStart {
		return c.Lifecycle.PostStart
	}
	return c.Lifecycle.PreStop
}

// postStart runs the postStart hook; a failing hook kills the container,
// which then restarts by its policy.
func (w *podWorker) postStart(ctx context.Context, c *corev1.Container, attempt int, h *corev1.LifecycleHandler) {
	hctx, cancel := context.WithTimeout(ctx, gracePeriod(w.spec()))
	defer cancel()
	if err := probe.RunHandler(hctx, h, w.target(c)); err != nil {
		w.event(corev1.EventTypeWarning, "FailedPostStartHook", "PostStartHook failed: %v", err)
		sb := w.currentSandbox()
		if sb == nil {
			return
		}
		if st, ok := sb.Container(c.Name); ok && st.Attempt == attempt && st.State == sandbox.StateRunning {
			w.event(corev1.EventTypeNormal, "Killing", "FailedPostStartHook")
			_ = sb.StopContainer(ctx, c.Name, gracePeriod(w.spec()))
		}
	}
}

// currentSandbox is the pod's sandbox, for goroutines other than the
// worker's own (the worker sets it once the sandbox runs).
func (w *podWorker) currentSandbox() *sandbox.Sandbox {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.sandbox
}

// target is what probes and hooks of a container run against.
func (w *podWorker) target(c *corev1.Container) probe.Target {
	return probe.Target{Container: c, HostIP: w.p.opts.Address, Exec: execer{w}}
}

// execer runs probe and hook commands in the pod's containers.
type execer struct{ w *podWorker }

func (e execer) ExecSync(ctx context.Context, container string, argv []string) ([]byte, int, error) {
	sb := e.w.currentSandbox()
	if sb == nil {
		return nil, 0, errors.New("pod sandbox is not running")
	}
	var out limitedBuffer
	code, err := sb.Exec(ctx, container, argv, sandbox.StreamIO{Stdin: bytes.NewReader(nil), Stdout: &out, Stderr: &out})
	if err != nil && ctx.Err() == nil {
		e.w.logger(ctx).Error(err, "Running a probe or hook command failed", "container", container, "command", argv)
	}
	return out.Bytes(), code, err
}

// limitedBuffer keeps the first 10 KiB written to it.
type limitedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := 10<<10 - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (b *limitedBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

// syncProbes runs the container's probes for its running attempt and
// stops them when it is not running.
func (w *podWorker) syncProbes(ctx context.Context, pod *corev1.Pod, c *corev1.Container, st sandbox.ContainerStatus) {
	w.mu.Lock()
	defer w.mu.Unlock()
	cs := w.containerLocked(c.Name)
	running := st.State == sandbox.StateRunning
	if cs.probeCancel != nil && (!running || cs.probeAttempt != st.Attempt) {
		cs.probeCancel()
		cs.probeCancel = nil
		cs.started, cs.ready = false, false
	}
	if !running || cs.probeCancel != nil {
		return
	}
	pctx, cancel := context.WithCancel(ctx)
	cs.probeCancel, cs.probeAttempt = cancel, st.Attempt
	cs.hasStartup = c.StartupProbe != nil
	cs.started = c.StartupProbe == nil
	cs.ready = c.ReadinessProbe == nil && cs.started
	if c.StartupProbe != nil {
		w.runProbe(pctx, probe.Kind("startup"), c, c.StartupProbe, st.Attempt)
		return
	}
	w.startProbesLocked(pctx, c, st.Attempt)
}

// startProbesLocked starts the liveness and readiness probes, once the
// startup probe (if any) has succeeded.
func (w *podWorker) startProbesLocked(ctx context.Context, c *corev1.Container, attempt int) {
	if c.LivenessProbe != nil {
		w.runProbe(ctx, probe.Kind("liveness"), c, c.LivenessProbe, attempt)
	}
	if c.ReadinessProbe != nil {
		w.runProbe(ctx, probe.Kind("readiness"), c, c.ReadinessProbe, attempt)
	}
}

func (w *podWorker) runProbe(ctx context.Context, kind probe.Kind, c *corev1.Container, p *corev1.Probe, attempt int) {
	pw := probe.NewWorker(kind, p, w.target(c), w.p.clock, func(r probe.Result, msg string) {
		w.probeChanged(ctx, kind, c, p, attempt, r, msg)
	})
	go pw.Run(ctx)
	go func() { <-ctx.Done(); pw.Stop() }()
}

// probeChanged acts on a probe's new verdict.
func (w *podWorker) probeChanged(ctx context.Context, kind probe.Kind, c *corev1.Container, p *corev1.Probe, attempt int, r probe.Result, msg string) {
	if ctx.Err() != nil {
		return
	}
	w.mu.Lock()
	cs := w.containerLocked(c.Name)
	if cs.probeAttempt != attempt {
		w.mu.Unlock()
		return
	}
	kill := false
	switch kind {
	case "startup":
		if r == probe.Success && !cs.started {
			cs.started = true
			cs.ready = c.ReadinessProbe == nil
			w.startProbesLocked(ctx, c, attempt)
		}
		kill = r == probe.Failure
	case "liveness":
		kill = r == probe.Failure
	case "readiness":
		cs.ready = r == probe.Success && cs.started
	}
	w.mu.Unlock()
	if r == probe.Failure {
		w.event(corev1.EventTypeWarning, "Unhealthy", "%s probe failed: %s", probeTitle(kind), strings.TrimSpace(msg))
	}
	if kill {
		grace := gracePeriod(w.spec())
		if p.TerminationGracePeriodSeconds != nil {
			grace = time.Duration(*p.TerminationGracePeriodSeconds) * time.Second
		}
		w.event(corev1.EventTypeNormal, "Killing", "Container %s failed %s probe, will be restarted", c.Name, kind)
		if sb := w.currentSandbox(); sb != nil {
			go func() {
				if err := sb.StopContainer(ctx, c.Name, grace); err != nil {
					w.logger(ctx).Error(err, "Stopping unhealthy container failed", "container", c.Name)
				}
			}()
		}
	}
	w.kick()
}

func probeTitle(k probe.Kind) string {
	s := string(k)
	return strings.ToUpper(s[:1]) + s[1:]
}

func (w *podWorker) stopProbes() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, cs := range w.containers {
		if cs.probeCancel != nil {
			cs.probeCancel()
			cs.probeCancel = nil
		}
		cs.ready = false
	}
}

// stopAll runs the preStop hooks of the running containers (when hooks is
// set) and stops them, all within grace.
func (w *podWorker) stopAll(ctx context.Context, grace time.Duration, hooks bool) {
	w.mu.Lock()
	sb, pod := w.sandbox, w.pod
	w.mu.Unlock()
	if sb == nil {
		return
	}
	deadline := w.p.clock.Now().Add(grace)
	var wg sync.WaitGroup
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			c := &list[i]
			if st, ok := sb.Container(c.Name); !ok || st.State != sandbox.StateRunning {
				continue
			}
			wg.Go(func() {
				if h := lifecycleHandler(c, false); hooks && h != nil && grace > 0 {
					hctx, cancel := context.WithDeadline(ctx, deadline)
					go func() {
						select {
						case <-w.terminateImmediately:
							cancel()
						case <-hctx.Done():
						}
					}()
					if err := probe.RunHandler(hctx, h, w.target(c)); err != nil && hctx.Err() == nil {
						w.event(corev1.EventTypeWarning, "FailedPreStopHook", "PreStopHook failed: %v", err)
					}
					cancel()
				}
				w.event(corev1.EventTypeNormal, "Killing", "Stopping container %s", c.Name)
				left := max(deadline.Sub(w.p.clock.Now()), 0)
				sctx, cancel := context.WithCancel(ctx)
				defer cancel()
				done := make(chan struct{})
				go func() {
					select {
					case <-w.terminateImmediately:
						_ = sb.StopContainer(sctx, c.Name, 0)
					case <-done:
					}
				}()
				if err := sb.StopContainer(sctx, c.Name, left); err != nil {
					w.logger(ctx).Error(err, "Stopping container failed", "container", c.Name)
				}
				close(done)
			})
		}
	}
	wg.Wait()
}

// terminate stops a deleted pod within its grace period, removes its
// sandbox, volumes and state, reports its final status and forgets it.
func (w *podWorker) terminate(ctx context.Context) error {
	w.stopProbes()
	w.mu.Lock()
	grace, pod := w.grace, w.pod
	w.mu.Unlock()
	w.stopAll(ctx, grace, true)
	// The final status is computed from the runtime's records, which go
	// with the sandbox.
	w.mu.Lock()
	w.gone = true
	v := w.viewLocked()
	w.mu.Unlock()
	final := podStatus(v)
	notGone := func() {
		w.mu.Lock()
		w.gone = false
		w.mu.Unlock()
	}
	// Volumes first: their mounts live in the pod's directory, which the
	// sandbox's removal deletes. CSI volumes are unpublished before the
	// volume manager removes the volume directories, and unstaged only once
	// the sandbox, whose mount namespace holds them too, is gone.
	mounter := w.p.parts.CSI
	if mounter != nil {
		if err := mounter.TearDown(ctx, pod.UID); err != nil {
			notGone()
			w.unmountFailed(err)
			return fmt.Errorf("unpublish CSI volumes: %w", err)
		}
	}
	if err := w.p.parts.Volumes.TearDown(ctx, pod); err != nil {
		notGone()
		return fmt.Errorf("tear down volumes: %w", err)
	}
	if err := w.p.parts.Runtime.RemoveSandbox(ctx, pod.UID); err != nil {
		notGone()
		return fmt.Errorf("remove sandbox: %w", err)
	}
	if mounter != nil {
		if err := mounter.Release(ctx, pod.UID); err != nil {
			notGone()
			w.unmountFailed(err)
			return fmt.Errorf("unstage CSI volumes: %w", err)
		}
	}
	if err := os.Remove(w.p.stateFile(pod.UID)); err != nil && !os.IsNotExist(err) {
		w.logger(ctx).Error(err, "Removing pod state failed")
	}
	w.mu.Lock()
	w.status = final
	w.mu.Unlock()
	w.p.forget(w)
	w.p.publish(w.snapshot())
	w.logger(ctx).V(2).Info("Pod terminated", "phase", final.Phase)
	return nil
}

// unmountFailed records, once, a Warning Event saying why the pod's CSI
// volumes are not torn down yet: the pod stays until they are.
func (w *podWorker) unmountFailed(err error) {
	w.mu.Lock()
	first := !w.unmountWarned
	w.unmountWarned = true
	w.mu.Unlock()
	if first {
		w.event(corev1.EventTypeWarning, "FailedUnmount", "%v", err)
	}
}
