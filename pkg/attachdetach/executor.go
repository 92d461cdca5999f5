package attachdetach

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Event reasons, as the kubelet and the attach/detach controller give them.
const (
	EventFailedAttachVolume     = "FailedAttachVolume"
	EventSuccessfulAttachVolume = "SuccessfulAttachVolume"
)

// NodeGetter gets a Node by name; a NodeLister is one. NotFound errors must
// satisfy apierrors.IsNotFound.
type NodeGetter interface {
	Get(name string) (*corev1.Node, error)
}

// ExecutorOptions configures an Executor; zero fields take defaults.
type ExecutorOptions struct {
	// Clock times the backoff of failed operations (default the real clock).
	Clock clock.PassiveClock
}

// Executor starts attach, detach and verify operations on goroutines, at
// most one per volume (per volume and node for volumes that may attach to
// several nodes), with exponential backoff after a failure: 500 ms,
// doubling to 2 min 2 s. Operations record their outcome in the actual
// state of world.
type Executor struct {
	asw      *ActualStateOfWorld
	plugins  Plugins
	nodes    NodeGetter
	recorder record.EventRecorder
	ops      *pendingOperations
}

// NewExecutor returns an executor that attaches with plugins, records
// outcomes in asw, reads node status (volumesInUse) from nodes before a
// detach that must be safe, and sends attach events on pods to recorder.
func NewExecutor(asw *ActualStateOfWorld, plugins Plugins, nodes NodeGetter, recorder record.EventRecorder, opts ExecutorOptions) *Executor {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &Executor{
		asw:      asw,
		plugins:  plugins,
		nodes:    nodes,
		recorder: recorder,
		ops:      newPendingOperations(opts.Clock),
	}
}

// operationNode is the node part of the operation key of a volume on node:
// the node when the volume may attach to several nodes, else none, so that
// one operation on the volume excludes every other.
func operationNode(spec *Spec, node types.NodeName) types.NodeName {
	if spec.MultiAttachAllowed() {
		return node
	}
	return ""
}

// IsOperationPending reports whether an operation on volume runs; an empty
// node matches every node.
func (e *Executor) IsOperationPending(volume corev1.UniqueVolumeName, node types.NodeName) bool {
	return e.ops.isPending(operationKey{volume, node})
}

// IsOperationSafeToRetry reports whether operation could start on volume
// now: nothing runs on it and the last one of that name is not in backoff.
// An empty node matches every node.
func (e *Executor) IsOperationSafeToRetry(volume corev1.UniqueVolumeName, node types.NodeName, operation string) bool {
	return e.ops.isSafeToRetry(operationKey{volume, node}, operation)
}

// AttachVolume starts attaching v. It returns ErrOperationPending or a
// *BackoffError when it cannot start now. On failure the pair becomes
// uncertain in the actual state of world and each pod waiting for it gets
// a FailedAttachVolume event.
func (e *Executor) AttachVolume(ctx context.Context, v VolumeToAttach) error {
	plugin, err := e.plugins.FindAttachable(v.Spec)
	if err != nil {
		return err
	}
	if plugin == nil {
		return fmt.Errorf("attach volume %q: %w", v.VolumeName, errNoPlugin)
	}
	key := operationKey{v.VolumeName, operationNode(v.Spec, v.NodeName)}
	return e.ops.run(key, OperationAttach, func() error {
		logger := klog.FromContext(ctx).WithValues("volume", v.VolumeName, "node", v.NodeName)
		if err := plugin.Attach(ctx, v.Volume(), v.NodeName); err != nil {
			if merr := e.asw.MarkVolumeAsUncertain(v.Volume(), v.NodeName); merr != nil {
				logger.Error(merr, "Cannot mark volume as uncertain after a failed attach")
			}
			msg := volumeMessage("AttachVolume.Attach failed", v.Spec, ": "+err.Error())
			for _, pod := range v.ScheduledPods {
				e.recorder.Event(pod, corev1.EventTypeWarning, EventFailedAttachVolume, msg)
			}
			logger.Error(err, "Attach failed")
			return fmt.Errorf("attach volume %q to node %q: %w", v.VolumeName, v.NodeName, err)
		}
		if err := e.asw.MarkVolumeAsAttached(v.Volume(), v.NodeName); err != nil {
			return fmt.Errorf("mark volume %q attached to node %q: %w", v.VolumeName, v.NodeName, err)
		}
		msg := volumeMessage("AttachVolume.Attach succeeded", v.Spec, "")
		for _, pod := range v.ScheduledPods {
			e.recorder.Event(pod, corev1.EventTypeNormal, EventSuccessfulAttachVolume, msg)
		}
		logger.Info("Attached volume")
		return nil
	})
}

