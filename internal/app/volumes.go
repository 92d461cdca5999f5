package app

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"github.com/nodelet/nodelet/pkg/attachdetach"
	simattach "github.com/nodelet/nodelet/pkg/attachdetach/simattacher"
	"github.com/nodelet/nodelet/pkg/config"
	"github.com/nodelet/nodelet/pkg/csi"
)

// ManagedAttachDetachAnnotation on a Node says whether the cluster's
// attach/detach controller attaches its volumes ("true") or the node does
// ("false", nodelet's own controller).
const ManagedAttachDetachAnnotation = "volumes.kubernetes.io/controller-managed-attach-detach"

// newVolumeWorld builds attach/detach's states of world of the agent's
// nodes, which the providers ask about pods' volumes: it reads pods and
// nodes from the agent's own factories, claims, volumes, CSI drivers and
// volume attachments from the cluster-wide one. The informers it asks for
// are started by the caller.
func newVolumeWorld(client kubernetes.Interface, inf agentInformers, names []string, cfg *config.Config) (*attachdetach.World, error) {
	drivers := inf.cluster.Storage().V1().CSIDrivers()
	attachRequired := attachdetach.CSIDriverAttachRequired(drivers.Lister())
	var plugin attachdetach.Plugin
	switch cfg.AttachDetach.Attacher {
	case config.AttacherSim:
		p, err := simattach.New(simattach.Options{
			Latency:        cfg.AttachDetach.SimLatency.Duration,
			FailureRate:    cfg.AttachDetach.SimFailureRate,
			AttachRequired: attachRequired,
		})
		if err != nil {
			return nil, err
		}
		plugin = p
	default:
		p, err := csi.New(client, csi.Options{
			CSIDrivers:        drivers.Lister(),
			VolumeAttachments: inf.cluster.Storage().V1().VolumeAttachments().Lister(),
		})
		if err != nil {
			return nil, err
		}
		plugin = p
	}
	managed := make(map[string]bool, len(names))
	for _, n := range names {
		managed[n] = true
	}
	w, err := attachdetach.NewWorld(attachdetach.Plugins{plugin}, attachdetach.Informers{
		Pods:    inf.pods.Core().V1().Pods().Informer(),
		Nodes:   inf.nodes.Core().V1().Nodes().Informer(),
		Claims:  inf.cluster.Core().V1().PersistentVolumeClaims().Informer(),
		Volumes: inf.cluster.Core().V1().PersistentVolumes().Informer(),
	}, func(node string) bool { return managed[node] }, attachdetach.PopulatorOptions{})
	if err != nil {
		return nil, fmt.Errorf("volume controller: %w", err)
	}
	return w, nil
}

// newVolumeController builds the attach/detach controller that drives
// world and reports attached volumes through writer (the node controller).
func newVolumeController(world *attachdetach.World, writer attachdetach.AttachedVolumesWriter, recorder record.EventRecorder,
	cfg *config.Config) (*attachdetach.Controller, error) {
	c, err := attachdetach.NewController(world, writer, recorder, attachdetach.ReconcilerOptions{
		LoopPeriod:        cfg.AttachDetach.ReconcilerLoopPeriod.Duration,
		MaxWaitForUnmount: cfg.AttachDetach.MaxWaitForUnmount.Duration,
		SyncPeriod:        cfg.AttachDetach.ReconcilerSyncPeriod.Duration,
	})
	if err != nil {
		return nil, fmt.Errorf("volume controller: %w", err)
	}
	return c, nil
}

// registerVolumeMetrics adds the volume controller's metrics to reg.
func registerVolumeMetrics(reg prometheus.Registerer, c *attachdetach.Controller) error {
	if c == nil {
		return nil
	}
	if err := c.Register(reg); err != nil {
		return fmt.Errorf("register volume metrics: %w", err)
	}
	return nil
}
