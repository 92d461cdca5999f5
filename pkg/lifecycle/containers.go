package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/nodelet/nodelet/pkg/lifecycle/env"
	"github.com/nodelet/nodelet/pkg/lifecycle/hostvolume"
	"github.com/nodelet/nodelet/pkg/lifecycle/probe"
	"github.com/nodelet/nodelet/pkg/podrules"
)

// step acts on the pod: set-up, active deadline, init containers in order,
// then the containers.
func (w *podWorker) step(ctx context.Context) time.Duration {
	w.mu.Lock()
	pod, failed, evict := w.pod, w.failReason != "", w.evictReq
	w.evictReq = nil
	w.mu.Unlock()
	if evict != nil && !failed {
		w.evict(ctx, evict)
		return 0
	}
	if failed {
		w.stopProbes()
		return 0
	}
	if ready, retry := w.setUp(ctx, pod); !ready {
		return retry
	}
	now := w.deps.clock.Now()
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

	w.mu.Lock()
	appsDone := w.regularDoneLocked(pod, w.sandbox)
	w.mu.Unlock()
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		st, ok := w.sandbox.Container(c.Name)
		if podrules.IsSidecar(c) {
			// A sidecar lets the next container start once it has started
			// (its startup probe passed), and runs as long as the app
			// containers do; it is restarted whatever the pod's policy.
			switch {
			case !ok:
				soonest(w.startContainer(ctx, pod, c, 0))
				return next
			case st.State == StateRunning:
				w.syncProbes(ctx, pod, c, st)
				w.resize(ctx, pod, c, st)
				if !w.hasStarted(c.Name) {
					return next
				}
			case w.lost(c.Name, st):
				soonest(w.restartLost(ctx, pod, c, st))
				return next
			default:
				w.syncProbes(ctx, pod, c, st)
				if !appsDone {
					soonest(w.restartAfterBackOff(ctx, pod, c, st))
				}
				if !startedAfter(pod, i, w.sandbox) {
					// Exited before the pod got further: what follows
					// waits for it to run again and start.
					return next
				}
			}
			continue
		}
		switch {
		case !ok:
			soonest(w.startContainer(ctx, pod, c, 0))
			return next
		case st.State == StateRunning:
			w.syncProbes(ctx, pod, c, st)
			return next
		case w.lost(c.Name, st):
			soonest(w.restartLost(ctx, pod, c, st))
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
		if st.State == StateRunning {
			if !w.restartForImage(ctx, pod, c, st) {
				w.resize(ctx, pod, c, st)
			}
		} else if w.lost(c.Name, st) {
			soonest(w.restartLost(ctx, pod, c, st))
		} else if restarts(pod, c, false, st.ExitCode) {
			soonest(w.restartAfterBackOff(ctx, pod, c, st))
		}
	}
	for _, c := range ephemeralContainers(pod) {
		// An ephemeral container runs once, never restarted.
		if _, ok := w.sandbox.Container(c.Name); !ok {
			soonest(w.startContainer(ctx, pod, &c, 0))
		}
	}
	if appsDone {
		// The app containers are done for good: the sidecars stop too,
		// the last started first.
		w.stopSidecars(ctx, gracePeriod(pod))
	}
	return next
}

