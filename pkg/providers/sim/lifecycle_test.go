package sim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/pkg/provider"
)

// advance moves the fake clock and waits for the timers it fired to have armed
// the next ones.
func advance(p *Provider, clk *clocktesting.FakeClock, d time.Duration) {
	clk.Step(d)
	p.rearming.Wait()
}

func policyPod(name string, policy corev1.RestartPolicy) *corev1.Pod {
	pod := testPod(name, "", "")
	pod.Spec.RestartPolicy = policy
	return pod
}

func TestJitteredDelays(t *testing.T) {
	ctx := context.Background()
	const (
		startDelay, startJitter   = 5 * time.Second, 10 * time.Second
		deleteDelay, deleteJitter = 2 * time.Second, 3 * time.Second
		n                         = 50
	)
	p, clk, rec := newTest(t, func(o *Options) {
		o.StartDelay, o.StartJitter = startDelay, startJitter
		o.DeleteDelay, o.DeleteJitter = deleteDelay, deleteJitter
		o.Capacity = nil
		o.Seed = 42
	})
	for i := range n {
		if err := p.CreatePod(ctx, testPod(fmt.Sprintf("p%d", i), "", "")); err != nil {
			t.Fatal(err)
		}
	}
	if got := clk.Waiters(); got != n {
		t.Errorf("%d timers pending, want one per pending pod (%d)", got, n)
	}
	advance(p, clk, startDelay-time.Nanosecond)
	pods, _ := p.GetPods(ctx)
	for _, pod := range pods {
		if pod.Status.Phase != corev1.PodPending {
			t.Fatalf("pod %s is %s before startDelay", pod.Name, pod.Status.Phase)
		}
	}
	advance(p, clk, startJitter)
	pods, _ = p.GetPods(ctx)
	starts := map[time.Time]bool{}
	for _, pod := range pods {
		started := pod.Status.ContainerStatuses[0].State.Running.StartedAt.Time
		checkRunning(t, pod, started)
		if d := started.Sub(t0); d < startDelay || d >= startDelay+startJitter {
			t.Errorf("pod %s started after %v, want in [%v, %v)", pod.Name, d, startDelay, startDelay+startJitter)
		}
		starts[started] = true
	}
	if len(starts) < n/2 {
		t.Errorf("only %d distinct start times among %d pods: no jitter?", len(starts), n)
	}
	if got := clk.Waiters(); got != 0 {
		t.Errorf("%d timers pending with every pod running", got)
	}

	// Deletion: each pod draws its jitter once, so deleting again does not
	// move its end; a grace period still caps it.
	deletedAt := clk.Now()
	for i := range n {
		pod := testPod(fmt.Sprintf("p%d", i), "", "")
		if i == 0 {
			pod.DeletionGracePeriodSeconds = ptr(int64(1))
		}
		for range 3 {
			if err := p.DeletePod(ctx, pod); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := clk.Waiters(); got != n {
		t.Errorf("%d timers pending, want one per deleting pod (%d)", got, n)
	}
	advance(p, clk, time.Second-time.Nanosecond)
	if _, err := p.GetPod(ctx, "ns", "p0"); err != nil {
		t.Errorf("p0 gone before its grace period: %v", err)
	}
	advance(p, clk, time.Nanosecond)
	if _, err := p.GetPod(ctx, "ns", "p0"); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("p0 still there after its 1s grace period: %v", err)
	}
	advance(p, clk, deleteDelay-time.Second-time.Nanosecond)
	if pods, _ := p.GetPods(ctx); len(pods) != n-1 {
		t.Errorf("%d pods left before deleteDelay, want %d", len(pods), n-1)
	}
	advance(p, clk, deleteJitter)
	if pods, _ := p.GetPods(ctx); len(pods) != 0 {
		t.Errorf("%d pods left after deleteDelay+deleteJitter", len(pods))
	}
	ends := map[time.Time]bool{}
	rec.mu.Lock()
	for _, pod := range rec.pods {
		if pod.Status.Phase != corev1.PodSucceeded || pod.Name == "p0" {
			continue
		}
		end := pod.Status.ContainerStatuses[0].State.Terminated.FinishedAt.Time
		if d := end.Sub(deletedAt); d < deleteDelay || d >= deleteDelay+deleteJitter {
			t.Errorf("pod %s terminated %v after its deletion, want in [%v, %v)", pod.Name, d, deleteDelay, deleteDelay+deleteJitter)
		}
		ends[end] = true
	}
	rec.mu.Unlock()
	if len(ends) < n/2 {
		t.Errorf("only %d distinct end times: no jitter?", len(ends))
	}
}

func TestOutcomeRatios(t *testing.T) {
	tests := []struct {
		complete, fail float64
	}{
		{0, 0}, {1, 0}, {0, 1}, {0.5, 0.5}, {0.3, 0.2}, {0.1, 0},
	}
	const n = 2000
	for _, tt := range tests {
		t.Run(fmt.Sprintf("complete %v fail %v", tt.complete, tt.fail), func(t *testing.T) {
			o := &Options{CompleteRatio: tt.complete, FailRatio: tt.fail}
			counts := map[outcome]int{}
			for i := range n {
				counts[o.outcomeOf(types.UID(fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i*7919)))]++
			}
			for oc, want := range map[outcome]float64{complete: tt.complete, fail: tt.fail, runForever: 1 - tt.complete - tt.fail} {
				got := float64(counts[oc]) / n
				if want == 0 || want == 1 {
					if got != want {
						t.Errorf("outcome %d: share %v, want exactly %v", oc, got, want)
					}
				} else if math.Abs(got-want) > 0.04 {
					t.Errorf("outcome %d: share %v, want about %v", oc, got, want)
				}
			}
		})
	}
}

