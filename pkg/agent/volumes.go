package agent

import (
	"fmt"

	"k8s.io/client-go/kubernetes"

	"github.com/nodelet/nodelet/pkg/attachdetach"
	simattach "github.com/nodelet/nodelet/pkg/attachdetach/simattacher"
	"github.com/nodelet/nodelet/pkg/csi"
)

// volumeWorld builds attach/detach's states of world of the agent's
// nodes when WithAttachDetach asks (nil otherwise), which the providers ask
// about pods' volumes: it reads pods and nodes from the agent's own
// factories, claims, volumes, CSI drivers and volume attachments from the
// cluster-wide one.
func (a *Agent) volumeWorld(client kubernetes.Interface, inf agentInformers) (*attachdetach.World, error) {
	o := a.s.attachDetach
	if o == nil {
		return nil, nil
	}
	drivers := inf.cluster.Storage().V1().CSIDrivers()
	attachRequired := attachdetach.CSIDriverAttachRequired(drivers.Lister())
	var plugin attachdetach.Plugin
	switch o.Attacher {
	case AttacherSim:
		p, err := simattach.New(simattach.Options{
			Latency:        o.SimLatency,
			FailureRate:    o.SimFailureRate,
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
	managed := make(map[string]bool, a.nodes.Len())
	for _, n := range a.nodes.nodes {
		managed[n.Name] = true
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

// volumeController builds the attach/detach controller that drives world
// and reports attached volumes through the node controller.
func (a *Agent) volumeController(p *parts, world *attachdetach.World) error {
	if world == nil {
		return nil
	}
	o := a.s.attachDetach
	c, err := attachdetach.NewController(world, p.nodes, p.recorder, attachdetach.ReconcilerOptions{
		LoopPeriod:        o.ReconcilerLoopPeriod,
		MaxWaitForUnmount: o.MaxWaitForUnmount,
		SyncPeriod:        o.ReconcilerSyncPeriod,
	})
	if err != nil {
		return fmt.Errorf("volume controller: %w", err)
	}
	if err := c.Register(p.registry); err != nil {
		return fmt.Errorf("register volume metrics: %w", err)
	}
	p.loops["volume controller"] = c.Run
	return nil
}
