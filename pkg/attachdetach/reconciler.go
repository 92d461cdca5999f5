package attachdetach

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Defaults of ReconcilerOptions.
const (
	DefaultLoopPeriod        = 100 * time.Millisecond
	DefaultMaxWaitForUnmount = 6 * time.Minute
	DefaultSyncPeriod        = time.Minute
)

// minSyncPeriod is the shortest sync period; a shorter one disables sync.
const minSyncPeriod = time.Second

// OperationExecutor starts attach, detach and verify operations; Executor
// is the one to use. In the checks, an empty node matches every node.
type OperationExecutor interface {
	IsOperationPending(volume corev1.UniqueVolumeName, node types.NodeName) bool
	IsOperationSafeToRetry(volume corev1.UniqueVolumeName, node types.NodeName, operation string) bool
	AttachVolume(ctx context.Context, v VolumeToAttach) error
	DetachVolume(ctx context.Context, v AttachedVolume, verifySafe bool) error
	VerifyVolumesAreAttached(ctx context.Context, volumesPerNode map[types.NodeName][]AttachedVolume)
	// Wait blocks until no operation runs.
	Wait()
}

// ReconcilerOptions configures a Reconciler; zero fields take defaults.
type ReconcilerOptions struct {
	// LoopPeriod is the time between two reconcile passes (default 100ms).
	LoopPeriod time.Duration
	// MaxWaitForUnmount is how long a volume that should be detached from an
	// unhealthy node may stay mounted before it is detached anyway
	// (default 6m).
	MaxWaitForUnmount time.Duration
	// SyncPeriod is how often the plugins are asked whether attached volumes
	// are still attached (default 1m). A period under one second disables
	// the check, as does DisableSync.
	SyncPeriod  time.Duration
	DisableSync bool
	// Clock is the time source (default the real clock).
	Clock clock.WithTicker
}

func (o *ReconcilerOptions) validate() error {
	errs := []error{
		defaultDuration(&o.LoopPeriod, "loopPeriod", DefaultLoopPeriod),
		defaultDuration(&o.MaxWaitForUnmount, "maxWaitForUnmount", DefaultMaxWaitForUnmount),
		defaultDuration(&o.SyncPeriod, "syncPeriod", DefaultSyncPeriod),
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	return errors.Join(errs...)
}

// Reconciler drives the actual state of world towards the desired one:
// every loop period it starts the detaches of volumes no pod needs any more,
// then the attaches of volumes pods need, then writes the node statuses
// whose reports changed; every sync period it has the plugins verify that
// attached volumes are still attached.
type Reconciler struct {
	dsw      *DesiredStateOfWorld
	asw      *ActualStateOfWorld
	exec     OperationExecutor
	status   NodeStatusUpdater
	nodes    NodeGetter
	recorder record.EventRecorder
	opts     ReconcilerOptions
	metrics  *metrics

	mu       sync.Mutex // one pass at a time
	lastSync time.Time
}

// NewReconciler returns a reconciler of dsw and asw that starts operations
// with exec, writes node status through status, reads node health and
// taints from nodes and sends Multi-Attach events to recorder.
func NewReconciler(dsw *DesiredStateOfWorld, asw *ActualStateOfWorld, exec OperationExecutor, status NodeStatusUpdater,
	nodes NodeGetter, recorder record.EventRecorder, opts ReconcilerOptions) (*Reconciler, error) {
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("invalid reconciler options: %w", err)
	}
	return &Reconciler{
		dsw:      dsw,
		asw:      asw,
		exec:     exec,
		status:   status,
		nodes:    nodes,
		recorder: recorder,
		opts:     opts,
		metrics:  newMetrics(),
		lastSync: opts.Clock.Now(),
	}, nil
}

// Run reconciles every loop period until ctx is done, then waits for the
// operations it started to return.
func (r *Reconciler) Run(ctx context.Context) error {
	defer r.exec.Wait()
	timer := r.opts.Clock.NewTimer(r.opts.LoopPeriod)
	defer timer.Stop()
	for {
		r.Reconcile(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C():
			timer.Reset(r.opts.LoopPeriod)
		}
	}
}