// checkExited checks the containers of a pod whose run ended at `at` with
// code.
func checkExited(t *testing.T, cs corev1.ContainerStatus, code int32, started, at time.Time) {
	t.Helper()
	term := cs.State.Terminated
	if term == nil {
		term = cs.LastTerminationState.Terminated
	}
	reason := map[int32]string{0: "Completed", 1: "Error"}[code]
	if term == nil || term.ExitCode != code || term.Reason != reason || !term.StartedAt.Time.Equal(started) || !term.FinishedAt.Time.Equal(at) {
		t.Errorf("container %s: terminated %+v, want exit %d %s from %v to %v", cs.Name, term, code, reason, started, at)
	}
	if cs.Ready {
		t.Errorf("container %s is ready after its exit", cs.Name)
	}
}

func TestRestartPolicy(t *testing.T) {
	const run = 10 * time.Second
	tests := []struct {
		policy    corev1.RestartPolicy
		outcome   outcome
		wantPhase corev1.PodPhase // "" for a restart
	}{
		{corev1.RestartPolicyNever, complete, corev1.PodSucceeded},
		{corev1.RestartPolicyNever, fail, corev1.PodFailed},
		{corev1.RestartPolicyOnFailure, complete, corev1.PodSucceeded},
		{corev1.RestartPolicyOnFailure, fail, ""},
		{corev1.RestartPolicyAlways, complete, ""},
		{corev1.RestartPolicyAlways, fail, ""},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s %d", tt.policy, tt.outcome), func(t *testing.T) {
			ctx := context.Background()
			p, clk, rec := newTest(t, func(o *Options) {
				o.Capacity[corev1.ResourcePods] = resource.MustParse("1")
				if tt.outcome == complete {
					o.CompleteRatio = 1
				} else {
					o.FailRatio = 1
				}
			})
			if err := p.CreatePod(ctx, policyPod("job", tt.policy)); err != nil {
				t.Fatal(err)
			}
			if got := clk.Waiters(); got != 1 {
				t.Errorf("%d timers pending for a running pod, want 1", got)
			}
			advance(p, clk, run-time.Nanosecond)
			checkRunning(t, mustGet(t, p, "job"), t0)
			advance(p, clk, time.Nanosecond)
			end := t0.Add(run)
			code := int32(0)
			if tt.outcome == fail {
				code = 1
			}
			pod := mustGet(t, p, "job")

			if tt.wantPhase != "" {
				if pod.Status.Phase != tt.wantPhase {
					t.Fatalf("phase %s, want %s", pod.Status.Phase, tt.wantPhase)
				}
				app := pod.Status.ContainerStatuses[0]
				checkExited(t, app, code, t0, end)
				if app.State.Terminated == nil || app.RestartCount != 0 {
					t.Errorf("finished container: %+v", app)
				}
				reason := map[corev1.PodPhase]string{corev1.PodSucceeded: "PodCompleted", corev1.PodFailed: "PodFailed"}[tt.wantPhase]
				for _, c := range pod.Status.Conditions {
					if (c.Type == corev1.PodReady || c.Type == corev1.ContainersReady) && (c.Status != corev1.ConditionFalse || c.Reason != reason) {
						t.Errorf("condition %s = %s %s, want False %s", c.Type, c.Status, c.Reason, reason)
					}
				}
				if got := rec.last().Status.Phase; got != tt.wantPhase {
					t.Errorf("last notified phase %s", got)
				}
				if clk.Waiters() != 0 {
					t.Errorf("%d timers pending for a finished pod", clk.Waiters())
				}
				// It holds neither resources nor its IP, and stays until
				// deleted, then goes at once with its status unchanged.
				if err := p.CreatePod(ctx, testPod("next", "", "")); err != nil {
					t.Errorf("a finished pod still counts against capacity: %v", err)
				}
				if ip := mustGet(t, p, "next").Status.PodIP; ip != pod.Status.PodIP {
					t.Errorf("next pod got %s, want the freed %s", ip, pod.Status.PodIP)
				}
				p.opts.DeleteDelay = time.Minute
				if err := p.DeletePod(ctx, policyPod("job", tt.policy)); err != nil {
					t.Fatal(err)
				}
				if _, err := p.GetPod(ctx, "ns", "job"); !errors.Is(err, provider.ErrNotFound) {
					t.Errorf("deleted finished pod still there: %v", err)
				}
				if final := rec.last(); final.Name != "job" || !equality.Semantic.DeepEqual(final.Status, pod.Status) {
					t.Errorf("final status of a deleted finished pod changed:\n got %+v\nwant %+v", final.Status, pod.Status)
				}
				return
			}

			if pod.Status.Phase != corev1.PodRunning {
				t.Fatalf("phase %s in back-off, want Running", pod.Status.Phase)
			}
			for _, cs := range pod.Status.ContainerStatuses {
				checkExited(t, cs, code, t0, end)
				if w := cs.State.Waiting; w == nil || w.Reason != "CrashLoopBackOff" || cs.RestartCount != 0 {
					t.Errorf("container %s in back-off: %+v", cs.Name, cs)
				}
			}
			if want := "back-off 10s restarting failed container=app pod=job_ns(uid-job)"; pod.Status.ContainerStatuses[0].State.Waiting.Message != want {
				t.Errorf("back-off message %q, want %q", pod.Status.ContainerStatuses[0].State.Waiting.Message, want)
			}
			for _, typ := range []corev1.PodConditionType{corev1.PodReady, corev1.ContainersReady} {
				if got := condition(pod, typ); got != corev1.ConditionFalse {
					t.Errorf("condition %s = %s in back-off, want False", typ, got)
				}
			}
			advance(p, clk, 10*time.Second-time.Nanosecond)
			if w := mustGet(t, p, "job").Status.ContainerStatuses[0].State.Waiting; w == nil {
				t.Fatal("restarted before the back-off ended")
			}
			advance(p, clk, time.Nanosecond)
			restarted := end.Add(10 * time.Second)
			pod = mustGet(t, p, "job")
			for _, cs := range pod.Status.ContainerStatuses {
				if r := cs.State.Running; r == nil || !r.StartedAt.Time.Equal(restarted) || !cs.Ready || cs.RestartCount != 1 {
					t.Errorf("container %s after the back-off: %+v, want running since %v with 1 restart", cs.Name, cs, restarted)
				}
				if term := cs.LastTerminationState.Terminated; term == nil || term.ExitCode != code || !term.FinishedAt.Time.Equal(end) {
					t.Errorf("container %s: last termination %+v", cs.Name, term)
				}
			}
			for _, typ := range []corev1.PodConditionType{corev1.PodReady, corev1.ContainersReady} {
				if got := condition(pod, typ); got != corev1.ConditionTrue {
					t.Errorf("condition %s = %s after the restart, want True", typ, got)
				}
			}
		})
	}
}

