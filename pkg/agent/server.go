package agent

import (
	"context"
	"fmt"
	"io"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/provider"
	"github.com/nodelet/nodelet/pkg/server"
	"github.com/nodelet/nodelet/pkg/stats"
)

// kubeletServer builds the kubelet API server of the agent's nodes when
// WithServer asks (nil otherwise), with the metrics registries, the
// nodes' stats and, for a node whose containers run in this host's
// cgroups, their cAdvisor metrics.
func (a *Agent) kubeletServer(p *parts, pods map[string]provider.PodLifecycleHandler) (*server.Server, error) {
	if a.s.server == nil {
		return nil, nil
	}
	opts := *a.s.server
	if opts.NodeName == "" {
		opts.NodeName = a.nodes.nodes[0].Name
	}
	opts.Metrics = promhttp.HandlerFor(p.registry, promhttp.HandlerOpts{})
	opts.ProbeMetrics = promhttp.HandlerFor(p.probes, promhttp.HandlerOpts{})
	opts.Stats, opts.Addresses = p.stats, p.stats
	var backend server.Backend = &multiNodeBackend{pods: pods}
	if len(pods) == 1 {
		for _, p := range pods {
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

// multiNodeBackend serves the pods of several nodes: /pods lists them all,
// and each request about a pod is authorized against its node.
type multiNodeBackend struct {
	pods map[string]provider.PodLifecycleHandler
}

func (b *multiNodeBackend) GetPods(ctx context.Context) ([]*corev1.Pod, error) {
	var out []*corev1.Pod
	for name, p := range b.pods {
		pods, err := p.GetPods(ctx)
		if err != nil {
			return nil, fmt.Errorf("pods of node %s: %w", name, err)
		}
		out = append(out, pods...)
	}
	return out, nil
}

func (b *multiNodeBackend) NodeForPod(namespace, name string) (string, bool) {
	for node, p := range b.pods {
		if _, err := p.GetPod(context.Background(), namespace, name); err == nil {
			return node, true
		}
	}
	return "", false
}

// podProvider is the provider of the node that runs the pod.
func (b *multiNodeBackend) podProvider(namespace, name string) (provider.PodLifecycleHandler, error) {
	node, ok := b.NodeForPod(namespace, name)
	if !ok {
		return nil, fmt.Errorf("%s/%s: %w", namespace, name, provider.ErrNotFound)
	}
	return b.pods[node], nil
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
