package app

import (
	"slices"
	"strings"
	"testing"

	"github.com/nodelet/nodelet/pkg/config"
)

func TestManagedNodesSingle(t *testing.T) {
	cfg := config.Default()
	cfg.NodeName = "n"
	nodes, err := managedNodes(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 1 || nodes[0].name != "n" || nodes[0].podCIDR != cfg.Sim.PodCIDR {
		t.Errorf("managedNodes() = %+v, want one node n with the whole pod range", nodes)
	}
}

func TestShardsCoverEveryNodeOnce(t *testing.T) {
	const total, shards = 1000, 3
	seen := map[string]int{}
	cidrs := map[string]string{}
	for i := range shards {
		cfg := config.Default()
		cfg.NodeName = "sim"
		cfg.Nodes = total
		cfg.Shard = string(rune('0'+i)) + "/3"
		nodes, err := managedNodes(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if len(nodes) < total/shards/2 {
			t.Errorf("shard %d has %d nodes: hashing is badly skewed", i, len(nodes))
		}
		for _, n := range nodes {
			seen[n.name]++
			if other, dup := cidrs[n.podCIDR]; dup {
				t.Errorf("%s and %s share pod range %s", n.name, other, n.podCIDR)
			}
			cidrs[n.podCIDR] = n.name
		}
	}
	if len(seen) != total {
		t.Errorf("shards cover %d nodes, want %d", len(seen), total)
	}
	for name, n := range seen {
		if n != 1 {
			t.Errorf("%s managed %d times", name, n)
		}
	}
}

func TestManagedNodesRangeTooSmall(t *testing.T) {
	cfg := config.Default()
	cfg.NodeName = "sim"
	cfg.Nodes = 300
	cfg.Sim.PodCIDR = "10.1.0.0/16"
	if _, err := managedNodes(cfg); err == nil {
		t.Error("300 nodes of /24 in a /16: want an error")
	}
}

// sim.nodeAddresses gives each node its own address, skipping the range's
// network address, and refuses a range too small for the nodes.
func TestManagedNodeAddresses(t *testing.T) {
	cfg := config.Default()
	cfg.NodeName = "sim"
	cfg.Nodes = 3
	cfg.Sim.NodeAddresses = "127.0.100.0/30"
	nodes, err := managedNodes(cfg)
	if err != nil {
		t.Fatal(err)
	}
	got := []string{}
	for _, n := range nodes {
		got = append(got, n.address)
	}
	if want := []string{"127.0.100.1", "127.0.100.2", "127.0.100.3"}; !slices.Equal(got, want) {
		t.Errorf("addresses %v, want %v", got, want)
	}
	cfg.Nodes = 4
	if _, err := managedNodes(cfg); err == nil || !strings.Contains(err.Error(), "sim.nodeAddresses") {
		t.Errorf("4 nodes in a /30: error %v, want one naming sim.nodeAddresses", err)
	}
}
