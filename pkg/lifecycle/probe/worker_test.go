package probe

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	testingclock "k8s.io/utils/clock/testing"
)

// changes records onChange calls.
type changes struct {
	mu  sync.Mutex
	got []Result
}

func (c *changes) record(r Result, _ string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got = append(c.got, r)
}

func (c *changes) list() []Result {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Result(nil), c.got...)
}

func execProbeSpec(delay, period, success, failure int32) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler:        corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"check"}}},
		InitialDelaySeconds: delay,
		PeriodSeconds:       period,
		SuccessThreshold:    success,
		FailureThreshold:    failure,
	}
}

func (w *Worker) isHeld() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.held
}

// startWorker runs w until the test ends.
func startWorker(t *testing.T, w *Worker) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(context.Background())
	}()
	t.Cleanup(func() {
		w.Stop()
		<-done
	})
}

// attempt steps the clock by period once the worker waits, then waits for
// attempt number n.
func attempt(t *testing.T, clk *testingclock.FakeClock, exec *scriptExec, period time.Duration, n int) {
	t.Helper()
	waitFor(t, "the worker to wait", clk.HasWaiters)
	clk.Step(period)
	waitFor(t, fmt.Sprintf("attempt %d", n), func() bool { return exec.Calls() >= n })
}

func TestWorkerThresholds(t *testing.T) {
	S, F := Success, Failure
	tests := []struct {
		name     string
		kind     Kind
		success  int32
		failure  int32
		codes    []int // exit codes of the attempts; -1 is an attempt that cannot run
		want     []Result
		final    Result
		wantHeld bool
	}{
		{name: "readiness first success", kind: Readiness, codes: []int{0}, want: []Result{S}, final: S},
		{name: "readiness failures below threshold", kind: Readiness, codes: []int{1, 1}, want: nil, final: F},
		{name: "readiness first verdict failure", kind: Readiness, codes: []int{1, 1, 1}, want: []Result{F}, final: F},
		{name: "readiness default failure threshold is 3", kind: Readiness, failure: -1, codes: []int{1, 1, 1}, want: []Result{F}, final: F},
		{name: "readiness success threshold 2", kind: Readiness, success: 2, codes: []int{0, 1, 0, 0}, want: []Result{S}, final: S},
		{name: "readiness flips", kind: Readiness, codes: []int{0, 1, 1, 1, 0, 0}, want: []Result{S, F, S}, final: S},
		{name: "readiness failure run broken", kind: Readiness, codes: []int{0, 1, 1, 0, 1, 1}, want: []Result{S}, final: S},
		{name: "unrunnable attempts count neither way", kind: Readiness, codes: []int{1, -1, 1, -1, -1, 1}, want: []Result{F}, final: F},
		{name: "liveness success then failure holds", kind: Liveness, codes: []int{0, 1, 1, 1}, want: []Result{S, F}, final: F, wantHeld: true},
		{name: "liveness failure threshold 1", kind: Liveness, failure: 1, codes: []int{1}, want: []Result{F}, final: F, wantHeld: true},
		{name: "liveness below threshold", kind: Liveness, codes: []int{1, 1, 0}, want: []Result{S}, final: S},
		{name: "startup succeeds and holds", kind: Startup, codes: []int{1, 1, 0}, want: []Result{S}, final: S, wantHeld: true},
		{name: "startup fails and holds", kind: Startup, codes: []int{1, 1, 1}, want: []Result{F}, final: F, wantHeld: true},
		{name: "startup undecided", kind: Startup, codes: []int{1, 1}, want: nil, final: Unknown},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := testingclock.NewFakeClock(time.Now())
			exec := &scriptExec{codes: tc.codes}
			var ch changes
			spec := execProbeSpec(0, 10, tc.success, tc.failure)
			w := NewWorker(tc.kind, spec, Target{Exec: exec}, clk, ch.record)
			startWorker(t, w)

			// No initial delay: the first attempt runs at once.
			waitFor(t, "attempt 1", func() bool { return exec.Calls() >= 1 })
			for n := 2; n <= len(tc.codes); n++ {
				attempt(t, clk, exec, 10*time.Second, n)
			}
			// The last attempt is recorded once the worker waits again or holds.
			waitFor(t, "the last attempt to be recorded", func() bool { return clk.HasWaiters() || w.isHeld() })

			if got := ch.list(); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("onChange calls %v, want %v", got, tc.want)
			}
			if got := w.Result(); got != tc.final {
				t.Errorf("Result() = %v, want %v", got, tc.final)
			}
			if held := w.isHeld(); held != tc.wantHeld {
				t.Errorf("held = %v, want %v", held, tc.wantHeld)
			}
			if tc.wantHeld && clk.HasWaiters() {
				t.Errorf("a held worker still waits to probe")
			}
			if got := exec.Calls(); got != len(tc.codes) {
				t.Errorf("%d attempts, want %d", got, len(tc.codes))
			}
		})
	}
}

func TestWorkerInitialResults(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	for kind, want := range map[Kind]Result{Readiness: Failure, Liveness: Success, Startup: Unknown} {
		if got := NewWorker(kind, execProbeSpec(0, 0, 0, 0), Target{}, clk, nil).Result(); got != want {
			t.Errorf("%s starts at %v, want %v", kind, got, want)
		}
	}
}