// restartTimes runs a crash-looping pod until the clock reaches end,
// stepping by tick (0: one step), and returns when its containers exited
// and restarted, from the notifications.
func restartTimes(t *testing.T, tick, total time.Duration) (exits, restarts []time.Time) {
	ctx := context.Background()
	p, clk, rec := newTest(t, func(o *Options) { o.FailRatio = 1 })
	if err := p.CreatePod(ctx, policyPod("crash", corev1.RestartPolicyAlways)); err != nil {
		t.Fatal(err)
	}
	if tick == 0 {
		advance(p, clk, total)
	}
	for elapsed := time.Duration(0); tick > 0 && elapsed < total; elapsed += tick {
		advance(p, clk, tick)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, pod := range rec.pods[1:] {
		cs := pod.Status.ContainerStatuses[0]
		if cs.State.Waiting != nil {
			exits = append(exits, cs.LastTerminationState.Terminated.FinishedAt.Time)
		} else {
			restarts = append(restarts, cs.State.Running.StartedAt.Time)
			if int(cs.RestartCount) != len(restarts) {
				t.Errorf("restart %d reports restartCount %d", len(restarts), cs.RestartCount)
			}
		}
	}
	return exits, restarts
}

func TestCrashLoopBackOffDoubles(t *testing.T) {
	total := 40 * time.Minute
	exits, restarts := restartTimes(t, time.Second, total)
	want := []time.Duration{10, 20, 40, 80, 160, 300, 300, 300}
	if len(restarts) < len(want) {
		t.Fatalf("%d restarts in %v, want at least %d", len(restarts), total, len(want))
	}
	for i, w := range want {
		if got := restarts[i].Sub(exits[i]); got != w*time.Second {
			t.Errorf("back-off before restart %d = %v, want %v", i+1, got, w*time.Second)
		}
		if i > 0 {
			if got := exits[i].Sub(restarts[i-1]); got != DefaultRunDuration {
				t.Errorf("run %d lasted %v, want %v", i+1, got, DefaultRunDuration)
			}
		}
	}
	// One big step catches up on every step that fell due, at its time.
	bigExits, bigRestarts := restartTimes(t, 0, total)
	if fmt.Sprint(bigExits, bigRestarts) != fmt.Sprint(exits, restarts) {
		t.Errorf("one step of %v gave\n%v %v\nwant\n%v %v", total, bigExits, bigRestarts, exits, restarts)
	}
}

func TestDeleteCrashLoopingPod(t *testing.T) {
	ctx := context.Background()
	p, clk, rec := newTest(t, func(o *Options) { o.FailRatio, o.DeleteDelay = 1, 5*time.Second })
	if err := p.CreatePod(ctx, policyPod("crash", corev1.RestartPolicyAlways)); err != nil {
		t.Fatal(err)
	}
	advance(p, clk, 15*time.Second) // exited at 10s, restarts at 20s
	if err := p.DeletePod(ctx, policyPod("crash", corev1.RestartPolicyAlways)); err != nil {
		t.Fatal(err)
	}
	if got := clk.Waiters(); got != 1 {
		t.Errorf("%d timers pending, want only the deletion's", got)
	}
	advance(p, clk, 5*time.Second)
	final := rec.last()
	if final.Status.Phase != corev1.PodFailed {
		t.Errorf("final phase %s, want Failed", final.Status.Phase)
	}
	for _, cs := range final.Status.ContainerStatuses {
		checkExited(t, cs, 1, t0, t0.Add(10*time.Second))
		if cs.State.Terminated == nil {
			t.Errorf("container %s: final state %+v, want its last termination", cs.Name, cs.State)
		}
	}
	if _, err := p.GetPod(ctx, "ns", "crash"); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("deleted pod still there: %v", err)
	}
	advance(p, clk, time.Hour)
	if final != rec.last() {
		t.Error("a notification after termination")
	}
}

