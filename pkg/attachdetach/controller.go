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

// World is what attach/detach knows of the managed nodes: the desired and
// actual states of world, and the populator that fills them from
// informers. Providers ask it which volumes a pod needs attached and
// whether they are; the Controller built on it drives them, and runs the
// populator.
type World struct {
	dsw       *DesiredStateOfWorld
	asw       *ActualStateOfWorld
	plugins   Plugins
	populator *Populator
	clock     clock.WithTicker
}

// NewWorld returns the states of world of the volumes that pods on the
// nodes manages accepts need, filled through informers and resolved with
// plugins. It does no I/O; the Controller built on it runs the populator.
func NewWorld(plugins Plugins, informers Informers, manages func(node string) bool, opts PopulatorOptions) (*World, error) {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	dsw := NewDesiredStateOfWorld()
	asw := NewActualStateOfWorld(opts.Clock)
	populator, err := NewPopulator(dsw, asw, plugins, informers, manages, opts)
	if err != nil {
		return nil, err
	}
	return &World{dsw: dsw, asw: asw, plugins: plugins, populator: populator, clock: opts.Clock}, nil
}

// DesiredState is the desired state of world.
func (w *World) DesiredState() *DesiredStateOfWorld { return w.dsw }

// ActualState is the actual state of world: what is attached where, and
// what is reported as attached (VolumesReportedAttached).
func (w *World) ActualState() *ActualStateOfWorld { return w.asw }

// PodVolumes returns the names of the volumes of pod that must be attached
// to its node before it runs; an error names the volumes that cannot be
// resolved yet. Providers wait for these before they start a pod.
func (w *World) PodVolumes(pod *corev1.Pod) ([]corev1.UniqueVolumeName, error) {
	return w.populator.PodVolumes(pod)
}

// IsVolumeAttachedToNode tells whether the volume is attached to node.
func (w *World) IsVolumeAttachedToNode(volume corev1.UniqueVolumeName, node types.NodeName) bool {
	return w.asw.IsVolumeAttachedToNode(volume, node)
}

// Controller is attach/detach for the managed nodes, assembled: a World,
// the executor that attaches and detaches with its plugins, and the
// reconciler. The agent runs one for all its nodes.
type Controller struct {
	world      *World
	reconciler *Reconciler
}

// NewController returns a controller that drives world: it attaches and
// detaches with world's plugins, writes node status.volumesAttached through
// status and sends events to recorder. The reconciler's clock defaults to
// world's. It does no I/O; Run starts it.
func NewController(world *World, status AttachedVolumesWriter, recorder record.EventRecorder, opts ReconcilerOptions) (*Controller, error) {
	if opts.Clock == nil {
		opts.Clock = world.clock
	}
	nodes := world.populator.NodeLister()
	executor := NewExecutor(world.asw, world.plugins, nodes, recorder, ExecutorOptions{Clock: opts.Clock})
	reconciler, err := NewReconciler(world.dsw, world.asw, executor, NewStatusUpdater(world.asw, status), nodes, recorder, opts)
	if err != nil {
		return nil, err
	}
	return &Controller{world: world, reconciler: reconciler}, nil
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
	go func() { errc <- c.world.populator.Run(ctx) }()
	select {
	case <-c.world.populator.Synced():
	case err := <-errc:
		return fmt.Errorf("volume controller: %w", err)
	}
	rerr := c.reconciler.Run(ctx)
	return errors.Join(rerr, <-errc)
}
