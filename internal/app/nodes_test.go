package app

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/pkg/agent"
	"github.com/nodelet/nodelet/pkg/config"
)

// placed is a managed node where the layout puts it.
type placed struct{ name, podCIDR, address, zone string }

// place lists the nodes of cfg where the layout puts them.
func place(cfg *config.Config) ([]placed, error) {
	nodes, err := managedNodes(cfg)
	if err != nil {
		return nil, err
	}
	layout, err := newNodeLayout(cfg)
	if err != nil {
		return nil, err
	}
	var out []placed
	for _, n := range nodes.List() {
		out = append(out, placed{name: n.Name, podCIDR: layout.podCIDR(n.Index), address: layout.address(n.Index), zone: layout.zone(n.Index)})
	}
	return out, nil
}

func TestManagedNodesSingle(t *testing.T) {
	cfg := config.Default()
	cfg.NodeName = "n"
	nodes, err := place(cfg)
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
		nodes, err := place(cfg)
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
	if _, err := place(cfg); err == nil {
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
	nodes, err := place(cfg)
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
	if _, err := place(cfg); err == nil || !strings.Contains(err.Error(), "sim.nodeAddresses") {
		t.Errorf("4 nodes in a /30: error %v, want one naming sim.nodeAddresses", err)
	}
}

// sim.zones are dealt to the nodes by index, the same whatever the shard.
func TestManagedNodeZones(t *testing.T) {
	tests := []struct {
		name  string
		nodes int32
		zones []string
		shard string
		want  map[string]string // node name → zone
	}{
		{name: "single node takes the first zone", zones: []string{"a", "b"}, want: map[string]string{"sim": "a"}},
		{name: "no zones", nodes: 2, want: map[string]string{"sim-0": "", "sim-1": ""}},
		{name: "round robin", nodes: 5, zones: []string{"a", "b"},
			want: map[string]string{"sim-0": "a", "sim-1": "b", "sim-2": "a", "sim-3": "b", "sim-4": "a"}},
		{name: "one zone", nodes: 2, zones: []string{"a"}, want: map[string]string{"sim-0": "a", "sim-1": "a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.NodeName, cfg.Nodes, cfg.Sim.Zones = "sim", tt.nodes, tt.zones
			nodes, err := place(cfg)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, n := range nodes {
				got[n.name] = n.zone
			}
			if !maps.Equal(got, tt.want) {
				t.Errorf("zones %v, want %v", got, tt.want)
			}
		})
	}

	cfg := config.Default()
	cfg.NodeName, cfg.Nodes, cfg.Sim.Zones = "sim", 30, []string{"a", "b", "c"}
	all, err := place(cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, n := range all {
		want[n.name] = n.zone
	}
	got := map[string]string{}
	for i := range 3 {
		cfg.Shard = strconv.Itoa(i) + "/3"
		nodes, err := place(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range nodes {
			got[n.name] = n.zone
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("sharded zones %v, want the unsharded %v", got, want)
	}
}

// A sim node describes itself as cluster tooling expects: its own pod
// range, provider ID, zone, region and instance type, with the user's
// nodeLabels over the defaults.
func TestSimNodeDescription(t *testing.T) {
	cfg := config.Default()
	cfg.NodeName, cfg.Nodes = "sim", 4
	cfg.Sim.PodCIDR, cfg.Sim.NodeAddresses = "10.8.0.0/16", "127.0.50.0/24"
	cfg.Sim.Zones, cfg.Sim.Region = []string{"zone-a", "zone-b", "zone-c"}, "region-1"
	cfg.NodeLabels = map[string]string{corev1.LabelInstanceTypeStable: "mine"}
	nodes, err := managedNodes(cfg)
	if err != nil {
		t.Fatal(err)
	}
	layout, err := newNodeLayout(cfg)
	if err != nil {
		t.Fatal(err)
	}
	newProvider := simProvider(cfg, layout, newSimStages(cfg), newSimRules(cfg))
	var built []agent.Provider
	for _, n := range nodes.List() {
		p, err := newProvider(&agent.Env{Node: n, Admit: func(*corev1.Pod) error { return nil },
			NodeConditions: func(*corev1.Node) {}, NotReady: func() string { return "" }})
		if err != nil {
			t.Fatal(err)
		}
		built = append(built, p)
	}
	tests := []struct {
		name, cidr, address, zone string
	}{
		{"sim-0", "10.8.0.0/24", "127.0.50.1", "zone-a"},
		{"sim-1", "10.8.1.0/24", "127.0.50.2", "zone-b"},
		{"sim-2", "10.8.2.0/24", "127.0.50.3", "zone-c"},
		{"sim-3", "10.8.3.0/24", "127.0.50.4", "zone-a"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: tt.name, Labels: maps.Clone(cfg.NodeLabels)}}
			built[i].ConfigureNode(context.Background(), n)
			if n.Name != tt.name || n.Spec.PodCIDR != tt.cidr || !slices.Equal(n.Spec.PodCIDRs, []string{tt.cidr}) ||
				n.Spec.ProviderID != "nodelet://"+tt.name {
				t.Errorf("node %s spec %+v, want pod range %s and provider ID nodelet://%s", n.Name, n.Spec, tt.cidr, tt.name)
			}
			if len(n.Status.Addresses) == 0 || n.Status.Addresses[0] != (corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: tt.address}) {
				t.Errorf("addresses %v, want InternalIP %s first", n.Status.Addresses, tt.address)
			}
			for k, want := range map[string]string{
				corev1.LabelTopologyZone: tt.zone, corev1.LabelTopologyRegion: "region-1",
				corev1.LabelInstanceTypeStable: "mine", corev1.LabelHostname: tt.name,
			} {
				if got := n.Labels[k]; got != want {
					t.Errorf("label %s = %q, want %q", k, got, want)
				}
			}
		})
	}
}
