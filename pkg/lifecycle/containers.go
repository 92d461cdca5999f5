package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/lifecycle/env"
	"github.com/nodelet/nodelet/pkg/lifecycle/hostvolume"
	"github.com/nodelet/nodelet/pkg/lifecycle/probe"
)

// step carries out one step of a pod that is not being deleted, as plan
// says, and says when to look again (0: when something happens). It
// decides nothing itself: once it has set up the sandbox, it has
// computeContainerActions decide the containers against the new one.
func (w *podWorker) step(ctx context.Context, plan podActions) time.Duration {
	switch {
	case plan.evict != nil:
		w.evict(ctx, plan.evict, plan.stop)
		return 0
	case plan.ended:
		w.stopProbes()
		if plan.tearDownVolumes {
			return w.tearDownEndedVolumes(ctx, plan.pod)
		}
		return 0
	case plan.failed:
		w.stopProbes()
		return 0
	}
	if ready, retry := w.setUp(ctx, plan); !ready {
		return retry
	}
	if plan.setUp == setUpNow {
		w.mu.Lock()
		v := w.viewOfLocked(plan.pod, false)
		w.mu.Unlock()
		plan = computeContainerActions(v, w.deps.clock.Now())
	}
	if plan.deadlineExceeded {
		w.exceedDeadline(ctx, *plan.pod.Spec.ActiveDeadlineSeconds, plan.stop)
		return 0
	}
	return w.execute(ctx, plan)
}

// execute carries out the containers' actions of plan in order, then stops
// the sidecars if it says so. It returns when to look again: the plan's
// next, or sooner when an action is to be tried again sooner.
func (w *podWorker) execute(ctx context.Context, plan podActions) time.Duration {
	next := plan.next
	for _, act := range plan.containers {
		retry, goOn := w.carryOut(ctx, plan.pod, act)
		next = sooner(next, retry)
		if !goOn || w.ending() {
			// Deleted or evicted meanwhile (a postStart hook, say, ended
			// early for it): nothing more starts, the next step stops the
			// pod.
			return next
		}
	}
	if plan.stopSidecars != nil {
		w.stop(ctx, plan.stopSidecars)
	}
	if plan.stop != nil {
		w.stop(ctx, plan.stop)
	}
	return next
}

// carryOut does one action on a container against the runtime. It returns
// when to try again (0: no need), and whether to go on with the plan.
func (w *podWorker) carryOut(ctx context.Context, pod *corev1.Pod, act containerAction) (time.Duration, bool) {
	c, st := act.container, act.latest
	switch act.kind {
	case actStart:
		if act.newImage {
			w.countBackOffFrom(c.Name, act.attempt)
		}
		return w.startContainer(ctx, pod, c, act.attempt), true
	case actRestartLost:
		return w.restartLost(ctx, pod, c, st), true
	case actWaitBackOff:
		w.waitBackOff(ctx, pod, c, st, act.backOff)
	case actSyncProbes:
		w.syncProbes(ctx, pod, c, st)
	case actResize:
		w.resize(ctx, pod, c, st)
	case actRestartToResize:
		w.restartNow(ctx, pod, c, st, "to resize it")
	case actRestartForImage:
		w.restartForImage(ctx, pod, c, st)
	case actGoOnIfStarted:
		return 0, w.hasStarted(c.Name)
	}
	return 0, true
}

// resize gives a running container the resources its spec now has, in
// place through the runtime, or by restarting it when the runtime cannot.
// The restart is at once and whatever the pod's restart policy, as the
// kubelet's.
func (w *podWorker) resize(ctx context.Context, pod *corev1.Pod, c *corev1.Container, st ContainerStatus) {
	logger := w.logger(ctx).WithValues("container", c.Name)
	err := w.sandbox.UpdateResources(ctx, pod, c)
	switch {
	case errors.Is(err, ErrResizeUnsupported):
		w.restartNow(ctx, pod, c, st, "to resize it")
	case err != nil:
		logger.Error(err, "Resizing container failed")
		w.event(corev1.EventTypeWarning, "ResizeError", "Resizing container %s failed: %v", c.Name, err)
		// tried again at the next sync
	default:
		logger.V(2).Info("Resized container", "resources", c.Resources)
		w.mu.Lock()
		w.containerLocked(c.Name).applied = c.Resources.DeepCopy()
		w.mu.Unlock()
	}
}

// restartNow stops the running attempt of a container and starts the next
// at once, without back-off; why is logged.
func (w *podWorker) restartNow(ctx context.Context, pod *corev1.Pod, c *corev1.Container, st ContainerStatus, why string) {
	logger := w.logger(ctx).WithValues("container", c.Name)
	logger.V(2).Info("Restarting container " + why)
	if err := w.sandbox.StopContainer(ctx, c.Name, gracePeriod(pod)); err != nil {
		logger.Error(err, "Stopping container failed; restarting it "+why+" later")
		return
	}
	w.startContainer(ctx, pod, c, st.Attempt+1)
}

