package eviction

import (
	"maps"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

func TestEvictionStatusMessage(t *testing.T) {
	twoContainers := func(p *corev1.Pod) {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "sidecar", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}}})
	}
	tests := []struct {
		name      string
		hard      map[string]string
		setNode   func(n *fakeNode)
		configure func(*corev1.Pod)
		stats     *statsv1alpha1.PodStats
		want      string
		wantAnn   map[string]string
	}{
		{name: "memory, one container over its request",
			hard:    memoryHard,
			setNode: func(n *fakeNode) { n.setMemory(5432*Ki, 8*Gi) },
			stats:   podUsage(123*Mi, 0, 1),
			want:    "The node was low on resource: memory. Threshold quantity: 100Mi, available: 5432Ki (signal memory.available). Container app was using 123Mi, request is 0, has larger consumption of memory. ",
			wantAnn: map[string]string{"offending_containers": "app", "offending_containers_usage": "123Mi", "starved_resource": "memory"}},
		{name: "memory, only the containers over their requests",
			hard:      memoryHard,
			setNode:   func(n *fakeNode) { n.setMemory(5432*Ki, 8*Gi) },
			configure: twoContainers,
			stats: func() *statsv1alpha1.PodStats {
				ps := podUsage(123*Mi, 0, 1)
				ps.Containers = append(ps.Containers,
					statsv1alpha1.ContainerStats{Name: "sidecar", Memory: &statsv1alpha1.MemoryStats{WorkingSetBytes: ptr(uint64(32 * Mi))}},
					statsv1alpha1.ContainerStats{Name: "debugger", Memory: &statsv1alpha1.MemoryStats{WorkingSetBytes: ptr(uint64(Gi))}})
				return ps
			}(),
			want:    "The node was low on resource: memory. Threshold quantity: 100Mi, available: 5432Ki (signal memory.available). Container app was using 123Mi, request is 0, has larger consumption of memory. ",
			wantAnn: map[string]string{"offending_containers": "app", "offending_containers_usage": "123Mi", "starved_resource": "memory"}},
		{name: "memory, pod-level requests",
			hard:    memoryHard,
			setNode: func(n *fakeNode) { n.setMemory(5432*Ki, 8*Gi) },
			configure: func(p *corev1.Pod) {
				p.Spec.Resources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("100Mi")}}
			},
			stats: podUsage(123*Mi, 0, 1),
			want:  "The node was low on resource: memory. Threshold quantity: 100Mi, available: 5432Ki (signal memory.available). Pod a was using 123Mi, request is 100Mi, has larger consumption of memory. Container app was using 123Mi, request is 0, has larger consumption of memory. ",
			wantAnn: map[string]string{"offending_pod": "a", "offending_pod_usage": "123Mi",
				"offending_containers": "app", "offending_containers_usage": "123Mi", "starved_resource": "memory"}},
		{name: "disk, a percentage threshold",
			hard:    map[string]string{"nodefs.available": "10%"},
			setNode: func(n *fakeNode) { n.setNodeFs(5*Gi, 100*Gi) },
			stats:   podUsage(Mi, 2*Gi, 1),
			want:    "The node was low on resource: ephemeral-storage. Threshold quantity: 10Gi, available: 5Gi (signal nodefs.available). Container app was using 2Gi, request is 0, has larger consumption of ephemeral-storage. ",
			wantAnn: map[string]string{"offending_containers": "app", "offending_containers_usage": "2Gi", "starved_resource": "ephemeral-storage"}},
		{name: "pids, no container named",
			hard:    map[string]string{"pid.available": "100"},
			setNode: func(n *fakeNode) { n.setPIDs(950, 1000) },
			stats:   podUsage(Mi, 0, 500),
			want:    "The node was low on resource: pids. Threshold quantity: 100, available: 50 (signal pid.available). ",
			wantAnn: map[string]string{"offending_containers": "", "offending_containers_usage": "", "starved_resource": "pids"}},
		{name: "no stats for the pod",
			hard:    memoryHard,
			setNode: func(n *fakeNode) { n.setMemory(5432*Ki, 8*Gi) },
			want:    "The node was low on resource: memory. Threshold quantity: 100Mi, available: 5432Ki (signal memory.available). ",
			wantAnn: map[string]string{"offending_containers": "", "offending_containers_usage": "", "starved_resource": "memory"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newFakeNode()
			tt.setNode(n)
			p := newPod("a", 0, 0, 0)
			if tt.configure != nil {
				tt.configure(p)
			}
			n.addPod(p, tt.stats)
			m, _ := newManager(t, n, false, Options{}, tt.hard, nil, nil, nil)
			mustSync(t, m)
			if len(n.evicted) != 1 {
				t.Fatalf("evictions: %+v", n.evicted)
			}
			s := n.evicted[0].status
			if s.Message != tt.want {
				t.Errorf("message\n got %q\nwant %q", s.Message, tt.want)
			}
			if !maps.Equal(s.Annotations, tt.wantAnn) {
				t.Errorf("annotations %v, want %v", s.Annotations, tt.wantAnn)
			}
			c := s.Condition
			if c.Type != corev1.DisruptionTarget || c.Status != corev1.ConditionTrue || c.Reason != "TerminationByKubelet" ||
				c.Message != tt.want || c.ObservedGeneration != 3 || !c.LastTransitionTime.Time.Equal(start) {
				t.Errorf("condition %+v", c)
			}
		})
	}
}

func TestEvictionStatusApply(t *testing.T) {
	s := EvictionStatus{
		Message:   "The node was low on resource: memory. ",
		Condition: corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "TerminationByKubelet", LastTransitionTime: metav1.NewTime(start)},
	}
	status := corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	s.Apply(&status)
	if status.Phase != corev1.PodFailed || status.Reason != "Evicted" || status.Message != s.Message || len(status.Conditions) != 2 || status.Conditions[1] != s.Condition {
		t.Errorf("applied: %+v", status)
	}
	// Applied again later, the condition keeps its transition time.
	earlier := metav1.NewTime(start.Add(-time.Hour))
	status.Conditions[1].LastTransitionTime = earlier
	s.Apply(&status)
	if len(status.Conditions) != 2 || !status.Conditions[1].LastTransitionTime.Equal(&earlier) {
		t.Errorf("applied again: %+v", status.Conditions)
	}
}
