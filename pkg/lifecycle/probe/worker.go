package probe

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Kind says which of a container's probes a worker runs.
type Kind string

const (
	Liveness  Kind = "liveness"
	Readiness Kind = "readiness"
	Startup   Kind = "startup"
)

// Defaults the API server normally fills in; a probe built by hand may lack them.
const (
	defaultPeriod           = 10 * time.Second
	defaultSuccessThreshold = 1
	defaultFailureThreshold = 3
)

// initialResult is a worker's result before its first verdict, as the
// kubelet has it: not ready, alive, not yet started.
func initialResult(k Kind) Result {
	switch k {
	case Readiness:
		return Failure
	case Liveness:
		return Success
	default:
		return Unknown
	}
}

// Worker runs one probe of one container on its schedule: it waits
// initialDelaySeconds, then runs the probe every periodSeconds. The result
// turns Success after successThreshold consecutive successes and Failure
// after failureThreshold consecutive failures; attempts that could not be run
// at all (Unknown) count neither way.
//
// A liveness or startup worker that reports Failure, and a startup worker
// that reports Success, holds: it stops probing, because the container is
// about to be restarted or needs no more start-up checks. Resume starts it
// again for the next container. Pause holds a worker explicitly.
type Worker struct {
	kind     Kind
	handler  corev1.ProbeHandler
	delay    time.Duration
	period   time.Duration
	timeout  time.Duration
	success  int
	failure  int
	target   Target
	clk      clock.Clock
	onChange func(Result, string)
	observe  func(Result, time.Duration) // nil: attempts are not observed

	stopOnce sync.Once
	stop     chan struct{}
	wake     chan struct{}

	mu       sync.Mutex
	result   Result // the current verdict, or the initial value
	reported bool   // a verdict was reported since the start or the last Resume
	held     bool
	restart  bool   // wait the initial delay again before the next attempt
	gen      uint64 // bumped by Pause and Resume to discard attempts in flight
	last     Result // result of the latest counted attempt
	run      int    // consecutive attempts with result last
}

// NewWorker returns a worker for probe p of the given kind against t.
// onChange(result, message) is called from Run on every change of the result
// and on the first verdict, even when it equals the initial value, and with
// Warning on every attempt that returned it (before the Success it counts
// as); it must not block for long. NewWorker does no I/O.
func NewWorker(kind Kind, p *corev1.Probe, t Target, clk clock.Clock, onChange func(Result, string)) *Worker {
	if p == nil {
		p = &corev1.Probe{}
	}
	w := &Worker{
		kind:     kind,
		handler:  *p.ProbeHandler.DeepCopy(),
		delay:    seconds(p.InitialDelaySeconds, 0),
		period:   seconds(p.PeriodSeconds, defaultPeriod),
		timeout:  seconds(p.TimeoutSeconds, defaultTimeout),
		success:  threshold(p.SuccessThreshold, defaultSuccessThreshold),
		failure:  threshold(p.FailureThreshold, defaultFailureThreshold),
		target:   t,
		clk:      clk,
		onChange: onChange,
		stop:     make(chan struct{}),
		wake:     make(chan struct{}, 1),
		result:   initialResult(kind),
	}
	if w.onChange == nil {
		w.onChange = func(Result, string) {}
	}
	return w
}

// Observe makes the worker call f with the result and duration of every
// attempt, for metrics. It must be called before Run.
func (w *Worker) Observe(f func(Result, time.Duration)) { w.observe = f }

func seconds(s int32, def time.Duration) time.Duration {
	if s <= 0 {
		return def
	}
	return time.Duration(s) * time.Second
}

func threshold(n int32, def int) int {
	if n <= 0 {
		return def
	}
	return int(n)
}

// Result returns the current result: the initial value for the kind until
// the first verdict.
func (w *Worker) Result() Result {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.result
}

// Stop ends Run. It may be called more than once, and before Run.
func (w *Worker) Stop() {
	w.stopOnce.Do(func() { close(w.stop) })
}

// Pause stops probing until Resume; an attempt in flight is discarded. The
// result is kept.
func (w *Worker) Pause() {
	w.mu.Lock()
	w.held = true
	w.gen++
	w.mu.Unlock()
	w.poke()
}

// Resume starts probing a new instance of the container: the result goes
// back to the initial value (without calling onChange), the counts start
// over and the initial delay is waited again.
func (w *Worker) Resume() {
	w.mu.Lock()
	w.held = false
	w.restart = true
	w.gen++
	w.result = initialResult(w.kind)
	w.reported = false
	w.last, w.run = Unknown, 0
	w.mu.Unlock()
	w.poke()
}

func (w *Worker) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Run probes until ctx ends or Stop is called.
func (w *Worker) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithValues("probe", w.kind, "container", w.target.containerName())
	ctx = klog.NewContext(ctx, logger)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-w.stop:
			cancel()
		case <-ctx.Done():
		}
	}()

	wait := w.delay
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.stop:
			return
		default:
		}
		w.mu.Lock()
		held := w.held
		if w.restart {
			w.restart = false
			wait = w.delay
		}
		gen := w.gen
		w.mu.Unlock()

		if held {
			select {
			case <-ctx.Done():
				return
			case <-w.wake:
				continue
			}
		}
		if wait > 0 {
			timer := w.clk.NewTimer(wait)
			select {
			case <-ctx.Done():
				timer.Stop()
				return
			case <-w.wake:
				timer.Stop()
				continue
			case <-timer.C():
			}
		}

		start := w.clk.Now()
		result, msg := Once(ctx, &w.handler, w.timeout, w.target)
		if ctx.Err() != nil {
			return
		}
		if w.observe != nil {
			w.observe(result, w.clk.Since(start))
		}
		w.record(ctx, gen, result, msg)
		wait = w.period - w.clk.Since(start)
	}
}

// record counts one attempt and reports a verdict when a threshold is met.
func (w *Worker) record(ctx context.Context, gen uint64, result Result, msg string) {
	logger := klog.FromContext(ctx)
	if result == Unknown {
		logger.V(3).Info("Probe could not be run; attempt discarded", "message", msg)
		return
	}
	w.mu.Lock()
	if gen != w.gen || w.held {
		w.mu.Unlock()
		return
	}
	if result == Warning {
		w.mu.Unlock()
		w.onChange(Warning, msg)
		w.mu.Lock()
		if gen != w.gen || w.held {
			w.mu.Unlock()
			return
		}
		result = Success
	}
	if result == w.last {
		w.run++
	} else {
		w.last, w.run = result, 1
	}
	need := w.success
	if result == Failure {
		need = w.failure
	}
	if w.run < need {
		w.mu.Unlock()
		logger.V(4).Info("Probe attempt below threshold", "result", result, "count", w.run, "threshold", need)
		return
	}
	changed := !w.reported || w.result != result
	w.result, w.reported = result, true
	if (w.kind == Liveness || w.kind == Startup) && result == Failure || w.kind == Startup && result == Success {
		w.held = true
		w.last, w.run = Unknown, 0
	}
	w.mu.Unlock()

	if changed {
		logger.V(2).Info("Probe result changed", "result", result, "message", msg)
		w.onChange(result, msg)
	}
}