// restartForImage restarts a running container with the new image its
// spec names, as the kubelet does; its back-off starts over.
func (w *podWorker) restartForImage(ctx context.Context, pod *corev1.Pod, c *corev1.Container, st ContainerStatus) {
	w.countBackOffFrom(c.Name, st.Attempt+1)
	w.event(corev1.EventTypeNormal, "Killing", "Container %s definition changed, will be restarted", c.Name)
	w.restartNow(ctx, pod, c, st, "for its new image "+c.Image)
}

// countBackOffFrom has a container's crash-loop back-off count its
// attempts from attempt, the first of a new image.
func (w *podWorker) countBackOffFrom(name string, attempt int) {
	w.mu.Lock()
	w.containerLocked(name).backOffFrom = attempt
	w.mu.Unlock()
}

// ephemeralContainers are the pod's ephemeral containers (kubectl debug)
// as containers; the runtime tells them by name.
func ephemeralContainers(pod *corev1.Pod) []corev1.Container {
	out := make([]corev1.Container, 0, len(pod.Spec.EphemeralContainers))
	for _, ec := range pod.Spec.EphemeralContainers {
		out = append(out, corev1.Container(ec.EphemeralContainerCommon))
	}
	return out
}

// targetContainer is the container whose namespaces an ephemeral container
// shares, if it names one.
func targetContainer(pod *corev1.Pod, name string) string {
	for _, ec := range pod.Spec.EphemeralContainers {
		if ec.Name == name {
			return ec.TargetContainerName
		}
	}
	return ""
}

// hasStarted tells whether a running container passed its startup probe
// (or has none).
func (w *podWorker) hasStarted(name string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.containerLocked(name).started
}

// restartLost stops an attempt the runtime lost track of (in case it still
// runs: never two copies of a container) and starts the next at once,
// whatever the restart policy: the attempt did not run as far as anyone
// knows, as the kubelet has it.
func (w *podWorker) restartLost(ctx context.Context, pod *corev1.Pod, c *corev1.Container, st ContainerStatus) time.Duration {
	w.mu.Lock()
	sb := w.sandbox
	w.mu.Unlock()
	if st.Unknown {
		w.logger(ctx).Info("The runtime lost track of the container; stopping it and starting it again", "container", c.Name, "attempt", st.Attempt)
		if err := sb.StopContainer(ctx, c.Name, gracePeriod(pod)); err != nil {
			w.logger(ctx).Error(err, "Stopping the lost container failed; retrying", "container", c.Name)
			return retryAfter
		}
	}
	return w.startContainer(ctx, pod, c, st.Attempt+1)
}

// waitBackOff keeps an exited container waiting in CrashLoopBackOff for
// its back-off d before the restart; the first time, an Event says so.
func (w *podWorker) waitBackOff(ctx context.Context, pod *corev1.Pod, c *corev1.Container, st ContainerStatus, d time.Duration) {
	w.mu.Lock()
	cs := w.containerLocked(c.Name)
	first := cs.waitingReason != "CrashLoopBackOff"
	cs.waitingReason = "CrashLoopBackOff"
	cs.waitingMessage = fmt.Sprintf("back-off %s restarting failed container=%s pod=%s_%s(%s)", d, c.Name, pod.Name, pod.Namespace, pod.UID)
	w.mu.Unlock()
	if first {
		w.event(corev1.EventTypeWarning, "BackOff", "Back-off restarting failed container %s in pod %s_%s(%s)", c.Name, pod.Name, pod.Namespace, pod.UID)
		// Waiting to restart, the container's status and its logs (also
		// --previous) read only this attempt: one dead attempt is kept.
		w.sandbox.RemoveDeadBefore(ctx, c.Name, st.Attempt)
	}
}

