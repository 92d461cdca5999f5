package attachdetach

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// NodeStatusUpdater writes the volumes the actual state of world reports as
// attached into the status of the nodes whose report changed. A failed
// write must leave the node marked for an update.
type NodeStatusUpdater interface {
	// UpdateNodeStatuses writes every node whose report changed.
	UpdateNodeStatuses(ctx context.Context) error
	// UpdateNodeStatusForNode writes node if its report changed, and returns
	// once the write is done.
	UpdateNodeStatusForNode(ctx context.Context, node types.NodeName) error
}

// AttachedVolumesWriter sets a node's status.volumesAttached. It returns once
// the Node in the API lists exactly volumes, or an error (NotFound when the
// Node does not exist). It is called whenever the list may have changed, at
// least once per node at start; a write that would change nothing may be
// skipped. The node loop implements it with its status patch.
type AttachedVolumesWriter interface {
	SetVolumesAttached(ctx context.Context, node types.NodeName, volumes []corev1.AttachedVolume) error
}

// AttachedVolumesWriterFunc is a function that is an AttachedVolumesWriter.
type AttachedVolumesWriterFunc func(ctx context.Context, node types.NodeName, volumes []corev1.AttachedVolume) error

// SetVolumesAttached calls f.
func (f AttachedVolumesWriterFunc) SetVolumesAttached(ctx context.Context, node types.NodeName, volumes []corev1.AttachedVolume) error {
	return f(ctx, node, volumes)
}

// StatusUpdater is the NodeStatusUpdater that writes through an
// AttachedVolumesWriter.
type StatusUpdater struct {
	asw    *ActualStateOfWorld
	writer AttachedVolumesWriter
}

// NewStatusUpdater returns a status updater for the reports of asw.
func NewStatusUpdater(asw *ActualStateOfWorld, w AttachedVolumesWriter) *StatusUpdater {
	return &StatusUpdater{asw: asw, writer: w}
}

// UpdateNodeStatuses writes every node whose report changed and returns the
// errors of those that failed (they stay marked for an update).
func (s *StatusUpdater) UpdateNodeStatuses(ctx context.Context) error {
	var errs []error
	for node, volumes := range s.asw.GetVolumesToReportAttached() {
		if err := s.write(ctx, node, volumes); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// UpdateNodeStatusForNode writes node if its report changed.
func (s *StatusUpdater) UpdateNodeStatusForNode(ctx context.Context, node types.NodeName) error {
	needed, volumes := s.asw.GetVolumesToReportAttachedForNode(node)
	if !needed {
		return nil
	}
	return s.write(ctx, node, volumes)
}

func (s *StatusUpdater) write(ctx context.Context, node types.NodeName, volumes []corev1.AttachedVolume) error {
	err := s.writer.SetVolumesAttached(ctx, node, volumes)
	switch {
	case err == nil:
		return nil
	case apierrors.IsNotFound(err):
		// A node that does not exist has no status to write; it is written
		// when the node comes (the report is marked again then).
		klog.FromContext(ctx).V(2).Info("Node not found; attached volumes not written", "node", node)
		return nil
	}
	s.asw.SetNodeStatusUpdateNeeded(node)
	return fmt.Errorf("write attached volumes of node %q: %w", node, err)
}
