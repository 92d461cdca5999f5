package lifecycle

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestPodStatus(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1", Generation: 3},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "init"}},
			Containers:     []corev1.Container{{Name: "a"}, {Name: "b"}},
		},
	}
	running := func(name string, attempt int) *ContainerStatus {
		return &ContainerStatus{Name: name, Attempt: attempt, State: StateRunning, StartedAt: t0}
	}
	exited := func(name string, attempt, code int) *ContainerStatus {
		reason := "Completed"
		if code != 0 {
			reason = "Error"
		}
		return &ContainerStatus{Name: name, Attempt: attempt, State: StateExited, StartedAt: t0, FinishedAt: t0.Add(time.Second), ExitCode: code, Reason: reason}
	}
	initDone := containerView{spec: &pod.Spec.InitContainers[0], latest: exited("init", 0, 0), final: true}
	tests := []struct {
		name       string
		view       podView
		wantPhase  corev1.PodPhase
		wantReady  bool
		wantInit   corev1.ConditionStatus
		wantStates []string // per regular container: running, waiting:<reason>, terminated:<reason>
	}{
		{
			name: "nothing started: pending, initializing",
			view: podView{init: []containerView{{spec: &pod.Spec.InitContainers[0]}},
				regular: []containerView{{spec: &pod.Spec.Containers[0]}, {spec: &pod.Spec.Containers[1]}}},
			wantPhase: corev1.PodPending, wantInit: corev1.ConditionFalse,
			wantStates: []string{"waiting:PodInitializing", "waiting:PodInitializing"},
		},
		{
			name: "init done, containers creating",
			view: podView{sandbox: true, init: []containerView{initDone},
				regular: []containerView{{spec: &pod.Spec.Containers[0]}, {spec: &pod.Spec.Containers[1]}}},
			wantPhase: corev1.PodPending, wantInit: corev1.ConditionTrue,
			wantStates: []string{"waiting:ContainerCreating", "waiting:ContainerCreating"},
		},
		{
			name: "all running and ready",
			view: podView{sandbox: true, init: []containerView{initDone}, regular: []containerView{
				{spec: &pod.Spec.Containers[0], latest: running("a", 0), started: true, ready: true},
				{spec: &pod.Spec.Containers[1], latest: running("b", 0), started: true, ready: true}}},
			wantPhase: corev1.PodRunning, wantReady: true, wantInit: corev1.ConditionTrue,
			wantStates: []string{"running", "running"},
		},
		{
			name: "one not ready: running, not ready",
			view: podView{sandbox: true, init: []containerView{initDone}, regular: []containerView{
				{spec: &pod.Spec.Containers[0], latest: running("a", 0), started: true, ready: true},
				{spec: &pod.Spec.Containers[1], latest: running("b", 0), started: true}}},
			wantPhase: corev1.PodRunning, wantInit: corev1.ConditionTrue,
			wantStates: []string{"running", "running"},
		},
		{
			name: "crash loop: running phase, waiting with last state",
			view: podView{sandbox: true, init: []containerView{initDone}, regular: []containerView{
				{spec: &pod.Spec.Containers[0], latest: exited("a", 2, 1), waitingReason: "CrashLoopBackOff"},
				{spec: &pod.Spec.Containers[1], latest: running("b", 0), started: true, ready: true}}},
			wantPhase: corev1.PodRunning, wantInit: corev1.ConditionTrue,
			wantStates: []string{"waiting:CrashLoopBackOff", "running"},
		},
		{
			name: "all exited 0 for good: succeeded",
			view: podView{sandbox: true, init: []containerView{initDone}, regular: []containerView{
				{spec: &pod.Spec.Containers[0], latest: exited("a", 0, 0), final: true},
				{spec: &pod.Spec.Containers[1], latest: exited("b", 0, 0), final: true}}},
			wantPhase: corev1.PodSucceeded, wantInit: corev1.ConditionTrue,
			wantStates: []string{"terminated:Completed", "terminated:Completed"},
		},
		{
			name: "one failed for good: failed",
			view: podView{sandbox: true, init: []containerView{initDone}, regular: []containerView{
				{spec: &pod.Spec.Containers[0], latest: exited("a", 0, 0), final: true},
				{spec: &pod.Spec.Containers[1], latest: exited("b", 0, 2), final: true}}},
			wantPhase: corev1.PodFailed, wantInit: corev1.ConditionTrue,
			wantStates: []string{"terminated:Completed", "terminated:Error"},
		},
		{
			name: "init container failed for good: failed, containers never start",
			view: podView{sandbox: true, init: []containerView{{spec: &pod.Spec.InitContainers[0], latest: exited("init", 0, 1), final: true}},
				regular: []containerView{{spec: &pod.Spec.Containers[0]}, {spec: &pod.Spec.Containers[1]}}},
			wantPhase: corev1.PodFailed, wantInit: corev1.ConditionFalse,
			wantStates: []string{"waiting:PodInitializing", "waiting:PodInitializing"},
		},
		{
			name: "deadline exceeded",
			view: podView{sandbox: true, failReason: "DeadlineExceeded", init: []containerView{initDone}, regular: []containerView{
				{spec: &pod.Spec.Containers[0], latest: exited("a", 0, 137), final: true},
				{spec: &pod.Spec.Containers[1], latest: exited("b", 0, 137), final: true}}},
			wantPhase: corev1.PodFailed, wantInit: corev1.ConditionTrue,
			wantStates: []string{"terminated:Error", "terminated:Error"},
		},
		{
			name: "configuration error: pending with the reason",
			view: podView{sandbox: true, init: []containerView{initDone}, regular: []containerView{
				{spec: &pod.Spec.Containers[0], waitingReason: "CreateContainerError", waitingMessage: "no command"},
				{spec: &pod.Spec.Containers[1], latest: running("b", 0), started: true, ready: true}}},
			wantPhase: corev1.PodPending, wantInit: corev1.ConditionTrue,
			wantStates: []string{"waiting:CreateContainerError", "running"},
		},
	}
	sidecar := &corev1.Container{Name: "side"}
	sidecarRunning := func(started, ready bool) containerView {
		return containerView{spec: sidecar, sidecar: true, latest: running("side", 0), started: started, ready: ready}
	}
	tests = append(tests, []struct {
		name       string
		view       podView
		wantPhase  corev1.PodPhase
		wantReady  bool
		wantInit   corev1.ConditionStatus
		wantStates []string
	}{
		{
			name: "sidecar not started yet: initializing",
			view: podView{sandbox: true, init: []containerView{sidecarRunning(false, false)},
				regular: []containerView{{spec: &pod.Spec.Containers[0]}}},
			wantPhase: corev1.PodPending, wantInit: corev1.ConditionFalse,
			wantStates: []string{"waiting:PodInitializing"},
		},
		{
			name: "sidecar started and running beside the app: initialized, running, ready",
			view: podView{sandbox: true, init: []containerView{sidecarRunning(true, true)}, regular: []containerView{
				{spec: &pod.Spec.Containers[0], latest: running("a", 0), started: true, ready: true}}},
			wantPhase: corev1.PodRunning, wantReady: true, wantInit: corev1.ConditionTrue,
			wantStates: []string{"running"},
		},
		{
			name: "an unready sidecar makes the pod unready",
			view: podView{sandbox: true, init: []containerView{sidecarRunning(true, false)}, regular: []containerView{
				{spec: &pod.Spec.Containers[0], latest: running("a", 0), started: true, ready: true}}},
			wantPhase: corev1.PodRunning, wantInit: corev1.ConditionTrue,
			wantStates: []string{"running"},
		},
		{
			name: "app done, sidecar stopped with SIGTERM: succeeded",
			view: podView{sandbox: true, init: []containerView{{spec: sidecar, sidecar: true, latest: exited("side", 0, 143), final: true}},
				regular: []containerView{{spec: &pod.Spec.Containers[0], latest: exited("a", 0, 0), final: true}}},
			wantPhase: corev1.PodSucceeded, wantInit: corev1.ConditionTrue,
			wantStates: []string{"terminated:Completed"},
		},
	}...)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.view.pod = pod
			tt.view.hostIP = "10.0.0.1"
			tt.view.hostNetwork = true
			s := podStatus(&tt.view)
			if s.Phase != tt.wantPhase {
				t.Errorf("phase %s, want %s", s.Phase, tt.wantPhase)
			}
			for _, cs := range s.ContainerStatuses {
				if cs.ContainerID != "" && (cs.Resources == nil || cs.AllocatedResources == nil && cs.Resources.Requests != nil) {
					t.Errorf("container %s was created but its status has no resources", cs.Name)
				}
			}
			if s.ObservedGeneration != pod.Generation {
				t.Errorf("observedGeneration %d, want %d", s.ObservedGeneration, pod.Generation)
			}
			for _, ics := range s.InitContainerStatuses {
				if term := ics.State.Terminated; term != nil && term.ExitCode == 0 && !ics.Ready {
					t.Errorf("init container %s completed but not ready", ics.Name)
				}
			}
			if s.PodIP != "10.0.0.1" || s.HostIP != "10.0.0.1" {
				t.Errorf("podIP %s hostIP %s, want the node's address", s.PodIP, s.HostIP)
			}
			conds := map[corev1.PodConditionType]corev1.ConditionStatus{}
			for _, c := range s.Conditions {
				conds[c.Type] = c.Status
			}
			wantReady := corev1.ConditionFalse
			if tt.wantReady {
				wantReady = corev1.ConditionTrue
			}
			if conds[corev1.PodReady] != wantReady || conds[corev1.ContainersReady] != wantReady {
				t.Errorf("Ready %s ContainersReady %s, want %s", conds[corev1.PodReady], conds[corev1.ContainersReady], wantReady)
			}
			if conds[corev1.PodInitialized] != tt.wantInit {
				t.Errorf("Initialized %s, want %s", conds[corev1.PodInitialized], tt.wantInit)
			}
			for i, want := range tt.wantStates {
				cs := s.ContainerStatuses[i]
				got := "running"
				switch {
				case cs.State.Waiting != nil:
					got = "waiting:" + cs.State.Waiting.Reason
				case cs.State.Terminated != nil:
					got = "terminated:" + cs.State.Terminated.Reason
				}
				if got != want {
					t.Errorf("container %s: %s, want %s", cs.Name, got, want)
				}
				if want == "waiting:CrashLoopBackOff" && (cs.LastTerminationState.Terminated == nil || cs.RestartCount != 2) {
					t.Errorf("crash-looping container: last state %+v restarts %d, want its last run and 2", cs.LastTerminationState, cs.RestartCount)
				}
			}
		})
	}
}

