package hostnode

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestDescribe(t *testing.T) {
	h := New(Options{
		NodeName: "n1", Address: "10.0.0.5", RootDir: t.TempDir(), Port: 10250, Version: "v1",
		Reserved: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("1Ei")},
	})
	node := &corev1.Node{}
	node.Labels = map[string]string{corev1.LabelHostname: "kept"}
	h.Describe(node)
	s := node.Status
	if node.Labels[corev1.LabelHostname] != "kept" || node.Labels[corev1.LabelOSStable] != "linux" {
		t.Errorf("labels %v: an existing one must be kept, missing ones added", node.Labels)
	}
	cpu, alloc := s.Capacity[corev1.ResourceCPU], s.Allocatable[corev1.ResourceCPU]
	cpu.Sub(resource.MustParse("500m"))
	if cpu.Cmp(alloc) != 0 {
		t.Errorf("allocatable cpu %s, want capacity %s less 500m", alloc.String(), s.Capacity.Cpu().String())
	}
	if mem := s.Allocatable[corev1.ResourceMemory]; mem.Sign() != 0 {
		t.Errorf("allocatable memory %s, want 0 when more is reserved than there is", mem.String())
	}
	if pods := s.Capacity[corev1.ResourcePods]; pods.Value() != 110 {
		t.Errorf("pod capacity %s, want the default 110", pods.String())
	}
	if len(s.Addresses) != 2 || s.Addresses[0].Address != "10.0.0.5" || s.DaemonEndpoints.KubeletEndpoint.Port != 10250 {
		t.Errorf("addresses %v, endpoint %d", s.Addresses, s.DaemonEndpoints.KubeletEndpoint.Port)
	}
	for _, c := range s.Conditions {
		if c.Type == corev1.NodeReady {
			t.Errorf("Describe set Ready, which is the provider's")
		}
	}
}

func TestSetReady(t *testing.T) {
	why := ""
	h := New(Options{NodeName: "node-a", NotReady: func() string { return why }})
	var s corev1.NodeStatus
	h.SetReady(&s)
	if len(s.Conditions) != 1 || s.Conditions[0].Status != corev1.ConditionTrue || s.Conditions[0].Reason != "KubeletReady" {
		t.Errorf("Ready = %+v, want True KubeletReady", s.Conditions)
	}
	why = "node is shutting down"
	h.SetReady(&s)
	if len(s.Conditions) != 1 || s.Conditions[0].Status != corev1.ConditionFalse || s.Conditions[0].Reason != "KubeletNotReady" ||
		s.Conditions[0].Message != why {
		t.Errorf("Ready = %+v, want False KubeletNotReady: %s", s.Conditions, why)
	}
}
