package app

import (
	"fmt"
	"hash/fnv"
	"net/netip"
	"strconv"

	"github.com/nodelet/nodelet/pkg/config"
)

// managedNode is one node this agent runs: its name and its pod range.
type managedNode struct {
	name    string
	podCIDR string
}

// managedNodes lists the nodes of this agent: one named exactly
// cfg.NodeName, or cfg.Nodes named <nodeName>-<i>, less those that belong to
// other shards. With several nodes, node i takes the i-th /24 of the pod
// range, so that shards never hand out the same pod IP.
func managedNodes(cfg *config.Config) ([]managedNode, error) {
	if cfg.Nodes == 0 {
		return []managedNode{{name: cfg.NodeName, podCIDR: cfg.Sim.PodCIDR}}, nil
	}
	base, err := netip.ParsePrefix(cfg.Sim.PodCIDR)
	if err != nil {
		return nil, fmt.Errorf("sim.podCIDR: %w", err)
	}
	base = base.Masked()
	const perNodeBits = 24
	if base.Bits() > perNodeBits || !base.Addr().Is4() {
		return nil, fmt.Errorf("sim.podCIDR %s: need an IPv4 range of /%d or larger for several nodes", base, perNodeBits)
	}
	if room := 1 << (perNodeBits - base.Bits()); int(cfg.Nodes) > room {
		return nil, fmt.Errorf("sim.podCIDR %s holds %d nodes of /%d, not %d", base, room, perNodeBits, cfg.Nodes)
	}
	shard, shards := 0, 1
	if cfg.Shard != "" {
		if shard, shards, err = config.ParseShard(cfg.Shard); err != nil {
			return nil, fmt.Errorf("shard: %w", err)
		}
	}
	start := base.Addr().As4()
	first := uint32(start[0])<<24 | uint32(start[1])<<16 | uint32(start[2])<<8
	var nodes []managedNode
	for i := range uint32(cfg.Nodes) {
		name := cfg.NodeName + "-" + strconv.Itoa(int(i))
		if shardOf(name, shards) != shard {
			continue
		}
		a := first + i<<8
		addr := netip.AddrFrom4([4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), 0})
		nodes = append(nodes, managedNode{name: name, podCIDR: netip.PrefixFrom(addr, perNodeBits).String()})
	}
	return nodes, nil
}

// shardOf places a node name in one of n shards by hash.
func shardOf(name string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(name))
	return int(h.Sum32() % uint32(n))
}
