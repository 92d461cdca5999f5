package config

import (
	"strings"
	"testing"
)

// kwok's options: bad input names the flag, --manage-all-nodes conflicts
// with the selectors as in kwok, only sim nodes are taken over, and
// --shard auto splits only Nodes taken over.
func TestValidateTakeOver(t *testing.T) {
	for _, tt := range []struct {
		name string
		set  func(*Config)
		want []string // in the errors; none: valid
	}{
		{"kwok's annotation", func(c *Config) { c.ManageNodesWithAnnotationSelector = KwokNodeSelector }, nil},
		{"no node name: kwok's default", func(c *Config) { c.NodeName = "" }, nil},
		{"both selectors and own nodes", func(c *Config) {
			c.ManageNodesWithAnnotationSelector, c.ManageNodesWithLabelSelector, c.Nodes = "a=b", "type in (kwok,fake)", 3
		}, nil},
		{"all, sharded among replicas", func(c *Config) { c.NodeName, c.ManageAllNodes, c.Shard = "", true, ShardAuto }, nil},
		{"a bad annotation selector", func(c *Config) { c.ManageNodesWithAnnotationSelector = "a==b=c" },
			[]string{"manageNodesWithAnnotationSelector", "--manage-nodes-with-annotation-selector"}},
		{"a bad label selector", func(c *Config) { c.ManageNodesWithLabelSelector = "in (" },
			[]string{"manageNodesWithLabelSelector", "--manage-nodes-with-label-selector"}},
		{"all and a selector", func(c *Config) { c.ManageAllNodes, c.ManageNodesWithLabelSelector = true, "a=b" },
			[]string{"--manage-all-nodes conflicts"}},
		{"one node by name", func(c *Config) { c.NodeName, c.ManageSingleNode = "", "kwok-0" }, nil},
		{"one node and all", func(c *Config) { c.ManageSingleNode, c.ManageAllNodes = "kwok-0", true }, []string{"--manage-single-node conflicts"}},
		{"one node and a selector", func(c *Config) { c.ManageSingleNode, c.ManageNodesWithLabelSelector = "kwok-0", "a=b" }, []string{"--manage-single-node conflicts"}},
		{"a bad single node name", func(c *Config) { c.ManageSingleNode = "Bad_Name" }, []string{"manageSingleNode", "--manage-single-node"}},
		{"the process provider", func(c *Config) { c.Provider, c.ManageAllNodes = ProviderProcess, true }, []string{"only the sim provider"}},
		{"no node name on process", func(c *Config) { c.Provider, c.NodeName = ProviderProcess, "" }, []string{"nodeName: Required"}},
		{"shard auto without a selector", func(c *Config) { c.Shard = ShardAuto }, []string{"--shard auto splits the Nodes taken over"}},
		{"shard auto with own nodes", func(c *Config) { c.Shard, c.Nodes, c.ManageAllNodes = ShardAuto, 2, true }, []string{"not the agent's own"}},
		{"a bad shard group", func(c *Config) { c.ShardGroup = "Not_A_Label" }, []string{"--shard-group"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			c.NodeName = "n"
			tt.set(c)
			msg := c.Validate().ToAggregate()
			if len(tt.want) == 0 {
				if msg != nil {
					t.Errorf("Validate = %v, want valid", msg)
				}
				return
			}
			if msg == nil {
				t.Fatalf("Validate = nil, want errors with %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(msg.Error(), w) {
					t.Errorf("Validate = %v, want it to say %q", msg, w)
				}
			}
		})
	}
}

func TestNodeSelection(t *testing.T) {
	c := Default()
	if s := c.NodeSelection(); s != (NodeSelection{Annotations: KwokNodeSelector}) || !c.TakesOverNodes() {
		t.Errorf("a sim agent without nodes: %+v, want kwok's annotation selector", s)
	}
	c.NodeName = "n"
	if c.TakesOverNodes() {
		t.Error("an agent with a node of its own takes Nodes over unasked")
	}
	c.ManageNodesWithLabelSelector = "x=y"
	if s := c.NodeSelection(); s != (NodeSelection{Labels: "x=y"}) {
		t.Errorf("selection %+v, want the label selector alone", s)
	}
}
