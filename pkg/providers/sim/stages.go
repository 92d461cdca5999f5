package sim

import (
	"context"
	"encoding/json"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/podrules"
	"github.com/nodelet/nodelet/pkg/stage"
)

// With Options.Stages, a pod's life is kwok's: the provider matches the
// pod against the stages for Pods each time it changes, waits the delay
// of the stage chosen, then plays it: its status template, rendered and
// merged into the pod's status as the API server merges kwok's patch, is
// what the provider reports; its events go to Options.Events; its
// finalizer and other patches, and the delete of a pod not being
// deleted, go to Options.API; its delete of a pod being deleted ends the
// pod in the provider, which the pod controller then deletes from the
// API. The pod is matched again after every stage that changed it (kwok
// matches again when it sees its own patch), so a chain of stages plays
// on by itself. The step machinery (one step ahead, one timer) is the
// built-in lifecycle's, with one more kind of step.

// EventRecorder records the Events of stages on pods.
type EventRecorder interface {
	Event(object runtime.Object, eventtype, reason, message string)
}

// StageAPI carries out what stages do to a pod in the API server.
type StageAPI interface {
	// PatchPod patches the pod (not its status): its finalizers, or a
	// stage's own patches.
	PatchPod(ctx context.Context, pod *corev1.Pod, pt types.PatchType, data []byte) error
	// DeletePod deletes the pod (grace period 0, this UID only).
	DeletePod(ctx context.Context, pod *corev1.Pod) error
}

// maxPlaysAtOnce bounds how many stages a pod plays at one instant: a
// stage with no delay that matches again after it played (writing the
// time into the status, say) would else play for ever.
const maxPlaysAtOnce = 64

// stageAPITimeout bounds each call of Options.API.
const stageAPITimeout = 30 * time.Second

// podStages is the stages for Pods in force now; with any, they play the
// lifecycle of a pod created now.
func (p *Provider) podStages() stage.Lifecycle {
	if p.opts.Stages == nil {
		return nil
	}
	return p.opts.Stages.Stages().For("v1", "Pod")
}

// matchLocked chooses the next stage of the pod at now, and when it is
// due: the pod's next step, or none if no stage matches. The caller holds
// the lock.
func (p *Provider) matchLocked(logger klog.Logger, st *simPod, now time.Time) {
	st.step, st.stage = stepNone, nil
	obj, _, err := viewLocked(st)
	if err != nil {
		logger.Error(err, "Cannot match the simulated pod against stages", "pod", klog.KObj(st.pod))
		return
	}
	s := p.podStages().Match(obj, p.rng)
	if s == nil {
		forgetView(st)
		return
	}
	d := max(s.Delay(obj, now, p.rng), 0)
	st.step, st.stage, st.stepAt = stepStage, s, now.Add(d)
	logger.V(5).Info("Simulated pod matched a stage", "pod", klog.KObj(st.pod), "stage", s.Name(), "delay", d)
}

// stageEnv is what the templates of the pod's stages see, or of the
// node's when st is nil.
func (p *Provider) stageEnv(st *simPod, at time.Time) *stage.Env {
	env := &stage.Env{
		Now: at, StartTime: p.started,
		NodeName: p.opts.NodeName, NodePort: p.opts.Port, Version: p.opts.Version,
	}
	if p.opts.Address != "" {
		env.NodeIPs = []string{p.opts.Address}
	}
	if st != nil && st.podIP != "" {
		env.PodIPs = []string{st.podIP}
	}
	return env
}