func TestRestoreKeepsOutcome(t *testing.T) {
	ctx := context.Background()
	opts := func(o *Options) { o.CompleteRatio, o.FailRatio = 0.4, 0.4 }
	// Find one pod of each fate under these ratios.
	o := &Options{}
	opts(o)
	byOutcome := map[outcome]*corev1.Pod{}
	for i := 0; len(byOutcome) < 3; i++ {
		pod := policyPod(fmt.Sprintf("p%d", i), corev1.RestartPolicyNever)
		if oc := o.outcomeOf(pod.UID); byOutcome[oc] == nil {
			byOutcome[oc] = pod
		}
	}
	for oc, pod := range byOutcome {
		t.Run(fmt.Sprint(oc), func(t *testing.T) {
			before, clk, _ := newTest(t, func(o *Options) { opts(o); o.Seed = 1 })
			if err := before.CreatePod(ctx, pod); err != nil {
				t.Fatal(err)
			}
			advance(before, clk, 6*time.Second)
			reported := mustGet(t, before, pod.Name)

			// The agent restarts 2s later; the new provider has another seed.
			after, clk2, _ := newTest(t, func(o *Options) { opts(o); o.Seed = 2 })
			clk2.SetTime(t0.Add(8 * time.Second))
			if err := after.RestorePod(ctx, reported); err != nil {
				t.Fatal(err)
			}
			advance(after, clk2, 2*time.Second-time.Nanosecond)
			if got := mustGet(t, after, pod.Name).Status.Phase; got != corev1.PodRunning {
				t.Fatalf("phase %s before the run's end", got)
			}
			advance(after, clk2, time.Nanosecond)
			want := map[outcome]corev1.PodPhase{runForever: corev1.PodRunning, complete: corev1.PodSucceeded, fail: corev1.PodFailed}[oc]
			got := mustGet(t, after, pod.Name)
			if got.Status.Phase != want {
				t.Fatalf("restored pod is %s at the end of its run, want %s", got.Status.Phase, want)
			}
			if oc != runForever {
				checkExited(t, got.Status.ContainerStatuses[0], map[outcome]int32{complete: 0, fail: 1}[oc], t0, t0.Add(DefaultRunDuration))
			}
		})
	}

	t.Run("crash loop resumes its back-off", func(t *testing.T) {
		before, clk, _ := newTest(t, func(o *Options) { o.FailRatio = 1 })
		if err := before.CreatePod(ctx, policyPod("crash", corev1.RestartPolicyOnFailure)); err != nil {
			t.Fatal(err)
		}
		advance(before, clk, 35*time.Second) // exit 10s, restart 20s, exit 30s, restart due at 50s
		reported := mustGet(t, before, "crash")
		if cs := reported.Status.ContainerStatuses[0]; cs.RestartCount != 1 || cs.State.Waiting == nil {
			t.Fatalf("status before the restart: %+v", cs)
		}
		after, clk2, _ := newTest(t, func(o *Options) { o.FailRatio = 1 })
		clk2.SetTime(t0.Add(40 * time.Second))
		if err := after.RestorePod(ctx, reported); err != nil {
			t.Fatal(err)
		}
		advance(after, clk2, 10*time.Second-time.Nanosecond)
		if cs := mustGet(t, after, "crash").Status.ContainerStatuses[0]; cs.State.Waiting == nil {
			t.Fatalf("restarted before the back-off ended: %+v", cs)
		}
		advance(after, clk2, time.Nanosecond)
		cs := mustGet(t, after, "crash").Status.ContainerStatuses[0]
		if cs.RestartCount != 2 || cs.State.Running == nil || !cs.State.Running.StartedAt.Time.Equal(t0.Add(50*time.Second)) {
			t.Errorf("after the back-off: %+v, want running since %v with 2 restarts", cs, t0.Add(50*time.Second))
		}
	})

	t.Run("steps due while away happen at their times", func(t *testing.T) {
		p, clk, rec := newTest(t, func(o *Options) { o.CompleteRatio = 1 })
		started := metav1.NewTime(t0.Add(-time.Hour))
		pod := policyPod("job", corev1.RestartPolicyNever)
		pod.Status = corev1.PodStatus{
			Phase: corev1.PodRunning, PodIP: "10.0.0.5", StartTime: &started,
			ContainerStatuses: []corev1.ContainerStatus{
				{Name: "app", Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}},
				{Name: "side", Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}},
			},
		}
		if err := p.RestorePod(ctx, pod); err != nil {
			t.Fatal(err)
		}
		got := mustGet(t, p, "job")
		if got.Status.Phase != corev1.PodSucceeded {
			t.Fatalf("phase %s, want Succeeded at once", got.Status.Phase)
		}
		checkExited(t, got.Status.ContainerStatuses[0], 0, started.Time, started.Add(DefaultRunDuration))
		if len(rec.phases()) != 1 || clk.Waiters() != 0 {
			t.Errorf("notified %v with %d timers pending", rec.phases(), clk.Waiters())
		}
		if p.ips.inUse != 0 {
			t.Errorf("finished restored pod holds %d IPs", p.ips.inUse)
		}
	})
}
