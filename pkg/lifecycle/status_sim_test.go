package lifecycle

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/pkg/providers/sim"
)

// TestStatusAsSim checks that a pod's status computed here, from a view of
// its containers, and the status the sim provider writes for a simulated
// pod whose containers are in the same states agree: same container
// states, same phase, same five conditions (status, reason, message).
func TestStatusAsSim(t *testing.T) {
	const run = 10 * time.Second
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1"},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "init", Image: "busybox"}},
			Containers:     []corev1.Container{{Name: "a", Image: "nginx"}, {Name: "b", Image: "nginx"}},
		},
	}
	init, a, b := &pod.Spec.InitContainers[0], &pod.Spec.Containers[0], &pod.Spec.Containers[1]
	runningSince := func(name string, attempt int, at time.Time) *ContainerStatus {
		return &ContainerStatus{Name: name, Attempt: attempt, State: StateRunning, StartedAt: at}
	}
	exitedWith := func(name string, code int) *ContainerStatus {
		st := &ContainerStatus{Name: name, State: StateExited, StartedAt: t0, FinishedAt: t0.Add(run), ExitCode: code, Reason: ReasonCompleted}
		if code != 0 {
			st.Reason = ReasonError
		}
		return st
	}
	initDone := containerView{spec: init, latest: &ContainerStatus{Name: "init", State: StateExited, StartedAt: t0, FinishedAt: t0, Reason: ReasonCompleted}, final: true}
	ready := func(c *corev1.Container) containerView {
		return containerView{spec: c, latest: runningSince(c.Name, 0, t0), started: true, ready: true}
	}
	ended := func(c *corev1.Container, code int, final bool) containerView {
		v := containerView{spec: c, latest: exitedWith(c.Name, code), final: final}
		if !final {
			v.waitingReason = "CrashLoopBackOff"
		}
		return v
	}
	tests := []struct {
		name    string
		opts    func(*sim.Options)
		policy  corev1.RestartPolicy
		advance time.Duration
		view    podView
	}{
		{"pending", func(o *sim.Options) { o.StartDelay = time.Minute }, corev1.RestartPolicyAlways, 0,
			podView{init: []containerView{{spec: init}}, regular: []containerView{{spec: a}, {spec: b}}}},
		{"running", func(o *sim.Options) {}, corev1.RestartPolicyAlways, 0,
			podView{sandbox: true, init: []containerView{initDone}, regular: []containerView{ready(a), ready(b)}}},
		{"succeeded", func(o *sim.Options) { o.CompleteRatio = 1 }, corev1.RestartPolicyNever, run,
			podView{sandbox: true, init: []containerView{initDone}, regular: []containerView{ended(a, 0, true), ended(b, 0, true)}}},
		{"failed", func(o *sim.Options) { o.FailRatio = 1 }, corev1.RestartPolicyNever, run,
			podView{sandbox: true, init: []containerView{initDone}, regular: []containerView{ended(a, 1, true), ended(b, 1, true)}}},
		{"back-off", func(o *sim.Options) { o.FailRatio = 1 }, corev1.RestartPolicyAlways, run,
			podView{sandbox: true, init: []containerView{initDone}, regular: []containerView{ended(a, 1, false), ended(b, 1, false)}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := pod.DeepCopy()
			p.Spec.RestartPolicy = tt.policy
			simulated := simStatus(t, p, t0, run, tt.advance, tt.opts)
			tt.view.pod = p
			computed := podStatus(&tt.view)
			if got, want := statusSummary(&computed), statusSummary(simulated); got != want {
				t.Errorf("lifecycle and sim disagree:\nlifecycle %s\nsim       %s", got, want)
			}
		})
	}
}

// simStatus is the status of pod on a sim provider, advance after it was
// created at t0, its containers running for run.
func simStatus(t *testing.T, pod *corev1.Pod, t0 time.Time, run, advance time.Duration, opts func(*sim.Options)) *corev1.PodStatus {
	t.Helper()
	clk := clocktesting.NewFakeClock(t0)
	o := sim.Options{NodeName: "n", PodCIDR: "10.0.0.0/24", Address: "192.168.0.10", RunDuration: run, Clock: clk}
	opts(&o)
	p, err := sim.New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := p.CreatePod(ctx, pod.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	before, _ := p.GetPod(ctx, pod.Namespace, pod.Name)
	if advance == 0 {
		return &before.Status
	}
	clk.Step(advance)
	// The provider's timers run on their own goroutine: wait for the change.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		got, err := p.GetPod(ctx, pod.Namespace, pod.Name)
		if err != nil {
			t.Fatal(err)
		}
		if statusSummary(&got.Status) != statusSummary(&before.Status) {
			return &got.Status
		}
	}
	t.Fatalf("the simulated pod did not change in %s", advance)
	return nil
}

// statusSummary is what of a status the rules decide: the phase, the
// five standard conditions, and each container's state and readiness.
func statusSummary(s *corev1.PodStatus) string {
	out := string(s.Phase)
	for _, c := range s.Conditions {
		out += fmt.Sprintf("; %s=%s %q %q", c.Type, c.Status, c.Reason, c.Message)
	}
	for _, list := range [][]corev1.ContainerStatus{s.InitContainerStatuses, s.ContainerStatuses} {
		for _, cs := range list {
			out += "; " + cs.Name + " " + containerSummary(&cs)
		}
	}
	return out
}

func containerSummary(cs *corev1.ContainerStatus) string {
	ready := fmt.Sprintf(" ready=%t", cs.Ready)
	if cs.LastTerminationState.Terminated != nil {
		ready += fmt.Sprintf(" last=%s:%d", cs.LastTerminationState.Terminated.Reason, cs.LastTerminationState.Terminated.ExitCode)
	}
	switch st := cs.State; {
	case st.Running != nil:
		return "running" + ready
	case st.Terminated != nil:
		return fmt.Sprintf("terminated:%s:%d", st.Terminated.Reason, st.Terminated.ExitCode) + ready
	case st.Waiting != nil:
		return "waiting:" + st.Waiting.Reason + ready
	}
	return "none" + ready
}
