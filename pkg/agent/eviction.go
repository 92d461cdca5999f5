package agent

import (
	"context"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodelet/nodelet/pkg/eviction"
	"github.com/nodelet/nodelet/pkg/nodeshutdown"
	"github.com/nodelet/nodelet/pkg/provider"
)

// fleetEvictionPeriod is how often the one loop of a many-node agent looks
// at every node's usage, as the kubelet's every 10 s.
const fleetEvictionPeriod = 10 * time.Second

// evictionLoops builds the eviction manager of every node: one node's runs
// on its own and records the kubelet's Events; a fleet's run one after the
// other every period, in one loop, without Events.
func (a *Agent) evictionLoops(p *parts, nodes []*managedNode) error {
	if a.s.eviction == nil {
		return nil
	}
	var recorder record.EventRecorder
	if len(nodes) == 1 {
		recorder = p.recorder
	}
	managers := make([]*eviction.Manager, 0, len(nodes))
	for _, n := range nodes {
		m, err := a.evictionManager(p, n, recorder)
		if err != nil {
			return err
		}
		managers = append(managers, m)
	}
	if len(managers) == 1 {
		p.loops["eviction manager"] = managers[0].Run
		return nil
	}
	p.loops["eviction managers"] = func(ctx context.Context) error {
		t := time.NewTicker(fleetEvictionPeriod)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
			for _, m := range managers {
				if _, err := m.Synchronize(ctx); err != nil && ctx.Err() == nil {
					klog.FromContext(ctx).V(2).Info("Eviction failed", "err", err)
				}
			}
		}
	}
	return nil
}

// imageReclaimer is a provider that can free disk space of its own under
// disk pressure (cri: dead containers and unused images).
type imageReclaimer interface {
	DeleteDeadContainers(ctx context.Context) error
	DeleteUnusedImages(ctx context.Context) error
}

// evictionManager builds one node's eviction manager over its usage
// summary (the kubelet API's), evicting through its provider.
func (a *Agent) evictionManager(p *parts, n *managedNode, recorder record.EventRecorder) (*eviction.Manager, error) {
	name := n.info.Name
	if _, ok := n.provider.(provider.StatsProvider); !ok {
		return nil, errNotA("eviction", name, "provider.StatsProvider")
	}
	evicter, ok := n.provider.(provider.Evicter)
	if !ok {
		return nil, errNotA("eviction", name, "provider.Evicter")
	}
	deps := eviction.Deps{
		Summary:    func(ctx context.Context) (*statsv1alpha1.Summary, error) { return p.stats.Summary(ctx, name) },
		ActivePods: func() []*corev1.Pod { return activePods(n.provider) },
		Evict: func(_ context.Context, pod *corev1.Pod, grace int64, st eviction.EvictionStatus) error {
			var failed corev1.PodStatus
			st.Apply(&failed)
			return evicter.Evict(pod, provider.Eviction{
				Grace: time.Duration(grace) * time.Second, Reason: failed.Reason, Message: failed.Message, Conditions: failed.Conditions,
			})
		},
		Pressure:              n.pressure,
		NodeConditionsChanged: func() { p.nodes.ReportStatus(name) },
		Recorder:              recorder,
	}
	if r, ok := n.provider.(imageReclaimer); ok {
		deps.DeleteDeadContainers, deps.DeleteUnusedImages = r.DeleteDeadContainers, r.DeleteUnusedImages
	}
	o := a.s.eviction
	return eviction.New(deps, eviction.Options{
		NodeName:                 name,
		Thresholds:               o.thresholds,
		PressureTransitionPeriod: o.PressureTransitionPeriod,
		MaxPodGracePeriodSeconds: o.MaxPodGracePeriodSeconds,
	})
}

// shutdownLoop builds the node's graceful shutdown and the control socket
// that starts it.
func (a *Agent) shutdownLoop(p *parts, nodes []*managedNode) error {
	if !a.s.shutdownSet {
		return nil
	}
	n := nodes[0]
	evicter, ok := n.provider.(provider.Evicter)
	if !ok {
		return errNotA("graceful shutdown", n.info.Name, "provider.Evicter")
	}
	m := nodeshutdown.New(nodeshutdown.Deps{
		ActivePods: func() []*corev1.Pod { return activePods(n.provider) },
		Stop: func(pod *corev1.Pod, grace time.Duration, st corev1.PodStatus) error {
			return evicter.Evict(pod, provider.Eviction{Grace: grace, Reason: st.Reason, Message: st.Message, Conditions: st.Conditions})
		},
		NodeConditionsChanged: func() { p.nodes.ReportStatus(n.info.Name) },
		Recorder:              p.recorder,
		State:                 n.shutdown,
	}, nodeshutdown.Options{NodeName: n.info.Name, Groups: a.s.shutdown})
	socket := &nodeshutdown.Socket{Path: filepath.Join(a.s.rootDir, nodeshutdown.SocketName), Manager: m}
	p.loops["control socket"] = socket.Run
	return nil
}