// Reconcile runs one pass of the loop: detaches, attaches, node statuses,
// and the verification of attached volumes when the sync period has passed.
// Operations it starts run on after it returns.
func (r *Reconciler) Reconcile(ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	logger := klog.FromContext(ctx)
	r.reconcile(ctx)
	switch {
	case r.opts.DisableSync:
		logger.V(5).Info("Verification of attached volumes is disabled")
	case r.opts.SyncPeriod < minSyncPeriod:
		logger.V(5).Info("Verification of attached volumes is disabled by a sync period under one second", "syncPeriod", r.opts.SyncPeriod)
	case r.opts.Clock.Since(r.lastSync) > r.opts.SyncPeriod:
		logger.V(5).Info("Verifying that attached volumes are still attached")
		r.exec.VerifyVolumesAreAttached(ctx, r.asw.GetAttachedVolumesPerNode())
		r.lastSync = r.opts.Clock.Now()
	}
}

func (r *Reconciler) reconcile(ctx context.Context) {
	// Detach first, so that a volume that moves with its pod to another
	// node is free by the time it is attached there.
	for _, av := range r.asw.GetAttachedVolumes() {
		if !r.dsw.VolumeExists(av.VolumeName, av.NodeName) {
			r.detach(ctx, av)
		}
	}
	r.attachDesiredVolumes(ctx)
	if err := r.status.UpdateNodeStatuses(ctx); err != nil {
		klog.FromContext(ctx).Info("Warning: cannot update node statuses", "err", err)
	}
}

// detach starts the detach of an attachment no pod needs, when it is safe
// or has waited long enough.
func (r *Reconciler) detach(ctx context.Context, av AttachedVolume) {
	logger := klog.FromContext(ctx).WithValues("volume", av.VolumeName, "node", av.NodeName)

	// Check for a running or backing-off operation before anything else:
	// the other checks could pass while an operation finishes meanwhile,
	// and the volume would be detached twice.
	if !r.exec.IsOperationSafeToRetry(av.VolumeName, operationNode(av.Spec, av.NodeName), OperationDetach) {
		logger.V(10).Info("An operation on the volume runs or is in backoff; detach not started")
		return
	}
	// A detach that finished between the listing of attached volumes and
	// the check above has already removed the attachment: look again.
	if r.asw.GetAttachState(av.VolumeName, av.NodeName) == AttachStateDetached {
		logger.V(5).Info("Volume already detached")
		return
	}

	elapsed, err := r.asw.SetDetachRequestTime(av.VolumeName, av.NodeName)
	if err != nil {
		logger.Error(err, "Cannot set the detach request time; detach not started")
		return
	}
	timeout := elapsed > r.opts.MaxWaitForUnmount

	healthy, outOfService, err := r.nodeState(av.NodeName)
	if err != nil {
		logger.Error(err, "Cannot read node health and taints; taking it as unhealthy")
	}
	forceDetach := !healthy && timeout
	if av.MountedByNode && !forceDetach && !outOfService {
		logger.V(5).Info("Volume is still mounted; detach waits")
		return
	}

	// Take the volume out of the node's status before detaching it, so that
	// the node sees it go first; put it back if that or the detach fails.
	if err := r.asw.RemoveVolumeFromReportAsAttached(av.VolumeName, av.NodeName); err != nil {
		logger.V(5).Info("Volume was not reported as attached", "err", err)
	}
	if err := r.status.UpdateNodeStatusForNode(ctx, av.NodeName); err != nil {
		logger.Error(err, "Cannot update node status; detach not started")
		r.asw.AddVolumeToReportAsAttached(av.VolumeName, av.NodeName)
		return
	}

	verifySafe := !(timeout || outOfService)
	if err := r.exec.DetachVolume(ctx, av, verifySafe); err != nil {
		// The operation did not start; the executor puts the volume back
		// itself only when a started operation fails.
		r.asw.AddVolumeToReportAsAttached(av.VolumeName, av.NodeName)
		if !expectedStartError(err) {
			logger.Error(err, "Cannot start detach")
		}
		return
	}
	switch {
	case verifySafe:
		logger.Info("Detach started")
	case timeout:
		r.metrics.forcedDetaches.WithLabelValues(ForceDetachReasonTimeout).Inc()
		logger.Info("Detach started: the volume may still be mounted but maxWaitForUnmount passed; forcing", "maxWaitForUnmount", r.opts.MaxWaitForUnmount)
	default:
		r.metrics.forcedDetaches.WithLabelValues(ForceDetachReasonOutOfService).Inc()
		logger.Info("Detach started: the node has the out-of-service taint; forcing")
	}
}

