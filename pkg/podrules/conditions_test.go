package podrules

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// cond is what a test expects of one condition.
type cond struct {
	status          corev1.ConditionStatus
	reason, message string
}

func TestSetConditions(t *testing.T) {
	const T, F = corev1.ConditionTrue, corev1.ConditionFalse
	notReady := func(names string) cond {
		return cond{F, ReasonNotReady, "containers with unready status: [" + names + "]"}
	}
	tests := []struct {
		name     string
		phase    corev1.PodPhase
		init     []corev1.ContainerStatus
		regular  []corev1.ContainerStatus
		sidecars Sidecars
		sandbox  bool
		// want: ReadyToStartContainers, Initialized, and ContainersReady
		// and Ready (the same).
		toStart, initialized, ready cond
	}{
		{"pending, init incomplete", corev1.PodPending, []corev1.ContainerStatus{waitingCS("i1"), waitingCS("i2")}, []corev1.ContainerStatus{waitingCS("a"), waitingCS("b")}, nil, false,
			cond{F, "", ""}, cond{F, ReasonNotInitialized, "containers with incomplete status: [i1 i2]"}, notReady("a b")},
		{"pending, one init done", corev1.PodPending, []corev1.ContainerStatus{exitedCS("i1", 0), runningCS("i2", true, false)}, []corev1.ContainerStatus{waitingCS("a")}, nil, true,
			cond{T, "", ""}, cond{F, ReasonNotInitialized, "containers with incomplete status: [i2]"}, notReady("a")},
		{"running and ready", corev1.PodRunning, []corev1.ContainerStatus{exitedCS("i", 0)}, []corev1.ContainerStatus{runningCS("a", true, true)}, nil, true,
			cond{T, "", ""}, cond{T, "", ""}, cond{T, "", ""}},
		{"running, one unready", corev1.PodRunning, nil, []corev1.ContainerStatus{runningCS("a", true, true), runningCS("b", true, false)}, nil, true,
			cond{T, "", ""}, cond{T, "", ""}, notReady("b")},
		{"unready sidecar listed first", corev1.PodRunning, []corev1.ContainerStatus{runningCS("s", true, false)}, []corev1.ContainerStatus{runningCS("a", true, false)}, sidecarsAt(0), true,
			cond{T, "", ""}, cond{T, "", ""}, notReady("s a")},
		{"sidecar not started", corev1.PodPending, []corev1.ContainerStatus{runningCS("s", false, false)}, []corev1.ContainerStatus{waitingCS("a")}, sidecarsAt(0), true,
			cond{T, "", ""}, cond{F, ReasonNotInitialized, "containers with incomplete status: [s]"}, notReady("s a")},
		{"back-off", corev1.PodRunning, nil, []corev1.ContainerStatus{backOffCS("a"), runningCS("b", true, true)}, nil, true,
			cond{T, "", ""}, cond{T, "", ""}, notReady("a")},
		{"pending, every container ready", corev1.PodPending, []corev1.ContainerStatus{waitingCS("i")}, nil, nil, true,
			cond{T, "", ""}, cond{F, ReasonNotInitialized, "containers with incomplete status: [i]"}, notReady("")},
		{"succeeded", corev1.PodSucceeded, nil, []corev1.ContainerStatus{exitedCS("a", 0)}, nil, true,
			cond{F, "", ""}, cond{T, "", ""}, cond{F, ReasonPodCompleted, ""}},
		{"failed", corev1.PodFailed, nil, []corev1.ContainerStatus{exitedCS("a", 1)}, nil, true,
			cond{F, "", ""}, cond{T, "", ""}, cond{F, ReasonPodFailed, ""}},
	}
	now := metav1.NewTime(time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.sidecars == nil {
				tt.sidecars = sidecarsAt()
			}
			s := &corev1.PodStatus{Phase: tt.phase, InitContainerStatuses: tt.init, ContainerStatuses: tt.regular}
			SetConditions(s, tt.sidecars, tt.sandbox, now)
			want := map[corev1.PodConditionType]cond{
				corev1.PodScheduled: {T, "", ""}, corev1.PodReadyToStartContainers: tt.toStart,
				corev1.PodInitialized: tt.initialized, corev1.ContainersReady: tt.ready, corev1.PodReady: tt.ready,
			}
			order := []corev1.PodConditionType{corev1.PodScheduled, corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady}
			if len(s.Conditions) != len(order) {
				t.Fatalf("%d conditions, want %d: %+v", len(s.Conditions), len(order), s.Conditions)
			}
			for i, c := range s.Conditions {
				if c.Type != order[i] {
					t.Errorf("condition %d is %s, want %s", i, c.Type, order[i])
				}
				if got := (cond{c.Status, c.Reason, c.Message}); got != want[c.Type] {
					t.Errorf("%s = %+v, want %+v", c.Type, got, want[c.Type])
				}
				if !c.LastTransitionTime.Equal(&now) {
					t.Errorf("%s changed at %v, want %v", c.Type, c.LastTransitionTime, now)
				}
			}
		})
	}
}

func TestSetCondition(t *testing.T) {
	t1 := metav1.NewTime(time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC))
	t2 := metav1.NewTime(t1.Add(time.Minute))
	gate := corev1.PodCondition{Type: "example.com/gate", Status: corev1.ConditionTrue}
	tests := []struct {
		name     string
		status   corev1.ConditionStatus
		reason   string
		wantTime metav1.Time
	}{
		{"same status, new reason: the time stays", corev1.ConditionFalse, "Other", t1},
		{"status changes: the time moves", corev1.ConditionTrue, "", t2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &corev1.PodStatus{Conditions: []corev1.PodCondition{gate}}
			SetCondition(s, corev1.PodReady, corev1.ConditionFalse, "ContainersNotReady", "m", t1)
			SetCondition(s, corev1.PodReady, tt.status, tt.reason, "", t2)
			if len(s.Conditions) != 2 || s.Conditions[0] != gate {
				t.Fatalf("conditions %+v, want the gate kept and one Ready", s.Conditions)
			}
			c := s.Conditions[1]
			if c.Type != corev1.PodReady || c.Status != tt.status || c.Reason != tt.reason || c.Message != "" || !c.LastTransitionTime.Equal(&tt.wantTime) {
				t.Errorf("Ready = %+v, want %s %q at %v", c, tt.status, tt.reason, tt.wantTime)
			}
		})
	}
}

// TestSetConditionsAllocations checks that setting the conditions of a
// pod that has them, and is ready or final, allocates nothing: the sim
// provider does it for every status change of thousands of pods.
func TestSetConditionsAllocations(t *testing.T) {
	now := metav1.Now()
	sidecars := sidecarsAt()
	s := &corev1.PodStatus{Phase: corev1.PodRunning, InitContainerStatuses: []corev1.ContainerStatus{exitedCS("i", 0)},
		ContainerStatuses: []corev1.ContainerStatus{runningCS("a", true, true)}}
	SetConditions(s, sidecars, true, now)
	allocs := testing.AllocsPerRun(100, func() {
		s.Phase = Phase(s, sidecars, false)
		SetConditions(s, sidecars, true, now)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per status change, want 0", allocs)
	}
}
