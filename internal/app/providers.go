package app

import (
	"context"
	"fmt"
	"hash/fnv"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/attachdetach"
	"github.com/nodelet/nodelet/pkg/config"
	"github.com/nodelet/nodelet/pkg/eviction"
	"github.com/nodelet/nodelet/pkg/node"
	"github.com/nodelet/nodelet/pkg/provider"
	"github.com/nodelet/nodelet/pkg/provider/sim"
	"github.com/nodelet/nodelet/pkg/stats"
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
	built, evictions, err := simNodes(managed, cfg, volumes)
	if err != nil {
		return nil, nil, err
	}
	return built, map[string]func(context.Context) error{"sim eviction managers": evictions}, nil
}

// simNodes builds a sim provider for each managed node; its pods wait for
// the attach of their volumes by volumes, when not nil. Each node has an
// eviction manager over its simulated usage; the returned loop runs them
// all, one after the other, every eviction period (no goroutine per node).
func simNodes(managed []managedNode, cfg *config.Config, volumes *attachdetach.World) ([]node.Node, func(context.Context) error, error) {
	thresholds, err := eviction.ParseThresholds(cfg.EvictionHard, cfg.EvictionSoft, cfg.EvictionSoftGracePeriod, cfg.EvictionMinimumReclaim)
	if err != nil {
		return nil, nil, fmt.Errorf("eviction thresholds: %w", err)
	}
	evictors := make([]*eviction.Manager, 0, len(managed))
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
			Zone:           m.zone,
			Region:         cfg.Sim.Region,
			InstanceType:   cfg.Sim.InstanceType,
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
		var p *sim.Provider
		evictor, err := simEvictionManager(m.name, cfg, thresholds, func() *sim.Provider { return p })
		if err != nil {
			return nil, nil, err
		}
		opts.Pressure, opts.Admit = evictor.SetNodeConditions, evictor.Admit
		if p, err = sim.New(opts); err != nil {
			return nil, nil, fmt.Errorf("sim provider for node %s: %w", m.name, err)
		}
		evictors = append(evictors, evictor)
		nodes = append(nodes, node.Node{Template: nodeTemplate(m.name, cfg), Provider: p})
	}
	run := func(ctx context.Context) error {
		t := time.NewTicker(simEvictionPeriod)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
			for _, e := range evictors {
				if _, err := e.Synchronize(ctx); err != nil && ctx.Err() == nil {
					klog.FromContext(ctx).V(2).Info("Simulated eviction failed", "err", err)
				}
			}
		}
	}
	return nodes, run, nil
}

// simEvictionPeriod is how often the sim nodes' eviction managers look at
// the simulated usage, as the kubelet's every 10 s.
const simEvictionPeriod = 10 * time.Second

// simEvictionManager is the eviction manager of one sim node: it reads the
// node's simulated usage and evicts by failing the simulated pod. It
// records no Events (thousands of nodes), and there is nothing to reclaim.
func simEvictionManager(name string, cfg *config.Config, thresholds []eviction.Threshold, provider func() *sim.Provider) (*eviction.Manager, error) {
	return eviction.New(eviction.Deps{
		Summary: func(ctx context.Context) (*statsv1alpha1.Summary, error) {
			p := provider()
			pods, err := p.PodStats(ctx)
			if err != nil {
				return nil, err
			}
			ns, err := p.NodeStats(ctx)
			if err != nil {
				return nil, err
			}
			return stats.Summary(ns, pods), nil
		},
		ActivePods: func() []*corev1.Pod { return activePods(provider()) },
		Evict: func(_ context.Context, pod *corev1.Pod, _ int64, st eviction.EvictionStatus) error {
			failed := evictedStatus(st)
			return provider().Evict(pod, failed.Reason, failed.Message, failed.Conditions)
		},
		NodeConditionsChanged: func() { provider().NodeStatusChanged() },
	}, eviction.Options{
		NodeName:                 name,
		Thresholds:               thresholds,
		PressureTransitionPeriod: cfg.EvictionPressureTransitionPeriod.Duration,
		MaxPodGracePeriodSeconds: int64(cfg.EvictionMaxPodGracePeriod),
	})
}

// activePods are the provider's pods that have not finished, as an
// eviction manager ranks them.
func activePods(p provider.PodLifecycleHandler) []*corev1.Pod {
	pods, err := p.GetPods(context.Background())
	if err != nil {
		return nil
	}
	active := pods[:0]
	for _, pod := range pods {
		if pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
			active = append(active, pod)
		}
	}
	return active
}

// evictedStatus is the status an eviction gives a pod: its reason,
// message and DisruptionTarget.
func evictedStatus(st eviction.EvictionStatus) corev1.PodStatus {
	var failed corev1.PodStatus
	st.Apply(&failed)
	return failed
}