// nodeState returns whether node is Ready and whether it has the
// out-of-service taint. A node that cannot be read is unhealthy.
func (r *Reconciler) nodeState(name types.NodeName) (healthy, outOfService bool, err error) {
	node, err := r.nodes.Get(string(name))
	if err != nil {
		return false, false, err
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			healthy = c.Status == corev1.ConditionTrue
		}
	}
	for _, t := range node.Spec.Taints {
		if t.Key == corev1.TaintNodeOutOfService {
			outOfService = true
		}
	}
	return healthy, outOfService, nil
}

func expectedStartError(err error) bool {
	return IsBackoff(err) || errors.Is(err, ErrOperationPending)
}

// attachDesiredVolumes starts the attaches of volumes pods need.
func (r *Reconciler) attachDesiredVolumes(ctx context.Context) {
	for _, v := range r.dsw.GetVolumesToAttach() {
		logger := klog.FromContext(ctx).WithValues("volume", v.VolumeName, "node", v.NodeName)
		if r.exec.IsOperationPending(v.VolumeName, operationNode(v.Spec, v.NodeName)) {
			logger.V(10).Info("An operation on the volume runs; attach not started")
			continue
		}
		// Read the actual state only after the pending check: a finishing
		// operation updates it before it stops being pending.
		if r.asw.GetAttachState(v.VolumeName, v.NodeName) == AttachStateAttached {
			// Wanted again: whatever detach was waiting is off.
			r.asw.ResetDetachRequestTime(v.VolumeName, v.NodeName)
			continue
		}
		if !v.MultiAttachAllowed() {
			if nodes := r.asw.GetNodesForAttachedVolume(v.VolumeName); len(nodes) > 0 {
				if !v.MultiAttachErrorReported {
					r.reportMultiAttachError(ctx, v, nodes)
					r.dsw.SetMultiAttachError(v.VolumeName, v.NodeName)
				}
				continue
			}
		}
		if err := r.exec.AttachVolume(ctx, v); err != nil {
			if !expectedStartError(err) {
				logger.Error(err, "Cannot start attach")
			}
			continue
		}
		logger.Info("Attach started")
	}
}

// reportMultiAttachError tells each pod waiting for v that the volume is
// attached to another node, naming the pods that use it there that are in
// the pod's own namespace and counting the others: a user of one namespace
// must not learn pod names of another.
func (r *Reconciler) reportMultiAttachError(ctx context.Context, v VolumeToAttach, nodes []types.NodeName) {
	var others []types.NodeName
	for _, n := range nodes {
		if n != v.NodeName {
			others = append(others, n)
		}
	}
	users := r.dsw.GetVolumePodsOnNodes(others, v.VolumeName)
	logger := klog.FromContext(ctx)

	if len(users) == 0 {
		// The pods that used it are gone; the volume is not detached yet.
		msg := volumeMessage("Multi-Attach error", v.Spec, "Volume is already exclusively attached to one node and can't be attached to another")
		for _, pod := range v.ScheduledPods {
			r.recorder.Event(pod, corev1.EventTypeWarning, EventFailedAttachVolume, msg)
		}
		logger.Info("Multi-Attach error: volume is already exclusively attached to another node", "volume", v.VolumeName, "node", v.NodeName, "attachedTo", others)
		return
	}

	for _, pod := range v.ScheduledPods {
		var local []string
		elsewhere := 0
		for _, u := range users {
			if u.Namespace == pod.Namespace {
				local = append(local, u.Name)
			} else {
				elsewhere++
			}
		}
		var msg string
		switch {
		case len(local) > 0 && elsewhere > 0:
			msg = fmt.Sprintf("Volume is already used by pod(s) %s and %d pod(s) in different namespaces", strings.Join(local, ", "), elsewhere)
		case len(local) > 0:
			msg = fmt.Sprintf("Volume is already used by pod(s) %s", strings.Join(local, ", "))
		default:
			msg = fmt.Sprintf("Volume is already used by %d pod(s) in different namespaces", elsewhere)
		}
		r.recorder.Event(pod, corev1.EventTypeWarning, EventFailedAttachVolume, volumeMessage("Multi-Attach error", v.Spec, msg))
	}
	logger.Info("Multi-Attach error: volume is already used by pods on other nodes", "volume", v.VolumeName, "node", v.NodeName,
		"pods", klog.KObjSlice(users), "attachedTo", others)
}
