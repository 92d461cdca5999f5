package app

import (
	"fmt"
	"hash/fnv"
	"net/netip"
	"strconv"

	"github.com/nodelet/nodelet/pkg/config"
)

// managedNode is one node this agent runs: its name, its pod range and
// where it stands.
type managedNode struct {
	name    string
	podCIDR string
	// address is the node's own InternalIP from sim.nodeAddresses, or
	// empty for the agent's address.
	address string
	// zone is the node's zone from sim.zones, or empty for none.
	zone string
}

// managedNodes lists the nodes of this agent: one named exactly
// cfg.NodeName, or cfg.Nodes named <nodeName>-<i>, less those that belong to
// other shards. With several nodes, node i takes the i-th /24 of the pod
// range, so that shards never hand out the same pod IP, and the zone
// sim.zones[i % len(sim.zones)], so that every shard spreads them alike.
func managedNodes(cfg *config.Config) ([]managedNode, error) {
	addresses, err := nodeAddresses(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.Nodes == 0 {
		return []managedNode{{name: cfg.NodeName, podCIDR: cfg.Sim.PodCIDR, address: addresses(0), zone: nodeZone(cfg, 0)}}, nil
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
		nodes = append(nodes, managedNode{name: name, podCIDR: netip.PrefixFrom(addr, perNodeBits).String(),
			address: addresses(int(i)), zone: nodeZone(cfg, int(i))})
	}
	return nodes, nil
}

// nodeZone is the zone of node i: the zones of sim.zones in turn, or none
// when there are none.
func nodeZone(cfg *config.Config, i int) string {
	if len(cfg.Sim.Zones) == 0 {
		return ""
	}
	return cfg.Sim.Zones[i%len(cfg.Sim.Zones)]
}

// nodeAddresses returns the address of node i from sim.nodeAddresses (the
// (i+1)-th of the range, so that a range's network address is not used),
// or a function giving "" when it is not set.
func nodeAddresses(cfg *config.Config) (func(i int) string, error) {
	if cfg.Sim.NodeAddresses == "" {
		return func(int) string { return "" }, nil
	}
	prefix, err := netip.ParsePrefix(cfg.Sim.NodeAddresses)
	if err != nil {
		return nil, fmt.Errorf("sim.nodeAddresses: %w", err)
	}
	prefix = prefix.Masked()
	nodes := max(int(cfg.Nodes), 1)
	if hostBits := prefix.Addr().BitLen() - prefix.Bits(); hostBits < 31 && nodes > 1<<hostBits-1 {
		return nil, fmt.Errorf("sim.nodeAddresses %s holds %d addresses, fewer than the %d nodes", prefix, 1<<hostBits-1, nodes)
	}
	return func(i int) string {
		if prefix.Addr().Is4() {
			b := prefix.Addr().As4()
			a := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]) + uint32(i) + 1
			return netip.AddrFrom4([4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), byte(a)}).String()
		}
		a := prefix.Addr()
		for range i + 1 {
			a = a.Next()
		}
		return a.String()
	}, nil
}

// shardOf places a node name in one of n shards by hash.
func shardOf(name string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(name))
	return int(h.Sum32() % uint32(n))
}
