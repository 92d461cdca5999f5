package app

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/agent"
	"github.com/nodelet/nodelet/pkg/config"
)

// A sim agent that takes Nodes over is built from kwok's options, with or
// without nodes of its own, sharded or not.
func TestNewTakesNodesOver(t *testing.T) {
	for _, set := range []func(*config.Config){
		func(c *config.Config) {},
		func(c *config.Config) { c.ManageAllNodes, c.Shard = true, config.ShardAuto },
		func(c *config.Config) { c.ManageSingleNode = "kwok-0" },
		// The kubelet API serves the Nodes taken over, as the own ones.
		func(c *config.Config) { c.EnableServer = ptr.To(true) },
		func(c *config.Config) {
			c.NodeName, c.ManageAllNodes, c.EnableServer = "own", true, ptr.To(true)
		},
		func(c *config.Config) {
			c.NodeName, c.Nodes, c.Shard, c.ManageNodesWithLabelSelector = "own", 4, "1/2", "type=kwok"
		},
	} {
		cfg := config.Default()
		set(cfg)
		if errs := cfg.Validate(); len(errs) > 0 {
			t.Fatal(errs)
		}
		if _, err := New(Credentials{Kubeconfig: "/nonexistent"}, cfg, nil); err != nil {
			t.Errorf("New: %v", err)
		}
	}
}

// A Node taken over is described as its creator wrote it: its address,
// pod range and capacity, which its pods are admitted against.
func TestTakenNodeDescription(t *testing.T) {
	cfg := config.Default()
	cfg.Sim.PodCIDR = "10.8.0.0/16"
	layout, err := newNodeLayout(cfg)
	if err != nil {
		t.Fatal(err)
	}
	newProvider := simProvider(cfg, layout, newSimStages(cfg), newSimRules(cfg))
	theirs := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "kwok-7"},
		Spec:       corev1.NodeSpec{PodCIDR: "10.99.0.0/24"},
		Status: corev1.NodeStatus{
			Capacity:  corev1.ResourceList{corev1.ResourcePods: resource.MustParse("3"), corev1.ResourceCPU: resource.MustParse("2")},
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.1.2.3"}},
		},
	}
	// As Karpenter's kwok provider writes them: capacity what the NodeClaim
	// asked for, allocatable the instance type's.
	karpenter := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "kwok-9"},
		Status: corev1.NodeStatus{
			Capacity:    corev1.ResourceList{corev1.ResourcePods: resource.MustParse("1"), corev1.ResourceCPU: resource.MustParse("2")},
			Allocatable: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("64"), corev1.ResourceCPU: resource.MustParse("3900m")},
		},
	}
	bare := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "kwok-8"}}
	for _, tt := range []struct {
		node                *corev1.Node
		address, cidr, pods string
	}{
		{theirs, "10.1.2.3", "10.99.0.0/24", "3"},
		{karpenter, cfg.Address, layout.takenPodCIDR("kwok-9"), "64"},
		{bare, cfg.Address, layout.takenPodCIDR("kwok-8"), cfg.Sim.Capacity.Pods().String()},
	} {
		p, err := newProvider(&agent.Env{Node: agent.NodeInfo{Name: tt.node.Name, Index: -1, Node: tt.node},
			Admit: func(*corev1.Pod) error { return nil }, NodeConditions: func(*corev1.Node) {}, NotReady: func() string { return "" }})
		if err != nil {
			t.Fatal(err)
		}
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: tt.node.Name}}
		p.ConfigureNode(context.Background(), n)
		if n.Spec.PodCIDR != tt.cidr || n.Status.Capacity.Pods().String() != tt.pods {
			t.Errorf("%s: pod range %s, pods %s; want %s, %s", tt.node.Name, n.Spec.PodCIDR, n.Status.Capacity.Pods(), tt.cidr, tt.pods)
		}
		if tt.address != "" && (len(n.Status.Addresses) == 0 || n.Status.Addresses[0].Address != tt.address) {
			t.Errorf("%s: addresses %v, want %s first", tt.node.Name, n.Status.Addresses, tt.address)
		}
		if port := n.Status.DaemonEndpoints.KubeletEndpoint.Port; port != cfg.Port {
			t.Errorf("%s: kubelet endpoint port %d, want the agent's %d", tt.node.Name, port, cfg.Port)
		}
	}
	if got := layout.takenPodCIDR("kwok-8"); !strings.HasPrefix(got, "10.8.") || !strings.HasSuffix(got, "/24") {
		t.Errorf("takenPodCIDR = %s, want a /24 of 10.8.0.0/16", got)
	}
}
