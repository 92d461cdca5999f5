package agent

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"

	"github.com/nodelet/nodelet/pkg/attachdetach"
	"github.com/nodelet/nodelet/pkg/eviction"
	"github.com/nodelet/nodelet/pkg/node"
	"github.com/nodelet/nodelet/pkg/nodeshutdown"
	"github.com/nodelet/nodelet/pkg/pod"
	"github.com/nodelet/nodelet/pkg/provider"
	"github.com/nodelet/nodelet/pkg/stats"
)

// ManagedAttachDetachAnnotation on a Node says whether the cluster's
// attach/detach controller attaches its volumes ("true") or the node does
// ("false", WithAttachDetach).
const ManagedAttachDetachAnnotation = "volumes.kubernetes.io/controller-managed-attach-detach"

// managedNode is one node with its provider and the state the agent
// shares with that provider.
type managedNode struct {
	info     NodeInfo
	provider Provider
	// pressure and shutdown are what the node's provider admits pods and
	// reports conditions by, set by the eviction and shutdown managers
	// built after it; nil without those options.
	pressure *eviction.Pressure
	shutdown *nodeshutdown.State
}

// parts are what the agent's wiring shares while it builds.
type parts struct {
	*built
	recorder record.EventRecorder
	inf      agentInformers
	// registry is served at /metrics, probes at /metrics/probes.
	registry, probes *prometheus.Registry
	host             *stats.Host
	stats            *statsSource
}

// build makes every part of the agent, in dependency order, with the
// client configuration rc: nothing runs yet.
func (a *Agent) build(rc *rest.Config) (_ *built, err error) {
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("create client: %w", err)
	}
	broadcaster := record.NewBroadcaster()
	defer func() {
		if err != nil {
			broadcaster.Shutdown()
		}
	}()
	p := &parts{
		built: &built{client: client, broadcaster: broadcaster, loops: map[string]func(context.Context) error{},
			count: a.nodes.Len(), takingOver: a.s.selector != nil},
		recorder: broadcaster.NewRecorder(scheme.Scheme, a.eventSource()),
		inf:      newAgentInformers(client, a.nodes.names(), a.s.selector != nil),
		probes:   prometheus.NewRegistry(),
		host:     stats.NewHost(stats.HostOptions{RootDir: a.s.rootDir, SystemContainers: a.systemContainers(time.Now())}),
	}
	p.factories = p.inf.all()
	for name, run := range a.s.loops {
		loopConfig := rest.CopyConfig(rc)
		p.loops[name] = func(ctx context.Context) error { return run(ctx, loopConfig, p.recorder) }
	}
	if p.registry, err = a.metricsRegistry(); err != nil {
		return nil, err
	}
	// Attach/detach's state of the world comes first: the providers ask
	// it; its controller, which writes through the node controller, later.
	world, err := a.volumeWorld(client, p.inf)
	if err != nil {
		return nil, err
	}
	nodes, err := a.buildNodes(p, world)
	if err != nil {
		return nil, err
	}
	p.stats = a.newStatsSource(p.host, nodes)
	if p.nodes, err = a.nodeController(p, nodes); err != nil {
		return nil, err
	}
	for _, step := range []func(*parts, []*managedNode) error{a.evictionLoops, a.shutdownLoop} {
		if err := step(p, nodes); err != nil {
			return nil, err
		}
	}
	if err := a.volumeController(p, world); err != nil {
		return nil, err
	}
	if err := a.podLoops(p, nodes); err != nil {
		return nil, err
	}
	return p.built, nil
}

// metricsRegistry is the registry served at /metrics: WithMetricsRegistry's,
// or one with the Go runtime's and the process's metrics; the remote
// config's metrics are added to it.
func (a *Agent) metricsRegistry() (*prometheus.Registry, error) {
	reg := a.s.registry
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	if a.s.remote != nil {
		if err := a.s.remote.Register(reg); err != nil {
			return nil, fmt.Errorf("register config metrics: %w", err)
		}
	}
	return reg, nil
}

