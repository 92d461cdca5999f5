package attachdetach

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
)

// Options configures a Controller; zero fields take defaults.
type Options struct {
	Reconciler ReconcilerOptions
	Populator  PopulatorOptions
	// Clock is the time source of every part whose options leave it unset
	// (default the real clock).
	Clock clock.WithTicker
}

// Controller is attach/detach for the managed nodes, assembled: the states
// of world, the populator that fills them from informers, the executor and
// the reconciler. The agent runs one for all its nodes.
type Controller struct {
	dsw        *DesiredStateOfWorld
	asw        *ActualStateOfWorld
	populator  *Populator
	executor   *Executor
	reconciler *Reconciler
}

// NewController returns a controller that attaches with plugins the
// volumes that pods on the nodes manages accepts need, reads the API
// through informers, writes node status.volumesAttached through status and
// sends events to recorder. It does no I/O; Run starts it.
func NewController(plugins Plugins, informers Informers, manages func(node string) bool,
	status AttachedVolumesWriter, recorder record.EventRecorder, opts Options) (*Controller, error) {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Reconciler.Clock == nil {
		opts.Reconciler.Clock = opts.Clock
	}
	if opts.Populator.Clock == nil {
		opts.Populator.Clock = opts.Clock
	}
	dsw := NewDesiredStateOfWorld()
	asw := NewActualStateOfWorld(opts.Clock)
	populator, err := NewPopulator(dsw, asw, plugins, informers, manages, opts.Populator)
	if err != nil {
		return nil, err
	}
	nodes := populator.NodeLister()
	executor := NewExecutor(asw, plugins, nodes, recorder, ExecutorOptions{Clock: opts.Clock})
	reconciler, err := NewReconciler(dsw, asw, executor, NewStatusUpdater(asw, status), nodes, recorder, opts.Reconciler)
	if err != nil {
		return nil, err
	}
	return &Controller{dsw: dsw, asw: asw, populator: populator, executor: executor, reconciler: reconciler}, nil
}

// DesiredState is the desired state of world.
func (c *Controller) DesiredState() *DesiredStateOfWorld { return c.dsw }

// ActualState is the actual state of world. The node loop reads the
// volumes to report as attached from it (VolumesReportedAttached), the
// mount side whether a volume is attached (IsVolumeAttachedToNode).
func (c *Controller) ActualState() *ActualStateOfWorld { return c.asw }

// PodVolumes returns the names of the volumes of pod that must be attached
// to its node before it runs; an error names the volumes that cannot be
// resolved yet. Providers wait for these before they start a pod.
func (c *Controller) PodVolumes(pod *corev1.Pod) ([]corev1.UniqueVolumeName, error) {
	return c.populator.PodVolumes(pod)
}

// IsVolumeAttachedToNode tells whether the volume is attached to node.
func (c *Controller) IsVolumeAttachedToNode(volume corev1.UniqueVolumeName, node types.NodeName) bool {
	return c.asw.IsVolumeAttachedToNode(volume, node)
}

// Register adds the controller's metrics to reg.
func (c *Controller) Register(reg prometheus.Registerer) error {
	return c.reconciler.Register(reg)
}

// Run starts the populator, and the reconciler once the populator has
// filled both states of world from synced caches, and returns when ctx is
// done and the operations started have returned.
func (c *Controller) Run(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- c.populator.Run(ctx) }()
	select {
	case <-c.populator.Synced():
	case err := <-errc:
		return fmt.Errorf("volume controller: %w", err)
	}
	rerr := c.reconciler.Run(ctx)
	return errors.Join(rerr, <-errc)
}