// startContainer starts one attempt of a container. It returns when to
// try again if the container cannot start yet.
func (w *podWorker) startContainer(ctx context.Context, pod *corev1.Pod, c *corev1.Container, attempt int) time.Duration {
	w.mu.Lock()
	paths := w.volumePaths
	sb := w.sandbox
	refused := sb == nil || sb == w.refused
	w.mu.Unlock()
	if refused {
		// Found gone by an earlier start of this step: the next step
		// replaces it, then starts the container in the new one.
		return 0
	}
	spec, err := w.containerSpec(ctx, pod, c, attempt, paths)
	if err != nil {
		w.wait(c, "CreateContainerConfigError", err.Error(), true)
		return retryAfter
	}
	w.mu.Lock()
	cs := w.containerLocked(c.Name)
	cs.waitingReason, cs.waitingMessage, cs.warned = "", "", ""
	cs.started, cs.ready = false, false
	if cs.probeCancel != nil {
		// The probes of the attempt before end here, not at the next step:
		// this one's postStart hook may hold that off for long, and a
		// liveness probe of the attempt before would kill this one.
		cs.probeCancel()
		cs.probeCancel = nil
	}
	cs.applied = c.Resources.DeepCopy()
	cs.image = c.Image
	w.mu.Unlock()
	if err := sb.StartContainer(ctx, spec); err != nil {
		return w.startFailed(ctx, sb, c, err)
	}
	w.logger(ctx).V(2).Info("Started container", "container", c.Name, "attempt", attempt)
	w.event(corev1.EventTypeNormal, "Started", "Started container %s", c.Name)
	if h := lifecycleHandler(c, true); h != nil {
		w.postStart(ctx, sb, c, attempt, h)
	}
	w.kick() // look again at once: its probes start, the next container may follow
	return 0
}

// containerSpec resolves one attempt of a container: its environment, its
// mounts from the pod's volumes (at paths), its command and args expanded.
func (w *podWorker) containerSpec(ctx context.Context, pod *corev1.Pod, c *corev1.Container, attempt int, paths map[string]string) (ContainerSpec, error) {
	node := env.NodeInfo{NodeName: w.deps.nodeName, HostIP: w.deps.address, PodIPs: w.podIPs(), Allocatable: w.deps.allocatable(), Volumes: paths}
	vars, err := env.Environment(ctx, w.deps.env, pod, c, node)
	if err != nil {
		return ContainerSpec{}, err
	}
	byName := map[string]string{}
	for _, kv := range vars {
		k, v, _ := strings.Cut(kv, "=")
		byName[k] = v
	}
	mounts, err := hostvolume.ContainerMounts(pod, c, paths, byName)
	if err != nil {
		return ContainerSpec{}, err
	}
	command, err := expandArgs(c.Command, byName)
	if err != nil {
		return ContainerSpec{}, fmt.Errorf("command: %w", err)
	}
	args, err := expandArgs(c.Args, byName)
	if err != nil {
		return ContainerSpec{}, fmt.Errorf("args: %w", err)
	}
	spec := ContainerSpec{
		Pod: pod, Container: c, Attempt: attempt,
		Command: command, Args: args, Env: vars,
		TargetContainer: targetContainer(pod, c.Name),
	}
	for _, m := range mounts {
		spec.Mounts = append(spec.Mounts, Mount{Source: m.Source, Destination: m.Destination, ReadOnly: m.ReadOnly, Propagation: m.Propagation,
			RecursiveReadOnly: m.RecursiveReadOnly, Image: m.Image, ImageSubPath: m.ImageSubPath})
	}
	return spec, nil
}

// startFailed acts on a container start in sb that failed with err, as
// startFailure decides, and says when to look again.
func (w *podWorker) startFailed(ctx context.Context, sb Sandbox, c *corev1.Container, err error) time.Duration {
	logger := w.logger(ctx).WithValues("container", c.Name)
	outcome := startFailure(err, ctx.Err() != nil, sb.Ready)
	switch outcome {
	case startWaits:
		var we *WaitError
		errors.As(err, &we)
		w.wait(c, we.Reason, we.Message, we.Warn)
		return we.Retry
	case startInterrupted:
		return 0 // the agent is stopping: the next one sees what the sandbox did
	case startSandboxGone:
		// No attempt was made: the next step, at once, sets up a new
		// sandbox and starts the container there, its restarts and last
		// state as they were.
		logger.Info("The pod sandbox is gone; starting the container in a new one", "err", err)
		w.refuse(sb)
		w.kick()
		return 0
	}
	logger.Error(err, "Starting container failed")
	w.event(corev1.EventTypeWarning, "Failed", "Error: %v", err)
	if outcome == startFailedSandboxDead {
		// The sandbox is gone (its process died, say with an agent
		// killed while it started): the next step sets one up anew.
		w.refuse(sb)
	}
	// A runtime that records the failure as an exit wakes the worker;
	// one that went away during the call (the container may not even
	// exist) never will: look again after a while in any case.
	return retryAfter
}

// startOutcome is what a container start that failed calls for.
type startOutcome int

const (
	// startWaits: the container cannot start yet (a *WaitError).
	startWaits startOutcome = iota
	// startInterrupted: the agent is stopping during the start.
	startInterrupted
	// startSandboxGone: the sandbox no longer runs and no attempt was
	// made (ErrSandboxGone): a new sandbox is set up and the container
	// started there, no attempt counted.
	startSandboxGone
	// startFailed: the attempt failed, recorded as its exit; the restart
	// policy decides what follows.
	startFailed
	// startFailedSandboxDead: the attempt failed and the sandbox is not
	// ready any more: a new one is set up too.
	startFailedSandboxDead
)