// DetachVolume starts detaching v. With verifySafe it first checks that
// the node's status does not list the volume in use. It returns
// ErrOperationPending or a *BackoffError when it cannot start now. On
// failure the pair is reported as attached again; on success it leaves the
// actual state of world.
func (e *Executor) DetachVolume(ctx context.Context, v AttachedVolume, verifySafe bool) error {
	plugin := e.plugins.FindSupporting(v.Spec)
	if plugin == nil {
		return fmt.Errorf("detach volume %q: %w", v.VolumeName, errNoPlugin)
	}
	key := operationKey{v.VolumeName, operationNode(v.Spec, v.NodeName)}
	return e.ops.run(key, OperationDetach, func() error {
		logger := klog.FromContext(ctx).WithValues("volume", v.VolumeName, "node", v.NodeName)
		var err error
		if verifySafe {
			err = e.verifySafeToDetach(v)
		}
		if err == nil {
			err = plugin.Detach(ctx, v.Volume(), v.NodeName)
		}
		if err != nil {
			e.asw.AddVolumeToReportAsAttached(v.VolumeName, v.NodeName)
			logger.Error(err, "Detach failed")
			return fmt.Errorf("detach volume %q from node %q: %w", v.VolumeName, v.NodeName, err)
		}
		e.asw.MarkVolumeAsDetached(v.VolumeName, v.NodeName)
		logger.Info("Detached volume")
		return nil
	})
}

// verifySafeToDetach fails while the node's status lists the volume in use.
// A node that is gone uses nothing.
func (e *Executor) verifySafeToDetach(v AttachedVolume) error {
	node, err := e.nodes.Get(string(v.NodeName))
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("get node %q: %w", v.NodeName, err)
	}
	if slices.Contains(node.Status.VolumesInUse, v.VolumeName) {
		return fmt.Errorf("volume %q is still in use by node %q, according to its status", v.VolumeName, v.NodeName)
	}
	return nil
}

// VerifyVolumesAreAttached asks the plugins, node by node, whether the
// volumes are still attached, and marks those that are not as detached.
// One verification per node runs at a time.
func (e *Executor) VerifyVolumesAreAttached(ctx context.Context, volumesPerNode map[types.NodeName][]AttachedVolume) {
	logger := klog.FromContext(ctx)
	for node, attached := range volumesPerNode {
		// Keyed apart from every volume, one verification per node.
		key := operationKey{volume: corev1.UniqueVolumeName("verify:" + string(node)), node: node}
		err := e.ops.run(key, OperationVerify, func() error {
			e.verifyNode(ctx, node, attached)
			return nil
		})
		if err != nil {
			logger.V(4).Info("Verification of attached volumes not started", "node", node, "err", err)
		}
	}
}

func (e *Executor) verifyNode(ctx context.Context, node types.NodeName, attached []AttachedVolume) {
	logger := klog.FromContext(ctx).WithValues("node", node)
	byPlugin := make([][]Volume, len(e.plugins))
	for _, av := range attached {
		i := slices.IndexFunc(e.plugins, func(p Plugin) bool { return p.CanSupport(av.Spec) })
		if i < 0 {
			logger.Info("No plugin supports an attached volume; cannot verify it", "volume", av.VolumeName)
			continue
		}
		byPlugin[i] = append(byPlugin[i], av.Volume())
	}
	for i, p := range e.plugins {
		if len(byPlugin[i]) == 0 {
			continue
		}
		res, err := p.VolumesAreAttached(ctx, byPlugin[i], node)
		if err != nil {
			logger.Error(err, "Cannot verify that volumes are attached", "plugin", p.Name())
			continue
		}
		for name, ok := range res {
			if !ok {
				e.asw.MarkVolumeAsDetached(name, node)
				logger.V(1).Info("Volume is no longer attached; marked as detached", "volume", name)
			}
		}
	}
}

// Wait blocks until no operation runs.
func (e *Executor) Wait() { e.ops.wait() }

// volumeMessage is the text of an event about spec's volume, in the form the
// attach/detach controller uses: `<prefix> for volume "<name>" <suffix>`.
func volumeMessage(prefix string, spec *Spec, suffix string) string {
	return strings.TrimSpace(fmt.Sprintf("%s for volume %q %s", prefix, spec.Name(), suffix))
}