func TestBackOff(t *testing.T) {
	t0 := time.Now()
	for _, tt := range []struct {
		attempt int
		ran     time.Duration
		want    time.Duration
	}{
		{0, time.Second, 0}, // the first exit restarts at once, as the kubelet's
		{1, time.Second, 10 * time.Second},
		{2, time.Second, 20 * time.Second},
		{4, time.Second, 80 * time.Second},
		{10, time.Second, 5 * time.Minute},
		{10, 11 * time.Minute, 0}, // a long run resets it
	} {
		st := &ContainerStatus{Attempt: tt.attempt, StartedAt: t0, FinishedAt: t0.Add(tt.ran)}
		if got := backOff(st, 0); got != tt.want {
			t.Errorf("backOff(attempt %d, ran %s) = %s, want %s", tt.attempt, tt.ran, got, tt.want)
		}
	}
}

// A pod's IP is the node's only when it shares the node's network: a pod
// of its own network has none until its sandbox has one.
func TestPodIPBeforeTheSandbox(t *testing.T) {
	pod := testPod("p", corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: "i"}}})
	for _, tt := range []struct {
		name string
		view podView
		want string
	}{
		{"own network, no sandbox yet", podView{}, ""},
		{"own network, sandbox up", podView{sandbox: true, podIPs: []string{"10.1.0.5"}}, "10.1.0.5"},
		{"host network, no sandbox yet", podView{hostNetwork: true}, "10.0.0.1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.view.pod, tt.view.hostIP = pod, "10.0.0.1"
			tt.view.regular = []containerView{{spec: &pod.Spec.Containers[0]}}
			s := podStatus(&tt.view)
			if s.PodIP != tt.want || (tt.want == "") != (len(s.PodIPs) == 0) {
				t.Errorf("podIP %q podIPs %v, want %q", s.PodIP, s.PodIPs, tt.want)
			}
			if s.HostIP != "10.0.0.1" {
				t.Errorf("hostIP %q, want the node's", s.HostIP)
			}
		})
	}
}
