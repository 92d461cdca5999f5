package app

import (
	"fmt"
	"hash/fnv"
	"net/netip"

	"github.com/nodelet/nodelet/pkg/agent"
	"github.com/nodelet/nodelet/pkg/config"
)

// managedNodes are the nodes of this agent: one named exactly cfg.NodeName,
// or cfg.Nodes named <nodeName>-<i>, less those that belong to other
// shards; none without a node name (the agent only takes Nodes over).
func managedNodes(cfg *config.Config) (agent.Nodes, error) {
	if cfg.NodeName == "" {
		return agent.Nodes{}, nil
	}
	if cfg.Nodes == 0 {
		return agent.One(cfg.NodeName), nil
	}
	nodes := agent.Numbered(cfg.NodeName, int(cfg.Nodes))
	if cfg.Shard == "" || cfg.Shard == config.ShardAuto {
		return nodes, nil
	}
	i, n, err := config.ParseShard(cfg.Shard)
	if err != nil {
		return agent.Nodes{}, fmt.Errorf("shard: %w", err)
	}
	return nodes.Shard(i, n)
}

// nodeLayout places each node of the config by its index: with several
// nodes, node i takes the i-th /24 of the pod range, so that shards never
// hand out the same pod IP, the (i+1)-th address of sim.nodeAddresses, and
// the zone sim.zones[i % len(sim.zones)], so that every shard spreads them
// alike. A single node takes the whole pod range, the first address and
// the first zone.
type nodeLayout struct {
	cfg       *config.Config
	first     uint32 // the pod range's first address, with several nodes
	addresses func(i int) string
}

// perNodeBits is the size of each node's pod range with several nodes.
const perNodeBits = 24

// newNodeLayout checks that the pod range and sim.nodeAddresses hold
// every node.
func newNodeLayout(cfg *config.Config) (*nodeLayout, error) {
	addresses, err := nodeAddresses(cfg)
	if err != nil {
		return nil, err
	}
	l := &nodeLayout{cfg: cfg, addresses: addresses}
	if cfg.Nodes == 0 {
		return l, nil
	}
	base, err := netip.ParsePrefix(cfg.Sim.PodCIDR)
	if err != nil {
		return nil, fmt.Errorf("sim.podCIDR: %w", err)
	}
	base = base.Masked()
	if base.Bits() > perNodeBits || !base.Addr().Is4() {
		return nil, fmt.Errorf("sim.podCIDR %s: need an IPv4 range of /%d or larger for several nodes", base, perNodeBits)
	}
	if room := 1 << (perNodeBits - base.Bits()); int(cfg.Nodes) > room {
		return nil, fmt.Errorf("sim.podCIDR %s holds %d nodes of /%d, not %d", base, room, perNodeBits, cfg.Nodes)
	}
	start := base.Addr().As4()
	l.first = uint32(start[0])<<24 | uint32(start[1])<<16 | uint32(start[2])<<8
	return l, nil
}

// takenPodCIDR is the pod range of a Node taken over that has none of its
// own: the /24 of the pod range that its name hashes to, so that replicas
// agree without talking (two names may share one), or the whole range
// when it is too small to split.
func (l *nodeLayout) takenPodCIDR(name string) string {
	base, err := netip.ParsePrefix(l.cfg.Sim.PodCIDR)
	if err != nil || !base.Addr().Is4() || base.Bits() > perNodeBits {
		return l.cfg.Sim.PodCIDR
	}
	base = base.Masked()
	h := fnv.New32a()
	h.Write([]byte(name))
	room := uint32(1) << (perNodeBits - base.Bits())
	start := base.Addr().As4()
	a := (uint32(start[0])<<24 | uint32(start[1])<<16 | uint32(start[2])<<8) + (h.Sum32()%room)<<8
	addr := netip.AddrFrom4([4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), 0})
	return netip.PrefixFrom(addr, perNodeBits).String()
}

// podCIDR is node i's pod range.
func (l *nodeLayout) podCIDR(i int) string {
	if l.cfg.Nodes == 0 {
		return l.cfg.Sim.PodCIDR
	}
	a := l.first + uint32(i)<<8
	addr := netip.AddrFrom4([4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), 0})
	return netip.PrefixFrom(addr, perNodeBits).String()
}

// address is node i's own InternalIP, or "" for the agent's address.
func (l *nodeLayout) address(i int) string { return l.addresses(i) }

// zone is the zone of node i: the zones of sim.zones in turn, or none
// when there are none.
func (l *nodeLayout) zone(i int) string {
	if len(l.cfg.Sim.Zones) == 0 {
		return ""
	}
	return l.cfg.Sim.Zones[i%len(l.cfg.Sim.Zones)]
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
