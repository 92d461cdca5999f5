package podrules

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func waitingCS(name string) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}
}

func runningCS(name string, started, ready bool) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, Ready: ready, Started: &started,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
}

func exitedCS(name string, code int32) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: TerminatedReason(code)}}}
}

func backOffCS(name string) corev1.ContainerStatus {
	cs := waitingCS(name)
	cs.State.Waiting.Reason = "CrashLoopBackOff"
	cs.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 1}
	return cs
}

// sidecarsAt is Sidecars for the init containers at the given indexes.
func sidecarsAt(at ...int) Sidecars {
	return func(i int) bool {
		for _, j := range at {
			if i == j {
				return true
			}
		}
		return false
	}
}

func TestPhase(t *testing.T) {
	tests := []struct {
		name     string
		init     []corev1.ContainerStatus
		regular  []corev1.ContainerStatus
		sidecars Sidecars
		stopped  bool
		want     corev1.PodPhase
	}{
		{"nothing started", []corev1.ContainerStatus{waitingCS("i")}, []corev1.ContainerStatus{waitingCS("a")}, nil, false, corev1.PodPending},
		{"init running", []corev1.ContainerStatus{runningCS("i", true, false)}, []corev1.ContainerStatus{waitingCS("a")}, nil, false, corev1.PodPending},
		{"init failed for good", []corev1.ContainerStatus{exitedCS("i", 1)}, []corev1.ContainerStatus{waitingCS("a")}, nil, false, corev1.PodFailed},
		{"one still waiting", []corev1.ContainerStatus{exitedCS("i", 0)}, []corev1.ContainerStatus{runningCS("a", true, true), waitingCS("b")}, nil, false, corev1.PodPending},
		{"all running", []corev1.ContainerStatus{exitedCS("i", 0)}, []corev1.ContainerStatus{runningCS("a", true, true), runningCS("b", false, false)}, nil, false, corev1.PodRunning},
		{"back-off counts as running", nil, []corev1.ContainerStatus{backOffCS("a")}, nil, false, corev1.PodRunning},
		{"one ran and exited, one runs", nil, []corev1.ContainerStatus{exitedCS("a", 1), runningCS("b", true, true)}, nil, false, corev1.PodRunning},
		{"all succeeded", nil, []corev1.ContainerStatus{exitedCS("a", 0), exitedCS("b", 0)}, nil, false, corev1.PodSucceeded},
		{"one failed", nil, []corev1.ContainerStatus{exitedCS("a", 0), exitedCS("b", 2)}, nil, false, corev1.PodFailed},
		{"sidecar not started", []corev1.ContainerStatus{runningCS("s", false, false)}, []corev1.ContainerStatus{waitingCS("a")}, sidecarsAt(0), false, corev1.PodPending},
		{"sidecar started, app runs", []corev1.ContainerStatus{runningCS("s", true, false)}, []corev1.ContainerStatus{runningCS("a", true, true)}, sidecarsAt(0), false, corev1.PodRunning},
		{"sidecar killed after the app succeeded", []corev1.ContainerStatus{exitedCS("s", 143)}, []corev1.ContainerStatus{exitedCS("a", 0)}, sidecarsAt(0), false, corev1.PodSucceeded},
		{"init failed, its sidecar still stopping: no terminal phase yet", []corev1.ContainerStatus{runningCS("s", true, false), exitedCS("i", 1)}, []corev1.ContainerStatus{waitingCS("a")}, sidecarsAt(0), false, corev1.PodPending},
		{"init failed, its sidecar stopped", []corev1.ContainerStatus{exitedCS("s", 143), exitedCS("i", 1)}, []corev1.ContainerStatus{waitingCS("a")}, sidecarsAt(0), false, corev1.PodFailed},
		{"stopped while pending", []corev1.ContainerStatus{waitingCS("i")}, []corev1.ContainerStatus{waitingCS("a")}, nil, true, corev1.PodFailed},
		{"stopped while running", nil, []corev1.ContainerStatus{runningCS("a", true, true)}, nil, true, corev1.PodFailed},
		{"stopped, containers done, init not", []corev1.ContainerStatus{waitingCS("i")}, []corev1.ContainerStatus{exitedCS("a", 0)}, nil, true, corev1.PodSucceeded},
		{"stopped after succeeding", nil, []corev1.ContainerStatus{exitedCS("a", 0)}, nil, true, corev1.PodSucceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.sidecars == nil {
				tt.sidecars = sidecarsAt()
			}
			s := &corev1.PodStatus{InitContainerStatuses: tt.init, ContainerStatuses: tt.regular}
			if got := Phase(s, tt.sidecars, tt.stopped); got != tt.want {
				t.Errorf("Phase = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestInitCompleted(t *testing.T) {
	backOff := backOffCS("i")
	tests := []struct {
		name    string
		cs      corev1.ContainerStatus
		sidecar bool
		want    bool
	}{
		{"exited 0", exitedCS("i", 0), false, true},
		{"exited 1", exitedCS("i", 1), false, false},
		{"running", runningCS("i", true, true), false, false},
		{"waiting to restart", backOff, false, false},
		{"sidecar exited 0", exitedCS("s", 0), true, false},
	}
	for _, tt := range tests {
		if got := InitCompleted(&tt.cs, tt.sidecar); got != tt.want {
			t.Errorf("%s: InitCompleted = %t, want %t", tt.name, got, tt.want)
		}
	}
}

func TestTerminatedReason(t *testing.T) {
	for code, want := range map[int32]string{0: "Completed", 1: "Error", 137: "Error", -1: "Error"} {
		if got := TerminatedReason(code); got != want {
			t.Errorf("TerminatedReason(%d) = %q, want %q", code, got, want)
		}
	}
}
