package app

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
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

// volumeInformers are the informers attach/detach reads: pods and nodes
// from the agent's own factories, claims, volumes, CSI drivers and volume
// attachments from a cluster-wide one.
type volumeInformers struct {
	pods, nodes informers.SharedInformerFactory
	cluster     informers.SharedInformerFactory
}

// newVolumeController builds the attach/detach controller of the agent's
// nodes, which reports attached volumes through writer. The informers it
// asks for are started by the caller.
func newVolumeController(client kubernetes.Interface, inf volumeInformers, names []string, writer attachdetach.AttachedVolumesWriter,
	recorder record.EventRecorder, cfg *config.Config) (*attachdetach.Controller, error) {
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
	c, err := attachdetach.NewController(attachdetach.Plugins{plugin}, attachdetach.Informers{
		Pods:    inf.pods.Core().V1().Pods().Informer(),
		Nodes:   inf.nodes.Core().V1().Nodes().Informer(),
		Claims:  inf.cluster.Core().V1().PersistentVolumeClaims().Informer(),
		Volumes: inf.cluster.Core().V1().PersistentVolumes().Informer(),
	}, func(node string) bool { return managed[node] }, writer, recorder, attachdetach.Options{
		Reconciler: attachdetach.ReconcilerOptions{
			LoopPeriod:        cfg.AttachDetach.ReconcilerLoopPeriod.Duration,
			MaxWaitForUnmount: cfg.AttachDetach.MaxWaitForUnmount.Duration,
			SyncPeriod:        cfg.AttachDetach.ReconcilerSyncPeriod.Duration,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("volume controller: %w", err)
	}
	return c, nil
}

// laterWriter reports attached volumes through the node controller, which
// is built after the volume controller.
type laterWriter struct {
	w attachdetach.AttachedVolumesWriter
}

func (l *laterWriter) SetVolumesAttached(ctx context.Context, node types.NodeName, volumes []corev1.AttachedVolume) error {
	if l.w == nil {
		return fmt.Errorf("node %s: node controller not built yet", node)
	}
	return l.w.SetVolumesAttached(ctx, node, volumes)
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
