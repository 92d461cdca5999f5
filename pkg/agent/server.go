package agent

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"sync"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/provider"
	"github.com/nodelet/nodelet/pkg/server"
	"github.com/nodelet/nodelet/pkg/stats"
)

// kubeletServer builds the kubelet API server of the agent's nodes when
// WithServer asks (nil otherwise), with the metrics registries, the
// nodes' stats and, for a node whose containers run in this host's
// cgroups, their cAdvisor metrics. The nodes it serves are p.stats.nodes:
// the agent's own, and the Nodes taken over while they are.
func (a *Agent) kubeletServer(p *parts) (*server.Server, error) {
	if a.s.server == nil {
		return nil, nil
	}
	opts := *a.s.server
	if opts.NodeName == "" {
		opts.NodeName = a.serverNodeName()
	}
	opts.Metrics = promhttp.HandlerFor(p.registry, promhttp.HandlerOpts{})
	opts.ProbeMetrics = promhttp.HandlerFor(p.probes, promhttp.HandlerOpts{})
	opts.Stats, opts.Addresses = p.stats, p.stats
	var backend server.Backend = &multiNodeBackend{nodes: p.stats.nodes}
	if own := p.stats.nodes.snapshot(); len(own) == 1 && a.s.selector == nil {
		for _, p := range own {
			backend = p // its optional parts (logs, exec, …) are found on it directly
			if cg, ok := p.(provider.ContainerCgroupsProvider); ok {
				opts.CadvisorMetrics = stats.CadvisorHandler(cg.ContainerCgroups, stats.CadvisorOptions{})
			}
		}
	}
	srv, err := server.New(p.client, backend, opts)
	if err != nil {
		return nil, err
	}
	p.loops["kubelet API server"] = srv.Run
	return srv, nil
}

// serverNodeName is the node the kubelet API server authorizes requests
// about no node of the agent's against: the agent's first own node, else
// (an agent that only takes Nodes over) the host's name, as a kubelet
// names its node by default.
func (a *Agent) serverNodeName() string {
	if a.nodes.Len() > 0 {
		return a.nodes.nodes[0].Name
	}
	if host, err := os.Hostname(); err == nil && host != "" {
		return host
	}
	return "nodelet"
}

// nodeProviders are the providers of the nodes the agent serves, by node
// name: its own from the start, the Nodes taken over added and removed
// at run time (AddNode, RemoveNode, as the pod controller's).
type nodeProviders struct {
	mu    sync.RWMutex
	nodes map[string]provider.PodLifecycleHandler
}

func newNodeProviders(nodes []*managedNode) *nodeProviders {
	s := &nodeProviders{nodes: make(map[string]provider.PodLifecycleHandler, len(nodes))}
	for _, n := range nodes {
		s.nodes[n.info.Name] = n.provider
	}
	return s
}

// AddNode serves node with p.
func (s *nodeProviders) AddNode(node string, p provider.PodLifecycleHandler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nodes[node] = p
}

// RemoveNode stops serving node: requests about it answer as for a node
// that is not the agent's.
func (s *nodeProviders) RemoveNode(node string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.nodes, node)
}

// get is the provider of node.
func (s *nodeProviders) get(node string) (provider.PodLifecycleHandler, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	p, ok := s.nodes[node]
	return p, ok
}

// snapshot is every node served now, with its provider.
func (s *nodeProviders) snapshot() map[string]provider.PodLifecycleHandler {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return maps.Clone(s.nodes)
}

// multiNodeBackend serves the pods of several nodes, which may come and
// go: /pods lists them all, and each request about a pod goes to, and is
// authorized against, the node that runs it now.
type multiNodeBackend struct {
	nodes *nodeProviders
}

func (b *multiNodeBackend) GetPods(ctx context.Context) ([]*corev1.Pod, error) {
	var out []*corev1.Pod
	for name, p := range b.nodes.snapshot() {
		pods, err := p.GetPods(ctx)
		if err != nil {
			return nil, fmt.Errorf("pods of node %s: %w", name, err)
		}
		out = append(out, pods...)
	}
	return out, nil
}

func (b *multiNodeBackend) NodeForPod(namespace, name string) (string, bool) {
	node, _, ok := b.find(namespace, name)
	return node, ok
}

// find is the node that runs the pod, and its provider.
func (b *multiNodeBackend) find(namespace, name string) (string, provider.PodLifecycleHandler, bool) {
	for node, p := range b.nodes.snapshot() {
		if _, err := p.GetPod(context.Background(), namespace, name); err == nil {
			return node, p, true
		}
	}
	return "", nil, false
}

// podProvider is the provider of the node that runs the pod.
func (b *multiNodeBackend) podProvider(namespace, name string) (provider.PodLifecycleHandler, error) {
	_, p, ok := b.find(namespace, name)
	if !ok {
		return nil, fmt.Errorf("%s/%s: %w", namespace, name, provider.ErrNotFound)
	}
	return p, nil
}

// The streaming and log endpoints go to the pod's node's provider, when
// it has the capability; provider.ErrNotSupported otherwise.

func (b *multiNodeBackend) GetContainerLogs(ctx context.Context, namespace, pod, container string, opts provider.ContainerLogOpts) (io.ReadCloser, error) {
	p, err := b.podProvider(namespace, pod)
	if err != nil {
		return nil, err
	}
	lp, ok := p.(provider.LogsProvider)
	if !ok {
		return nil, fmt.Errorf("container logs: %w", provider.ErrNotSupported)
	}
	return lp.GetContainerLogs(ctx, namespace, pod, container, opts)
}

func (b *multiNodeBackend) RunInContainer(ctx context.Context, namespace, pod, container string, cmd []string, attach provider.AttachIO) error {
	p, err := b.podProvider(namespace, pod)
	if err != nil {
		return err
	}
	ep, ok := p.(provider.ExecProvider)
	if !ok {
		return fmt.Errorf("exec: %w", provider.ErrNotSupported)
	}
	return ep.RunInContainer(ctx, namespace, pod, container, cmd, attach)
}

func (b *multiNodeBackend) AttachToContainer(ctx context.Context, namespace, pod, container string, attach provider.AttachIO) error {
	p, err := b.podProvider(namespace, pod)
	if err != nil {
		return err
	}
	ap, ok := p.(provider.AttachProvider)
	if !ok {
		return fmt.Errorf("attach: %w", provider.ErrNotSupported)
	}
	return ap.AttachToContainer(ctx, namespace, pod, container, attach)
}

func (b *multiNodeBackend) PortForward(ctx context.Context, namespace, pod string, port int32, stream io.ReadWriteCloser) error {
	p, err := b.podProvider(namespace, pod)
	if err != nil {
		return err
	}
	fp, ok := p.(provider.PortForwardProvider)
	if !ok {
		return fmt.Errorf("port forwarding: %w", provider.ErrNotSupported)
	}
	return fp.PortForward(ctx, namespace, pod, port, stream)
}
