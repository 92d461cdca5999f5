package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/lifecycle/csimount"
	"github.com/nodelet/nodelet/pkg/lifecycle/hostvolume"
)

// setUp carries out what plan says of the pod's volumes and sandbox: a
// sandbox that does not run is put aside (its records stand for the pod's
// until a new one is set up), and what is missing is set up. It reports
// whether they are ready, and if not when to try again.
func (w *podWorker) setUp(ctx context.Context, plan podActions) (bool, time.Duration) {
	w.mu.Lock()
	if plan.replaceSandbox {
		// Set up anew, as the kubelet does.
		w.sandbox, w.dead = nil, w.sandbox
	}
	w.refused = nil
	paths, sb := w.volumePaths, w.sandbox
	w.mu.Unlock()
	if plan.replaceSandbox {
		w.event(corev1.EventTypeNormal, "SandboxChanged", "Pod sandbox changed, it will be killed and re-created.")
	}
	switch plan.setUp {
	case setUpNone:
		return true, 0
	case setUpLater:
		return false, plan.next
	}
	if paths == nil {
		var err error
		if paths, err = w.setUpVolumes(ctx, plan.pod); err != nil {
			return false, w.setUpFailed(ctx, err)
		}
	}
	if sb == nil {
		var err error
		sb, err = w.deps.runtime.EnsureSandbox(ctx, SandboxSpec{Pod: plan.pod})
		if err != nil {
			w.warnAll("FailedCreatePodSandBox", fmt.Sprintf("Failed to create pod sandbox: %v", err))
			return false, w.setUpFailed(ctx, err)
		}
	}
	w.setUpDone(paths, sb)
	return true, 0
}

// setUpDone takes the volumes and sandbox set up: a sandbox set up in
// place of one that died carries the dead one's records.
func (w *podWorker) setUpDone(paths map[string]string, sb Sandbox) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.sandbox == nil && w.dead != nil {
		sb, w.dead = replacement{Sandbox: sb, dead: w.dead}, nil
	}
	w.volumePaths, w.sandbox = paths, sb
	w.setUpFailures, w.setUpRetryAt, w.waitingForVolumes = 0, time.Time{}, false
	for _, cs := range w.containers {
		if cs.waitingReason == "" {
			cs.waitingMessage = "" // the set-up's failure, said by warnAll
		}
	}
}

// mountFailure is the message of a FailedMount event, as the kubelet
// words it for each volume: `MountVolume.SetUp failed for volume "cm" :
// configmap … not found`.
func mountFailure(err error) string {
	var all []error
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		all = joined.Unwrap()
	} else {
		all = []error{err}
	}
	msgs := make([]string, 0, len(all))
	for _, e := range all {
		var v *hostvolume.SetUpError
		if errors.As(e, &v) {
			msgs = append(msgs, fmt.Sprintf("MountVolume.SetUp failed for volume %q : %v", v.Volume, v.Err))
		} else {
			msgs = append(msgs, fmt.Sprintf("MountVolume.SetUp failed: %v", e))
		}
	}
	return strings.Join(msgs, "; ")
}

// setUpVolumes prepares the pod's volumes: its CSI volumes through the CSI
// mounter (when there is one), the others through the volume manager.
func (w *podWorker) setUpVolumes(ctx context.Context, pod *corev1.Pod) (map[string]string, error) {
	mounter := w.deps.csi
	local := pod
	if mounter != nil {
		local = withoutCSIVolumes(pod)
	}
	paths, err := w.deps.volumes.SetUp(ctx, local)
	if err != nil {
		w.warnAll("FailedMount", mountFailure(err))
		return nil, err
	}
	if mounter == nil || len(local.Spec.Volumes) == len(pod.Spec.Volumes) {
		return paths, nil
	}
	// A deletion or eviction cancels the set-up: staging and publishing
	// can take long.
	sctx, release := w.untilEnding(ctx)
	defer release()
	if err := context.Cause(sctx); err != nil {
		return nil, err
	}
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
	if errors.Is(err, errPodEnding) {
		return 0 // not tried: the next sync stops the pod
	}
	var se *csimount.SetUpError
	if !errors.As(err, &se) {
		logger.Error(err, "Setting up pod failed")
		return retryAfter
	}
	w.mu.Lock()
	ending := w.endingLocked()
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
	w.setUpRetryAt = w.deps.clock.Now().Add(wait)
	w.waitingForVolumes = se.Waiting()
	w.mu.Unlock()
	switch {
	case ending:
		return 0 // the next sync stops the pod
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

// warnAll makes every container wait with msg, in its default reason as
// the kubelet reports a pod whose set-up failed (ContainerCreating, or
// PodInitializing until the init containers are done), and records a
// Warning Event with reason, once per reason; an empty reason records
// none.
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
		cs.waitingReason, cs.waitingMessage = "", msg
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
