package lifecycle

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/pkg/lifecycle/probe"
	"github.com/nodelet/nodelet/pkg/provider"
)

// exceedDeadline stops the pod's containers as stop says and fails it: it
// was active longer than activeDeadlineSeconds.
func (w *podWorker) exceedDeadline(ctx context.Context, seconds int64, stop *stopActions) {
	msg := fmt.Sprintf("Pod was active on the node longer than the specified deadline (%ds)", seconds)
	w.event(corev1.EventTypeNormal, "DeadlineExceeded", "%s", msg)
	w.stopProbes()
	w.stop(ctx, stop)
	w.mu.Lock()
	w.failReason, w.failMessage = "DeadlineExceeded", msg
	w.mu.Unlock()
	if err := w.deps.states.save(w.state()); err != nil {
		w.logger(ctx).Error(err, "Saving pod state failed")
	}
}

// Eviction says how to stop and fail a pod the node evicts.
type Eviction = provider.Eviction

// evict stops the pod's containers as stop says (hooks included, within
// the eviction's grace period) and fails the pod for good.
func (w *podWorker) evict(ctx context.Context, e *Eviction, stop *stopActions) {
	w.logger(ctx).Info("Evicting pod", "reason", e.Reason, "message", e.Message, "grace", e.Grace)
	w.stopProbes()
	w.stop(ctx, stop)
	w.mu.Lock()
	w.failReason, w.failMessage = e.Reason, e.Message
	w.failConditions = e.Conditions
	w.mu.Unlock()
	if err := w.deps.states.save(w.state()); err != nil {
		w.logger(ctx).Error(err, "Saving pod state failed")
	}
}

// stop carries out s as the kubelet stops a pod's containers: every
// running container of its groups at once runs its preStop hook (when
// s.hooks is set), then waits for its turn, when every container of the
// groups before it has stopped, and stops; all within s.grace.
func (w *podWorker) stop(ctx context.Context, s *stopActions) {
	w.mu.Lock()
	sb := w.sandbox
	w.mu.Unlock()
	if sb == nil {
		return
	}
	deadline := w.deps.clock.Now().Add(s.grace)
	var all sync.WaitGroup
	turn := make(chan struct{})
	close(turn) // the first group's turn is now
	for _, group := range s.groups {
		var stopping sync.WaitGroup
		mine := turn
		for _, c := range group {
			if st, ok := sb.Container(c.Name); !ok || st.State != StateRunning {
				continue
			}
			stopping.Add(1)
			all.Go(func() {
				defer stopping.Done()
				w.stopContainer(ctx, sb, c, deadline, s.hooks, "Stopping container "+c.Name, mine)
			})
		}
		// The next group's turn: this group and every one before it have
		// stopped.
		next := make(chan struct{})
		go func() {
			stopping.Wait()
			<-mine
			close(next)
		}()
		turn = next
	}
	all.Wait()
}

// stopContainer stops the container by deadline as the kubelet kills
// one: a Killing event that says why, its preStop hook (when hooks is
// set), its turn (turn closed, or the deadline), then the stop with what
// is left of the time.
func (w *podWorker) stopContainer(ctx context.Context, sb Sandbox, c *corev1.Container, deadline time.Time, hooks bool, why string, turn <-chan struct{}) {
	graced := deadline.After(w.deps.clock.Now())
	w.event(corev1.EventTypeNormal, "Killing", "%s", why)
	if h := lifecycleHandler(c, false); hooks && h != nil && deadline.After(w.deps.clock.Now()) {
		// The hook is waited for until the deadline, but runs on until the
		// container stops, as the kubelet runs it (no timeout of its own):
		// one that never exits ends with its container.
		hctx, cancel := context.WithCancel(ctx)
		defer cancel()
		failed := make(chan error, 1)
		go func() { failed <- probe.RunHandler(hctx, h, w.target(c)) }()
		select {
		case err := <-failed:
			if err != nil && hctx.Err() == nil {
				w.event(corev1.EventTypeWarning, "FailedPreStopHook", "PreStopHook failed: %v", err)
			}
		case <-w.terminateImmediately:
			cancel()
		case <-ctx.Done():
		case <-w.deps.clock.After(max(deadline.Sub(w.deps.clock.Now()), 0)):
		}
	}
	select {
	case <-turn:
	case <-w.terminateImmediately:
	case <-ctx.Done():
	case <-w.deps.clock.After(max(deadline.Sub(w.deps.clock.Now()), 0)):
	}
	left := max(deadline.Sub(w.deps.clock.Now()), 0)
	if graced {
		// As the kubelet: a container stopped with a grace period gets at
		// least minimumGracePeriod of it, whatever its hook and its turn
		// took.
		left = max(left, minimumGracePeriod)
	}
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
}