// startFailure decides what the error of a container start calls for;
// stopping tells whether the agent is stopping, ready (asked only when it
// matters) whether the sandbox still runs.
func startFailure(err error, stopping bool, ready func() bool) startOutcome {
	var we *WaitError
	switch {
	case errors.As(err, &we):
		return startWaits
	case stopping:
		return startInterrupted
	case errors.Is(err, ErrSandboxGone):
		return startSandboxGone
	case !ready():
		return startFailedSandboxDead
	}
	return startFailed
}

// refuse marks the pod's sandbox sb as gone: no container starts in it,
// and the next step replaces it.
func (w *podWorker) refuse(sb Sandbox) {
	w.mu.Lock()
	if w.sandbox == sb {
		w.refused = sb
	}
	w.mu.Unlock()
}

// expandArgs returns a container's command or args with $(VAR) expanded
// from its environment, as the kubelet does.
func expandArgs(args []string, vars map[string]string) ([]string, error) {
	if args == nil {
		return nil, nil
	}
	out := make([]string, len(args))
	for i, arg := range args {
		var err error
		if out[i], err = env.Expand(arg, env.MapLookup(vars)); err != nil {
			return nil, fmt.Errorf("[%d]: %w", i, err)
		}
	}
	return out, nil
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

// postStart runs the postStart hook of the container's attempt, started
// in sb, and returns once the hook has: the kubelet starts nothing else
// until then, so the containers that follow in the pod's start order wait
// for it, and the container is neither started nor ready (its probes
// start at the worker's next step). A hook that fails kills the container
// as the kubelet does (its preStop hook first), which then restarts by its
// policy. Like the kubelet's, the hook has no time limit of its own: one
// bounded by the pod's grace period failed every hook of a pod whose grace
// period is 0. A deletion
// or eviction of the pod ends the hook at once and kills nothing: the next
// step stops the pod within its grace period, which a hook that hangs must
// not hold up.
func (w *podWorker) postStart(ctx context.Context, sb Sandbox, c *corev1.Container, attempt int, h *corev1.LifecycleHandler) {
	ectx, release := w.untilEnding(ctx)
	defer release()
	if ectx.Err() != nil {
		return
	}
	err := probe.RunHandler(ectx, h, w.target(c))
	if err == nil || ectx.Err() != nil {
		return // done, or ended by the pod's end or the agent's stop
	}
	w.logger(ctx).Info("The postStart hook failed; killing the container", "container", c.Name, "attempt", attempt, "err", err)
	w.event(corev1.EventTypeWarning, "FailedPostStartHook", "PostStartHook failed: %v", err)
	if st, ok := sb.Container(c.Name); ok && st.Attempt == attempt && st.State == StateRunning {
		deadline := w.deps.clock.Now().Add(gracePeriod(w.spec()))
		w.stopContainer(ctx, sb, c, deadline, true, "FailedPostStartHook", nowTurn)
	}
}

// currentSandbox is the pod's sandbox, for goroutines other than the
// worker's own (the worker sets it once the sandbox runs).
func (w *podWorker) currentSandbox() Sandbox {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.sandbox
}

// target is what probes and hooks of a container run against.
func (w *podWorker) target(c *corev1.Container) probe.Target {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.targetLocked(c)
}

// targetLocked is target for a caller that holds w.mu: the pod's IP
// (the node's when the pod shares its network) and its containers.
func (w *podWorker) targetLocked(c *corev1.Container) probe.Target {
	host := w.deps.address
	if w.sandbox != nil {
		if ips := w.sandbox.IPs(); len(ips) > 0 {
			host = ips[0]
		}
	}
	return probe.Target{Container: c, PodIP: host, Exec: execer{w}}
}

// podIPs are the IPs of the pod's sandbox; none when it shares the node's
// network.
func (w *podWorker) podIPs() []string {
	if sb := w.currentSandbox(); sb != nil {
		return sb.IPs()
	}
	return nil
}

// execer runs probe and hook commands in the pod's containers.
type execer struct{ w *podWorker }

func (e execer) ExecSync(ctx context.Context, container string, argv []string) ([]byte, int, error) {
	sb := e.w.currentSandbox()
	if sb == nil {
		return nil, 0, errors.New("pod sandbox is not running")
	}
	out, code, err := sb.ExecSync(ctx, container, argv)
	if err != nil && ctx.Err() == nil {
		e.w.logger(ctx).Error(err, "Running a probe or hook command failed", "container", container, "command", argv)
	}
	return out, code, err
}
