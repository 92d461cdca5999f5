package agent

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"github.com/nodelet/nodelet/pkg/attachdetach"
	"github.com/nodelet/nodelet/pkg/provider"
)

// Provider is what runs one node's pods and describes the node. It may
// implement any of the optional interfaces of package provider, each
// lighting up its feature: PodNotifier (pushed status, else polled),
// PodRestorer (pods kept across an agent restart), NodeNotifier,
// LogsProvider, ExecProvider, AttachProvider, PortForwardProvider,
// StatsProvider and NodeStatsProvider (the kubelet API's stats, kubectl top
// and node-pressure eviction), Evicter (eviction and graceful shutdown) and
// Runner (a loop of its own, which the agent runs).
type Provider interface {
	provider.PodLifecycleHandler
	provider.NodeProvider
}

// NewProviderFunc makes the provider of one node. It is called once per
// node while Run builds the agent, before any loop runs; it should do no
// I/O that a loop could do later.
type NewProviderFunc func(env *Env) (Provider, error)

// Env is what the agent hands the constructor of a node's provider: the
// node, the agent's API client and shared informers, and the agent's own
// admission and node conditions, which the provider applies.
type Env struct {
	Node NodeInfo
	// Client and Recorder are the agent's; Events are sent while it runs.
	Client   kubernetes.Interface
	Recorder record.EventRecorder
	// Cluster is the agent's informer factory of cluster-wide objects
	// (claims, volumes, CSI drivers, RuntimeClasses …), and Nodes that of
	// the managed Nodes. Informers asked of them before Run's loops start
	// are started with the agent's and cache trimmed objects (no
	// managedFields).
	Cluster, Nodes informers.SharedInformerFactory
	// Volumes is the attach/detach state of the agent's nodes, which a
	// provider asks before it mounts a pod's attachable volumes; nil
	// without WithAttachDetach.
	Volumes *attachdetach.World

	// Admit is the agent's own admission of a new pod (node pressure,
	// node shutdown): a provider calls it in CreatePod before it admits
	// the pod itself, and fails the pod with its error (a
	// *provider.Rejection). Never nil.
	Admit func(pod *corev1.Pod) error
	// NodeConditions sets the conditions the agent owns (MemoryPressure,
	// DiskPressure, PIDPressure from eviction) in a node a provider
	// configures, over the provider's defaults. Never nil.
	NodeConditions func(node *corev1.Node)
	// NotReady says why the node must report Ready False (reason
	// KubeletNotReady), or "" (the node is shutting down). Never nil.
	NotReady func() string

	// Metrics registers metrics served at the kubelet API's /metrics, and
	// ProbeMetrics those at /metrics/probes.
	Metrics, ProbeMetrics prometheus.Registerer
	// RootDir is the agent's state directory, Version the kubelet version
	// its nodes report.
	RootDir, Version string

	loops map[string]func(context.Context) error
}

// Go adds a loop the agent runs with its own, for as long as it runs (a
// registrar, a control socket). A provider's own Run is started without
// it, when the provider is a provider.Runner.
func (e *Env) Go(name string, run func(context.Context) error) {
	e.loops[e.Node.Name+": "+name] = run
}