// playLocked plays the pod's stage at `at`, then matches the pod again if
// the stage changed it. The caller holds the lock and then calls
// unlockAndNotify.
func (p *Provider) playLocked(logger klog.Logger, st *simPod, at time.Time) {
	s := st.stage
	st.stage = nil
	if s == nil {
		return
	}
	logger = logger.WithValues("pod", klog.KObj(st.pod), "stage", s.Name())
	obj, raw, err := viewLocked(st)
	if err != nil {
		logger.Error(err, "Cannot play stage")
		return
	}
	actions, err := s.Next(obj, p.stageEnv(st, at))
	if err != nil {
		// As kwok: the stage is not played, the pod waits for a change.
		logger.Error(err, "Cannot play stage")
		return
	}
	var effects []func(context.Context)
	statusChanged, changed := false, false
	for _, a := range actions {
		switch {
		case a.Event != nil:
			if rec := p.opts.Events; rec != nil {
				pod, e := metaOf(st.pod), *a.Event
				effects = append(effects, func(context.Context) { rec.Event(pod, e.Type, e.Reason, e.Message) })
			}
		case a.Delete:
			api, deleting := p.opts.API, st.pod.DeletionTimestamp != nil
			if api == nil && deleting {
				// The pod controller deletes it once its final status
				// says it stopped.
				p.endStagedLocked(st, at)
				logger.V(4).Info("Simulated pod terminated by its stage")
				p.runEffects(logger, effects)
				return
			}
			if api == nil {
				logger.Info("Stage deletes a pod that is not being deleted, but the provider has no API client; skipped")
				continue
			}
			pod := metaOf(st.pod)
			effects = append(effects, func(ctx context.Context) {
				err := api.DeletePod(ctx, pod)
				if err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
					return // deleted, gone already, or replaced by a new pod
				}
				logger.Error(err, "Stage could not delete the pod")
				if deleting {
					p.endAfterFailedDelete(logger, st, at)
				}
			})
			if deleting {
				// As kwok: the stage's delete in the API is the pod's end,
				// with no final status written before it (the status is
				// what the stages made it). The provider lets it go now.
				p.removeLocked(st)
				st.step = stepNone
				logger.V(4).Info("Simulated pod deleted by its stage")
				p.runEffects(logger, effects)
				return
			}
		case a.Patch != nil:
			out, err := stage.Apply(raw, "Pod", a.Patch)
			if err != nil {
				logger.Error(err, "Cannot apply the stage's patch", "subresource", a.Patch.Subresource)
				continue
			}
			var next corev1.Pod
			if err := json.Unmarshal(out, &next); err != nil {
				logger.Error(err, "Cannot apply the stage's patch", "subresource", a.Patch.Subresource)
				continue
			}
			raw = out
			if a.Patch.Subresource == "status" {
				if !equality.Semantic.DeepEqual(st.status, next.Status) {
					st.status = next.Status
					statusChanged, changed = true, true
				}
				continue
			}
			if !equality.Semantic.DeepEqual(st.pod.ObjectMeta, next.ObjectMeta) {
				// A new pod value: the one held is shared with whoever
				// gave it and the callers of GetPod, never changed in place.
				st.pod = &corev1.Pod{TypeMeta: st.pod.TypeMeta, ObjectMeta: next.ObjectMeta, Spec: st.pod.Spec}
				changed = true
			}
			if api := p.opts.API; api != nil {
				pod, pt, data := metaOf(st.pod), a.Patch.Type, a.Patch.Data
				effects = append(effects, func(ctx context.Context) {
					if err := api.PatchPod(ctx, pod, pt, data); err != nil {
						logger.Error(err, "Stage could not patch the pod")
					}
				})
			} else {
				logger.Info("Stage patches the pod, but the provider has no API client; only its copy is changed")
			}
		}
	}
	p.runEffects(logger, effects)
	logger.V(4).Info("Simulated pod played a stage", "phase", st.status.Phase)
	if statusChanged {
		if podrules.IsFinal(st.status.Phase) && !st.finished {
			p.finishLocked(st)
		}
		p.queueNotify(st)
	}
	if !changed {
		forgetView(st)
		return // as kwok, which sees no change and so plays nothing more
	}
	// The pod as patched is the pod as it now is: the next match reads it
	// without encoding the pod again.
	if view, err := stage.NewObject(raw); err == nil {
		st.view, st.viewRaw = view, raw
	} else {
		forgetView(st)
	}
	if at.Equal(st.playsAt) {
		st.plays++
	} else {
		st.playsAt, st.plays = at, 1
	}
	if st.plays >= maxPlaysAtOnce {
		logger.Info("Simulated pod played too many stages at one instant; it waits for its next change", "plays", st.plays)
		forgetView(st)
		return
	}
	p.matchLocked(logger, st, at)
}

// viewLocked is the pod as stages see it, and its JSON, encoded once for
// as long as the pod does not change and a stage waits to play on it
// (whoever changes st.pod of a staged pod clears st.view).
func viewLocked(st *simPod) (*stage.Object, []byte, error) {
	if st.view == nil {
		raw, err := json.Marshal(st.current())
		if err != nil {
			return nil, nil, err
		}
		view, err := stage.NewObject(raw)
		if err != nil {
			return nil, nil, err
		}
		st.view, st.viewRaw = view, raw
	}
	return st.view, st.viewRaw, nil
}

// forgetView drops the pod's view once no stage waits to play on it: most
// pods wait long between changes (a Running pod, until it is deleted), and
// a view costs several times the pod it shows.
func forgetView(st *simPod) {
	st.view, st.viewRaw = nil, nil
}

// metaOf is the pod's identity, copied under the lock for an effect that
// runs without it: the provider changes its pod in place.
func metaOf(pod *corev1.Pod) *corev1.Pod {
	return &corev1.Pod{TypeMeta: pod.TypeMeta, ObjectMeta: pod.ObjectMeta}
}