// resize gives a running container the resources its spec now has (an
// in-place resize): through the runtime, or by restarting it when its
// resize policy asks for that for a changed resource or the runtime
// cannot. The restart is at once and whatever the pod's restart policy,
// as the kubelet's.
func (w *podWorker) resize(ctx context.Context, pod *corev1.Pod, c *corev1.Container, st ContainerStatus) {
	w.mu.Lock()
	applied := w.containerLocked(c.Name).applied
	w.mu.Unlock()
	if applied == nil || equality.Semantic.DeepEqual(*applied, c.Resources) {
		return
	}
	logger := w.logger(ctx).WithValues("container", c.Name)
	restart := resizeNeedsRestart(c, applied)
	if !restart {
		err := w.sandbox.UpdateResources(ctx, pod, c)
		switch {
		case errors.Is(err, ErrResizeUnsupported):
			restart = true
		case err != nil:
			logger.Error(err, "Resizing container failed")
			w.event(corev1.EventTypeWarning, "ResizeError", "Resizing container %s failed: %v", c.Name, err)
			return // tried again at the next sync
		default:
			logger.V(2).Info("Resized container", "resources", c.Resources)
			w.mu.Lock()
			w.containerLocked(c.Name).applied = c.Resources.DeepCopy()
			w.mu.Unlock()
			return
		}
	}
	w.restartNow(ctx, pod, c, st, "to resize it")
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

// restartForImage restarts a running container whose spec now names
// another image than it was started with, as the kubelet does; its back-off
// starts over.
func (w *podWorker) restartForImage(ctx context.Context, pod *corev1.Pod, c *corev1.Container, st ContainerStatus) bool {
	w.mu.Lock()
	cs := w.containerLocked(c.Name)
	changed := cs.image != "" && cs.image != c.Image
	if changed {
		cs.backOffFrom = st.Attempt + 1
	}
	w.mu.Unlock()
	if !changed {
		return false
	}
	w.event(corev1.EventTypeNormal, "Killing", "Container %s definition changed, will be restarted", c.Name)
	w.restartNow(ctx, pod, c, st, "for its new image "+c.Image)
	return true
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

// startedAfter says whether a container after the i-th init container, init
// or regular, ever ran.
func startedAfter(pod *corev1.Pod, i int, sb Sandbox) bool {
	for _, c := range pod.Spec.InitContainers[i+1:] {
		if _, ok := sb.Container(c.Name); ok {
			return true
		}
	}
	for _, c := range pod.Spec.Containers {
		if _, ok := sb.Container(c.Name); ok {
			return true
		}
	}
	return false
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

// regularDoneLocked tells whether every app container has exited and will
// not run again.
func (w *podWorker) regularDoneLocked(pod *corev1.Pod, sb Sandbox) bool {
	if sb == nil {
		return false
	}
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		st, ok := sb.Container(c.Name)
		if !ok || st.State == StateRunning || w.runsAgainLocked(pod, c, false, st) {
			return false
		}
	}
	return true
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

// restartAfterBackOff restarts an exited container once its back-off has
// passed; until then it waits in CrashLoopBackOff.
func (w *podWorker) restartAfterBackOff(ctx context.Context, pod *corev1.Pod, c *corev1.Container, st ContainerStatus) time.Duration {
	w.mu.Lock()
	cs := w.containerLocked(c.Name)
	if cs.image != "" && cs.image != c.Image {
		// A new image: the back-off starts over, as the kubelet's.
		cs.backOffFrom = st.Attempt + 1
		w.mu.Unlock()
		return w.startContainer(ctx, pod, c, st.Attempt+1)
	}
	from := cs.backOffFrom
	w.mu.Unlock()
	d := backOff(&st, from)
	at := st.FinishedAt.Add(d)
	if wait := at.Sub(w.deps.clock.Now()); wait > 0 {
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
		return wait
	}
	return w.startContainer(ctx, pod, c, st.Attempt+1)
}

// startContainer starts one attempt of a container. It returns when to
// try again if the container cannot start yet.
func (w *podWorker) startContainer(ctx context.Context, pod *corev1.Pod, c *corev1.Container, attempt int) time.Duration {
	logger := w.logger(ctx).WithValues("container", c.Name)
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
	node := env.NodeInfo{NodeName: w.deps.nodeName, HostIP: w.deps.address, PodIPs: w.podIPs(), Allocatable: w.deps.allocatable()}
	vars, err := env.Environment(ctx, w.deps.env, pod, c, node)
	if err != nil {
		w.wait(c, "CreateContainerConfigError", err.Error(), true)
		return retryAfter
	}
	byName := map[string]string{}
	for _, kv := range vars {
		k, v, _ := strings.Cut(kv, "=")
		byName[k] = v
	}
	mounts, err := hostvolume.ContainerMounts(pod, c, paths, byName)
	if err != nil {
		w.wait(c, "CreateContainerConfigError", err.Error(), true)
		return retryAfter
	}
	command, err := expandArgs(c.Command, byName)
	if err != nil {
		w.wait(c, "CreateContainerConfigError", fmt.Sprintf("command: %v", err), true)
		return retryAfter
	}
	args, err := expandArgs(c.Args, byName)
	if err != nil {
		w.wait(c, "CreateContainerConfigError", fmt.Sprintf("args: %v", err), true)
		return retryAfter
	}
	spec := ContainerSpec{
		Pod:             pod,
		Container:       c,
		Attempt:         attempt,
		Command:         command,
		Args:            args,
		Env:             vars,
		TargetContainer: targetContainer(pod, c.Name),
	}
	for _, m := range mounts {
		spec.Mounts = append(spec.Mounts, Mount{Source: m.Source, Destination: m.Destination, ReadOnly: m.ReadOnly, Propagation: m.Propagation})
	}
	w.mu.Lock()
	cs := w.containerLocked(c.Name)
	cs.waitingReason, cs.waitingMessage, cs.warned = "", "", ""
	cs.started, cs.ready = false, false
	cs.applied = c.Resources.DeepCopy()
	cs.image = c.Image
	w.mu.Unlock()
	if err := sb.StartContainer(ctx, spec); err != nil {
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
	logger.V(2).Info("Started container", "attempt", attempt)
	w.kick() // look again at once: its probes start, the next container may follow
	w.event(corev1.EventTypeNormal, "Started", "Started container %s", c.Name)
	if h := lifecycleHandler(c, true); h != nil {
		go w.postStart(ctx, c, attempt, h)
	}
	return 0
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
		if st, ok := sb.Container(c.Name); ok && st.Attempt == attempt && st.State == StateRunning {
			w.event(corev1.EventTypeNormal, "Killing", "FailedPostStartHook")
			_ = sb.StopContainer(ctx, c.Name, gracePeriod(w.spec()))
		}
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