// terminate stops a deleted pod's containers as stop says (within its
// grace period), removes its sandbox, volumes and state, reports its final
// status and forgets it.
func (w *podWorker) terminate(ctx context.Context, stop *stopActions) error {
	w.stopProbes()
	w.mu.Lock()
	pod := w.pod
	w.mu.Unlock()
	w.stop(ctx, stop)
	if err := ctx.Err(); err != nil {
		return err // the agent is stopping: the next one goes on from here
	}
	final := w.keepFinalStatus(ctx)
	if err := w.tearDown(ctx, pod); err != nil {
		w.mu.Lock()
		w.gone = false
		w.mu.Unlock()
		return err
	}
	if err := w.deps.states.remove(pod.UID); err != nil {
		w.logger(ctx).Error(err, "Removing pod state failed")
	}
	w.mu.Lock()
	w.status = final
	w.mu.Unlock()
	w.owner.forget(w)
	w.owner.published(w.snapshot())
	w.logger(ctx).V(2).Info("Pod terminated", "phase", final.Phase)
	return nil
}

// keepFinalStatus marks the pod's containers stopped for good and returns
// its final status. The final status is computed once, from the runtime's
// records, which go with the sandbox, and kept, also for a restarted agent
// (saved before the removal; a failure, say a full disk, does not hold the
// deletion up). A removal tried again is not computed again: the one cut
// short may have taken records and left the sandbox.
func (w *podWorker) keepFinalStatus(ctx context.Context) corev1.PodStatus {
	w.mu.Lock()
	w.gone = true
	recompute := w.final == nil
	w.mu.Unlock()
	if recompute {
		w.recordFinalStatus(ctx)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return *w.final
}

// recordFinalStatus computes the pod's status from the runtime's records
// and keeps it as its final one, saved with the pod's state.
func (w *podWorker) recordFinalStatus(ctx context.Context) {
	w.mu.Lock()
	v := w.viewLocked()
	w.mu.Unlock()
	s := podStatus(v)
	w.mu.Lock()
	w.final = &s
	w.mu.Unlock()
	if err := w.deps.states.save(w.state()); err != nil {
		w.logger(ctx).Error(err, "Saving pod state failed")
	}
}

// tearDown removes a stopped pod's volumes and sandbox. Volumes first:
// their mounts live in the pod's directory, which the sandbox's removal
// deletes. CSI volumes are unpublished before the volume manager removes
// the volume directories, and unstaged only once the sandbox, whose mount
// namespace holds them too, is gone.
func (w *podWorker) tearDown(ctx context.Context, pod *corev1.Pod) error {
	if err := w.unmountVolumes(ctx, pod); err != nil {
		return err
	}
	if err := w.deps.runtime.RemoveSandbox(ctx, pod.UID); err != nil {
		return fmt.Errorf("remove sandbox: %w", err)
	}
	w.mu.Lock()
	w.sandbox = nil // its records are gone: final is the status from now on
	w.mu.Unlock()
	if mounter := w.deps.csi; mounter != nil {
		if err := mounter.Release(ctx, pod.UID); err != nil {
			w.unmountFailed(err)
			return fmt.Errorf("unstage CSI volumes: %w", err)
		}
	}
	return nil
}

// unmountVolumes unpublishes the pod's CSI volumes, then unmounts and
// removes the rest of its volumes with the volume directories. Both are
// idempotent: a pod whose volumes went when it ended goes through it again
// when it is deleted.
func (w *podWorker) unmountVolumes(ctx context.Context, pod *corev1.Pod) error {
	if mounter := w.deps.csi; mounter != nil {
		if err := mounter.TearDown(ctx, pod.UID); err != nil {
			w.unmountFailed(err)
			return fmt.Errorf("unpublish CSI volumes: %w", err)
		}
	}
	if err := w.deps.volumes.TearDown(ctx, pod); err != nil {
		return fmt.Errorf("tear down volumes: %w", err)
	}
	return nil
}

// tearDownEndedVolumes tears down the volumes of a pod that ended, as the
// kubelet's volume manager unmounts a terminated pod's volumes without
// waiting for its deletion: a memory-backed emptyDir gives its memory
// back, a CSI volume is unpublished. It says when to try again (0: done).
// Its sandbox is stopped where the runtime can (its network and IPs given
// back, its containers' records and logs kept), as the kubelet stops a
// terminal pod's, and its CSI volumes are then unstaged too; elsewhere they
// stay staged, and so in use, until the sandbox goes with the pod's
// deletion: the sandbox's mount namespace may still hold them.
// Done, it is saved, with the pod's status, so that a restarted agent
// neither sets them up again nor runs the pod again.
func (w *podWorker) tearDownEndedVolumes(ctx context.Context, pod *corev1.Pod) time.Duration {
	if err := w.unmountVolumes(ctx, pod); err != nil {
		w.logger(ctx).Error(err, "Tearing down the volumes of the pod that ended failed; retrying")
		return retryAfter
	}
	stopped, err := w.stopSandbox(ctx, pod.UID)
	if err != nil {
		w.logger(ctx).Error(err, "Stopping the sandbox of the pod that ended failed; retrying")
		return retryAfter
	}
	if mounter := w.deps.csi; stopped && mounter != nil {
		// Nothing of the pod holds its CSI volumes any more.
		if err := mounter.Release(ctx, pod.UID); err != nil {
			w.unmountFailed(err)
			w.logger(ctx).Error(err, "Unstaging the CSI volumes of the pod that ended failed; retrying")
			return retryAfter
		}
	}
	w.mu.Lock()
	w.volumePaths, w.volumesTornDown = nil, true
	w.mu.Unlock()
	w.recordFinalStatus(ctx)
	w.logger(ctx).V(2).Info("Tore down the volumes of the pod that ended", "sandboxStopped", stopped)
	return 0
}

// stopSandbox stops the pod's sandbox where the runtime can
// (SandboxStopper), and says whether it did. The pod's status is kept as
// its final one first: its IPs, which a stopped sandbox no longer has.
func (w *podWorker) stopSandbox(ctx context.Context, uid types.UID) (bool, error) {
	rt, m := unwrapped(w.deps.runtime)
	s, ok := rt.(SandboxStopper)
	if !ok {
		return false, nil
	}
	w.mu.Lock()
	kept := w.final != nil
	w.mu.Unlock()
	if !kept {
		w.recordFinalStatus(ctx)
	}
	err := s.StopSandbox(ctx, uid)
	if m != nil {
		m.record("stop_podsandbox", err)
	}
	return err == nil, err
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

// nowTurn is a turn that has come: a container stopped alone.
var nowTurn = func() <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// minimumGracePeriod is the least time a container stopped gracefully has
// to exit, as the kubelet's minimumGracePeriodInSeconds.
const minimumGracePeriod = 2 * time.Second