// buildNodes makes each node's provider, with the pressure and shutdown
// state it shares with the managers built after it.
func (a *Agent) buildNodes(p *parts, world *attachdetach.World) ([]*managedNode, error) {
	nodes := make([]*managedNode, 0, a.nodes.Len())
	for _, info := range a.nodes.nodes {
		n := &managedNode{info: info}
		if a.s.eviction != nil {
			n.pressure = eviction.NewPressure()
		}
		if a.s.shutdownSet {
			n.shutdown = &nodeshutdown.State{}
		}
		env := &Env{
			Node: info, Client: p.client, Recorder: p.recorder,
			Cluster: p.inf.cluster, Nodes: p.inf.nodes, Volumes: world,
			Admit: n.admit, NodeConditions: n.setConditions, NotReady: n.notReady,
			Metrics: p.registry, ProbeMetrics: p.probes,
			RootDir: a.s.rootDir, Version: a.s.version,
			loops: p.loops,
		}
		var err error
		if n.provider, err = a.newProvider(env); err != nil {
			return nil, fmt.Errorf("provider of node %s: %w", info.Name, err)
		}
		if n.provider == nil {
			return nil, fmt.Errorf("provider of node %s: the constructor returned none", info.Name)
		}
		if r, ok := n.provider.(provider.Runner); ok {
			p.loops["provider of node "+info.Name] = r.Run
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// admit is the agent's own admission of a new pod on the node: refused
// while the node shuts down, or as node pressure says.
func (n *managedNode) admit(pod *corev1.Pod) error {
	if n.shutdown != nil {
		if err := n.shutdown.Admit(pod); err != nil {
			return err
		}
	}
	if n.pressure != nil {
		return n.pressure.Admit(pod)
	}
	return nil
}

// setConditions sets the node's pressure conditions, when the agent
// evicts.
func (n *managedNode) setConditions(node *corev1.Node) {
	if n.pressure != nil {
		n.pressure.SetNodeConditions(node)
	}
}

// notReady says why the node is not ready: it shuts down.
func (n *managedNode) notReady() string {
	if n.shutdown != nil {
		return n.shutdown.NotReady()
	}
	return ""
}

// nodeController builds the controller that registers the nodes and keeps
// their Leases and status.
func (a *Agent) nodeController(p *parts, nodes []*managedNode) (*node.Controller, error) {
	built := make([]node.Node, 0, len(nodes))
	for _, n := range nodes {
		built = append(built, node.Node{Template: a.nodeTemplate(n.info.Name), Provider: n.provider})
	}
	o := a.s.node
	opts := node.Options{
		LeaseDuration:        o.LeaseDuration,
		StatusReportInterval: o.StatusReportInterval,
		PingInterval:         o.PingInterval,
		Workers:              o.Workers,
	}
	if opts.Workers == 0 {
		opts.Workers = node.WorkersFor(len(nodes))
		if a.s.selector != nil {
			// How many nodes will be taken over is not known: enough
			// workers for a thousand to start with, more as more come.
			opts.Workers = node.WorkersFor(max(len(nodes), 1000))
			opts.GrowWorkers = true
		}
	}
	if a.s.remote != nil {
		opts.Conditions = a.s.remote.Conditions
	}
	c, err := node.NewController(p.client, built, opts)
	if err != nil {
		return nil, fmt.Errorf("node controller: %w", err)
	}
	if err := c.WatchNodes(p.inf.nodes.Core().V1().Nodes()); err != nil {
		return nil, err
	}
	p.loops["node controller"] = c.Run
	return c, nil
}

// nodeTemplate is what a node is registered with: the labels and taints
// of WithNodeOptions, and who attaches its volumes.
func (a *Agent) nodeTemplate(name string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{},
		Annotations: map[string]string{ManagedAttachDetachAnnotation: strconv.FormatBool(a.s.attachDetach == nil)}}}
	for k, v := range a.s.node.Labels {
		n.Labels[k] = v
	}
	n.Spec.Taints = append([]corev1.Taint(nil), a.s.node.Taints...)
	return n
}

// podLoops builds what serves and syncs the pods: the kubelet API server,
// the pod controller, static pods, then the remote config and /healthz,
// which watch the others.
func (a *Agent) podLoops(p *parts, nodes []*managedNode) error {
	handlers := make(map[string]provider.PodLifecycleHandler, len(nodes))
	for _, n := range nodes {
		handlers[n.info.Name] = n.provider
	}
	srv, err := a.kubeletServer(p)
	if err != nil {
		return err
	}
	podCtrl, err := pod.NewController(p.client, p.inf.pods.Core().V1().Pods(), handlers, p.recorder, pod.Options{
		Workers:            a.s.pods.Workers,
		StatusPollInterval: a.s.pods.StatusPollInterval,
	})
	if err != nil {
		return fmt.Errorf("pod controller: %w", err)
	}
	if err := podCtrl.Register(p.registry); err != nil {
		return fmt.Errorf("register pod metrics: %w", err)
	}
	p.loops["pod controller"] = podCtrl.Run
	if err := a.staticPods(p, nodes); err != nil {
		return err
	}
	// The Nodes taken over are synced by the pod controller and served
	// by the kubelet API (and stats) while they are.
	taken, err := a.takeoverLoops(p, podCtrl, p.stats.nodes)
	if err != nil {
		return err
	}
	first := ""
	if len(nodes) > 0 {
		first = nodes[0].info.Name
	}
	h := newHealth(p.nodes, podCtrl, srv, taken, first)
	if err := a.remoteConfig(p, h); err != nil {
		return err
	}
	if a.s.healthz != "" {
		p.loops["healthz"] = h.serve(a.s.healthz)
	}
	return nil
}

// activePods are the provider's pods that have not finished, as eviction
// and shutdown rank them.
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

// errNotA says a provider lacks an interface an option needs.
func errNotA(option, node, iface string) error {
	return errors.New(option + ": the provider of node " + node + " is not a " + iface)
}
