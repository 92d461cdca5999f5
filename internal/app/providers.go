package app

import (
	"context"
	"fmt"
	"hash/fnv"
	"path/filepath"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/attachdetach"
	"github.com/nodelet/nodelet/pkg/config"
	"github.com/nodelet/nodelet/pkg/node"
	"github.com/nodelet/nodelet/pkg/provider/sim"
)

// providerNodes builds the managed nodes with the provider of each, and
// the loops those providers need run: the one place that knows which
// providers there are. Host providers (process, cri) run this host's one
// node and read claims, volumes, CSI drivers, volume attachments and
// RuntimeClasses from cluster and the node from nodes; sim runs every
// managed node and waits on volumes, when not nil, for attaches. Host
// providers count their probes and runtime calls, and read the host's
// figures, in shared.
func providerNodes(client kubernetes.Interface, recorder record.EventRecorder, cfg *config.Config, managed []managedNode,
	volumes *attachdetach.World, cluster, nodes informers.SharedInformerFactory, shared hostShared) ([]node.Node, map[string]func(context.Context) error, error) {
	switch cfg.Provider {
	case config.ProviderProcess, config.ProviderCRI:
		return hostNode(client, recorder, cfg, cluster, nodes, shared)
	}
	built, err := simNodes(managed, cfg, volumes)
	return built, map[string]func(context.Context) error{}, err
}

// simNodes builds a sim provider for each managed node; its pods wait for
// the attach of their volumes by volumes, when not nil.
func simNodes(managed []managedNode, cfg *config.Config, volumes *attachdetach.World) ([]node.Node, error) {
	conditions := make([]sim.NodeCondition, 0, len(cfg.Sim.NodeConditions))
	for _, c := range cfg.Sim.NodeConditions {
		conditions = append(conditions, sim.NodeCondition{
			Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message,
			Every: c.Every.Duration, For: c.For.Duration, NodeRatio: ptr.Deref(c.NodeRatio, 1),
		})
	}
	nodes := make([]node.Node, 0, len(managed))
	for _, m := range managed {
		seed := fnv.New64a()
		seed.Write([]byte(m.name)) // each node draws its own jitter, the same on every run
		address := cfg.Address
		if m.address != "" {
			address = m.address
		}
		opts := sim.Options{
			NodeName:       m.name,
			PodCIDR:        m.podCIDR,
			Address:        address,
			Port:           cfg.Port,
			StartDelay:     cfg.Sim.StartDelay.Duration,
			StartJitter:    cfg.Sim.StartJitter.Duration,
			DeleteDelay:    cfg.Sim.DeleteDelay.Duration,
			DeleteJitter:   cfg.Sim.DeleteJitter.Duration,
			CompleteRatio:  cfg.Sim.CompleteRatio,
			FailRatio:      cfg.Sim.FailRatio,
			RunDuration:    cfg.Sim.RunDuration.Duration,
			RunJitter:      cfg.Sim.RunJitter.Duration,
			NodeConditions: conditions,
			Seed:           seed.Sum64(),
			Capacity:       cfg.Sim.Capacity,
			Version:        Version,
			PingErrorFile:  filepath.Join(cfg.RootDir, "sim", m.name, "ping-error"),
			Usage: sim.Usage{
				CPURequestRatio:    ptr.Deref(cfg.Sim.Usage.CPURequestRatio, 0.5),
				MemoryRequestRatio: ptr.Deref(cfg.Sim.Usage.MemoryRequestRatio, 0.5),
				Noise:              cfg.Sim.Usage.Noise,
			},
		}
		if volumes != nil {
			opts.Volumes = volumes
		}
		p, err := sim.New(opts)
		if err != nil {
			return nil, fmt.Errorf("sim provider for node %s: %w", m.name, err)
		}
		nodes = append(nodes, node.Node{Template: nodeTemplate(m.name, cfg), Provider: p})
	}
	return nodes, nil
}