func TestWorkerInitialDelayAndPeriod(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	exec := &scriptExec{codes: []int{0}}
	w := NewWorker(Readiness, execProbeSpec(5, 0, 0, 0), Target{Exec: exec}, clk, nil)
	startWorker(t, w)

	waitFor(t, "the initial delay timer", clk.HasWaiters)
	clk.Step(4 * time.Second)
	if !clk.HasWaiters() || exec.Calls() != 0 {
		t.Fatalf("probed before the initial delay (%d calls)", exec.Calls())
	}
	clk.Step(time.Second)
	waitFor(t, "attempt 1 at the initial delay", func() bool { return exec.Calls() == 1 })

	// The default period is 10s.
	waitFor(t, "the period timer", clk.HasWaiters)
	clk.Step(9 * time.Second)
	if !clk.HasWaiters() || exec.Calls() != 1 {
		t.Fatalf("probed before the period ended (%d calls)", exec.Calls())
	}
	clk.Step(time.Second)
	waitFor(t, "attempt 2 one period later", func() bool { return exec.Calls() == 2 })
	if w.Result() != Success {
		t.Errorf("Result() = %v, want Success", w.Result())
	}
}

func TestWorkerTimeoutFromProbe(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	deadlines := make(chan time.Duration, 1)
	exec := execFunc(func(ctx context.Context, _ string, _ []string) ([]byte, int, error) {
		d, _ := ctx.Deadline()
		select {
		case deadlines <- time.Until(d):
		default:
		}
		return nil, 0, nil
	})
	spec := execProbeSpec(0, 0, 0, 0)
	spec.TimeoutSeconds = 3
	startWorker(t, NewWorker(Readiness, spec, Target{Exec: exec}, clk, nil))
	if d := <-deadlines; d <= 2*time.Second || d > 3*time.Second {
		t.Errorf("attempt deadline in %v, want about 3s", d)
	}
}

func TestWorkerPauseResume(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	exec := &scriptExec{codes: []int{1, 0}}
	var ch changes
	w := NewWorker(Liveness, execProbeSpec(2, 10, 1, 1), Target{Exec: exec}, clk, ch.record)
	startWorker(t, w)

	waitFor(t, "the initial delay timer", clk.HasWaiters)
	clk.Step(2 * time.Second)
	waitFor(t, "the liveness failure to hold the worker", w.isHeld)
	if got := ch.list(); !reflect.DeepEqual(got, []Result{Failure}) {
		t.Fatalf("onChange calls %v, want [Failure]", got)
	}

	// The container restarted: the worker starts over, initial delay included.
	w.Resume()
	if w.Result() != Success {
		t.Errorf("Result() after Resume = %v, want the initial Success", w.Result())
	}
	waitFor(t, "the initial delay timer after Resume", clk.HasWaiters)
	clk.Step(time.Second)
	if exec.Calls() != 1 {
		t.Fatalf("probed before the initial delay after Resume")
	}
	clk.Step(time.Second)
	waitFor(t, "attempt 2", func() bool { return exec.Calls() == 2 })
	waitFor(t, "the period timer", clk.HasWaiters)
	if got := ch.list(); !reflect.DeepEqual(got, []Result{Failure, Success}) {
		t.Errorf("onChange calls %v, want [Failure Success]: the first verdict after Resume is reported", got)
	}

	// Paused: no timer, no attempts however long we wait.
	w.Pause()
	waitFor(t, "the timer to be dropped", func() bool { return !clk.HasWaiters() })
	clk.Step(time.Hour)
	if exec.Calls() != 2 {
		t.Errorf("a paused worker probed")
	}
}

func TestWorkerStop(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	exec := &scriptExec{codes: []int{0}}

	t.Run("Stop", func(t *testing.T) {
		w := NewWorker(Readiness, execProbeSpec(0, 10, 0, 0), Target{Exec: exec}, clk, nil)
		done := make(chan struct{})
		go func() { defer close(done); w.Run(context.Background()) }()
		waitFor(t, "the worker to wait", clk.HasWaiters)
		w.Stop()
		w.Stop()
		<-done
	})
	t.Run("context", func(t *testing.T) {
		w := NewWorker(Readiness, execProbeSpec(0, 10, 0, 0), Target{Exec: exec}, clk, nil)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); w.Run(ctx) }()
		cancel()
		<-done
	})
	t.Run("Stop before Run", func(t *testing.T) {
		w := NewWorker(Readiness, execProbeSpec(0, 10, 0, 0), Target{Exec: exec}, clk, nil)
		w.Stop()
		w.Run(context.Background())
	})
}

// A redirect to another host passes the probe with a warning on every
// attempt: the caller hears Warning each time and Success once.
func TestWorkerWarningCountsAsSuccess(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://0.0.0.0/", http.StatusFound)
	}))
	defer srv.Close()
	host, port := hostPort(t, srv)

	clk := testingclock.NewFakeClock(time.Now())
	var ch changes
	spec := &corev1.Probe{
		ProbeHandler:     corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(int32(port))}},
		PeriodSeconds:    10,
		FailureThreshold: 1,
	}
	w := NewWorker(Liveness, spec, Target{Container: &corev1.Container{Name: "app"}, PodIP: host}, clk, ch.record)
	startWorker(t, w)
	for n := 1; n <= 2; n++ {
		if n > 1 {
			waitFor(t, "the worker to wait", clk.HasWaiters)
			clk.Step(10 * time.Second)
		}
		waitFor(t, fmt.Sprintf("attempt %d to be reported", n), func() bool { return len(ch.list()) >= n+1 })
	}
	if got, want := ch.list(), []Result{Warning, Success, Warning}; !reflect.DeepEqual(got, want) {
		t.Errorf("onChange calls %v, want %v", got, want)
	}
	if got := w.Result(); got != Success {
		t.Errorf("Result() = %v, want Success", got)
	}
}
