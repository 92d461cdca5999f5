package agent

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"time"

	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodelet/nodelet/pkg/provider"
	"github.com/nodelet/nodelet/pkg/stats"
)

// statsSource is the usage summary of the agent's nodes for the kubelet
// API: each node's pods from its provider, and the node's own figures from
// its provider when it simulates them, else from the host. Its nodes are
// those the kubelet API serves: the agent's own and the Nodes taken over.
type statsSource struct {
	host      *stats.Host
	nodes     *nodeProviders
	byAddress map[netip.Addr]string
}

// systemContainers are the host node's system containers: the agent's
// own cgroup as the kubelet's (started when the agent was built), and those
// WithSystemCgroups names.
func (a *Agent) systemContainers(started time.Time) []stats.SystemContainer {
	out := []stats.SystemContainer{{Name: statsv1alpha1.SystemContainerKubelet, PID: os.Getpid(), StartTime: started}}
	for _, c := range []struct{ name, cgroup string }{
		{statsv1alpha1.SystemContainerRuntime, a.s.cgroups.Runtime},
		{statsv1alpha1.SystemContainerMisc, a.s.cgroups.System},
		{statsv1alpha1.SystemContainerPods, a.s.cgroups.Pods},
	} {
		if c.cgroup != "" {
			out = append(out, stats.SystemContainer{Name: c.name, Cgroup: c.cgroup})
		}
	}
	return out
}

// newStatsSource serves the nodes, each at its own InternalIP where
// WithNodeAddress gives one.
func (a *Agent) newStatsSource(host *stats.Host, nodes []*managedNode) *statsSource {
	s := &statsSource{host: host, nodes: newNodeProviders(nodes), byAddress: map[netip.Addr]string{}}
	for _, n := range nodes {
		if a.s.addresses == nil {
			continue
		}
		if ip, err := netip.ParseAddr(a.s.addresses(n.info)); err == nil {
			s.byAddress[ip] = n.info.Name
		}
	}
	return s
}

func (s *statsSource) Summary(ctx context.Context, node string) (*statsv1alpha1.Summary, error) {
	p, ok := s.nodes.get(node)
	if !ok {
		return nil, fmt.Errorf("node %s is not one of this agent's", node)
	}
	sp, ok := p.(provider.StatsProvider)
	if !ok {
		return nil, fmt.Errorf("the provider of node %s reports no stats", node)
	}
	// Pods first: a simulated node's figures are its pods' plus its own.
	pods, err := sp.PodStats(ctx)
	if err != nil {
		return nil, fmt.Errorf("pod stats of node %s: %w", node, err)
	}
	var ns statsv1alpha1.NodeStats
	if np, ok := p.(provider.NodeStatsProvider); ok {
		ns, err = np.NodeStats(ctx)
	} else {
		ns, err = s.host.NodeStats(ctx, node)
	}
	if err != nil {
		return nil, fmt.Errorf("node stats of node %s: %w", node, err)
	}
	if ip, ok := p.(provider.ImageFsStatsProvider); ok {
		imageFs, containerFs, err := ip.ImageFsStats(ctx)
		if err != nil {
			return nil, fmt.Errorf("image filesystem of node %s: %w", node, err)
		}
		ns.Runtime = &statsv1alpha1.RuntimeStats{ImageFs: imageFs, ContainerFs: containerFs}
	}
	ns.NodeName = node
	return stats.Summary(ns, pods), nil
}

func (s *statsSource) NodeForAddress(ip netip.Addr) (string, bool) {
	node, ok := s.byAddress[ip.Unmap()]
	return node, ok
}

// HasNode tells whether node is served now: a request the API server
// proxied for it is served for it, whatever address it came to (the
// Nodes taken over share the agent's).
func (s *statsSource) HasNode(node string) bool {
	_, ok := s.nodes.get(node)
	return ok
}