// runEffects carries out, in order and in a goroutine of their own, what
// a stage does outside the provider.
func (p *Provider) runEffects(logger klog.Logger, effects []func(context.Context)) {
	if len(effects) == 0 {
		return
	}
	p.async(func() {
		for _, e := range effects {
			ctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), logger), stageAPITimeout)
			e(ctx)
			cancel()
		}
	})
}

// endStagedLocked removes a pod being deleted that a stage deleted (or
// that ended at once), releasing what it held. Its containers stop at
// `at`, as those of a pod the built-in lifecycle terminates: the pod
// controller removes a deleted pod from the API once its status says it
// has stopped, and a status still Running would keep it there. The caller
// holds the lock and then calls unlockAndNotify.
func (p *Provider) endStagedLocked(st *simPod, at time.Time) {
	p.terminateLocked(st, at)
	st.step = stepNone
}

// endAfterFailedDelete ends, with its final status, a pod being deleted
// that the provider let go when its stage deleted it, but whose delete the
// API refused: the pod controller, told the pod stopped, deletes it from
// the API itself, retrying as it retries its own writes.
func (p *Provider) endAfterFailedDelete(logger klog.Logger, st *simPod, at time.Time) {
	p.mu.Lock()
	p.notifyStoppedLocked(st, at)
	p.unlockAndNotify()
	logger.V(4).Info("Simulated pod terminated; the pod controller deletes it")
}

// stagedMetaChanged tells whether an update of the pod changes what
// stages may select on: its labels, annotations, finalizers, owners or
// deletion.
func stagedMetaChanged(old, updated *corev1.Pod) bool {
	return !equality.Semantic.DeepEqual(old.Labels, updated.Labels) ||
		!equality.Semantic.DeepEqual(old.Annotations, updated.Annotations) ||
		!equality.Semantic.DeepEqual(old.Finalizers, updated.Finalizers) ||
		!equality.Semantic.DeepEqual(old.OwnerReferences, updated.OwnerReferences) ||
		!equality.Semantic.DeepEqual(old.DeletionTimestamp, updated.DeletionTimestamp)
}

// startStagedLocked adds a pod that stages play and sets its first
// stage. The caller holds the lock, which is released.
func (p *Provider) startStagedLocked(ctx context.Context, st *simPod, now time.Time) error {
	logger := klog.FromContext(ctx)
	p.pods[key(st.pod.Namespace, st.pod.Name)] = st
	p.used.Add(st.req)
	p.volumesAttachedLocked(logger, st) // resolves its volumes: in use from now
	p.matchLocked(logger, st, now)
	gen, pending := st.gen, st.step != stepNone
	p.unlockAndNotify()
	logger.V(4).Info("Simulated pod follows its stages", "pod", klog.KObj(st.pod), "podIP", st.podIP)
	if pending {
		p.schedule(logger, st, gen)
	}
	return nil
}

// rematchLater replaces the pod's schedule by its stage from now, armed
// in a goroutine of its own. The caller holds the lock.
func (p *Provider) rematchLater(logger klog.Logger, st *simPod, now time.Time) {
	st.gen++
	old := cancelLocked(&st.timer)
	p.matchLocked(logger, st, now)
	gen := st.gen
	p.async(func() {
		stopTimer(old)
		p.schedule(logger, st, gen)
	})
}

// deleteStagedLocked is DeletePod for a pod that stages play: with no
// grace left the pod ends at once (the API has deleted it, or was told
// to at once); else it is matched again, deleted, and its stages (kwok's
// pod-delete) say when it ends. The caller holds the lock, which is
// released.
func (p *Provider) deleteStagedLocked(logger klog.Logger, st *simPod, pod *corev1.Pod, now time.Time) error {
	forgetView(st) // DeletePod has set its deletion
	g, ok := podrules.GracePeriod(pod)
	if ok && g <= 0 || len(p.podStages()) == 0 {
		// Gone from the API, deleted at once, or no stage left to play
		// (the cluster's were all deleted): ended now.
		st.gen++
		old := cancelLocked(&st.timer)
		p.endStagedLocked(st, now)
		p.unlockAndNotify()
		stopTimer(old)
		logger.V(4).Info("Simulated pod terminated at once", "pod", klog.KObj(pod))
		return nil
	}
	if st.deleting {
		p.mu.Unlock()
		return nil
	}
	st.deleting = true
	st.gen++
	old := cancelLocked(&st.timer)
	p.matchLocked(logger, st, now)
	gen, pending := st.gen, st.step != stepNone
	p.mu.Unlock()
	stopTimer(old)
	if pending {
		p.schedule(logger, st, gen)
	}
	return nil
}
