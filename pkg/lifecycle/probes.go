package lifecycle

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/lifecycle/probe"
	"github.com/nodelet/nodelet/pkg/podrules"
)

// syncProbes runs the container's probes for its running attempt and
// stops them when it is not running.
func (w *podWorker) syncProbes(ctx context.Context, pod *corev1.Pod, c *corev1.Container, st ContainerStatus) {
	w.mu.Lock()
	defer w.mu.Unlock()
	cs := w.containerLocked(c.Name)
	running := st.State == StateRunning
	if cs.probeCancel != nil && (!running || cs.probeAttempt != st.Attempt) {
		cs.probeCancel()
		cs.probeCancel = nil
		cs.started, cs.ready = false, false
	}
	if !running || cs.probeCancel != nil {
		return
	}
	pctx, cancel := context.WithCancel(ctx)
	cs.probeCancel, cs.probeAttempt = cancel, st.Attempt
	cs.hasStartup = c.StartupProbe != nil
	cs.started = c.StartupProbe == nil
	cs.ready = c.ReadinessProbe == nil && cs.started
	if c.StartupProbe != nil {
		w.runProbeLocked(pctx, probe.Kind("startup"), c, c.StartupProbe, st.Attempt)
		return
	}
	w.startProbesLocked(pctx, c, st.Attempt)
}

// startProbesLocked starts the liveness and readiness probes, once the
// startup probe (if any) has succeeded.
func (w *podWorker) startProbesLocked(ctx context.Context, c *corev1.Container, attempt int) {
	if c.LivenessProbe != nil {
		w.runProbeLocked(ctx, probe.Kind("liveness"), c, c.LivenessProbe, attempt)
	}
	if c.ReadinessProbe != nil {
		w.runProbeLocked(ctx, probe.Kind("readiness"), c, c.ReadinessProbe, attempt)
	}
}

// runProbeLocked starts a probe of the container; the caller holds w.mu.
func (w *podWorker) runProbeLocked(ctx context.Context, kind probe.Kind, c *corev1.Container, p *corev1.Probe, attempt int) {
	pw := probe.NewWorker(kind, p, w.targetLocked(c), w.deps.clock, func(r probe.Result, msg string) {
		w.probeChanged(ctx, kind, c, p, attempt, r, msg)
	})
	if m := w.deps.probes; m != nil {
		pw.Observe(func(r probe.Result, took time.Duration) {
			m.observe(kind, c.Name, w.name, w.namespace, w.uid, r, took)
		})
	}
	go pw.Run(ctx)
	go func() { <-ctx.Done(); pw.Stop() }()
}

// probeChanged acts on a probe's new verdict.
func (w *podWorker) probeChanged(ctx context.Context, kind probe.Kind, c *corev1.Container, p *corev1.Probe, attempt int, r probe.Result, msg string) {
	if ctx.Err() != nil {
		return
	}
	if r == probe.Warning {
		w.event(corev1.EventTypeWarning, "ProbeWarning", "%s probe warning: %s", probeTitle(kind), strings.TrimSpace(msg))
		return
	}
	w.mu.Lock()
	cs := w.containerLocked(c.Name)
	if cs.probeAttempt != attempt {
		w.mu.Unlock()
		return
	}
	kill := false
	switch kind {
	case "startup":
		if r == probe.Success && !cs.started {
			cs.started = true
			cs.ready = c.ReadinessProbe == nil
			w.startProbesLocked(ctx, c, attempt)
		}
		kill = r == probe.Failure
	case "liveness":
		// Liveness no longer counts once the pod is terminating.
		kill = r == probe.Failure && !w.deleting
	case "readiness":
		cs.ready = r == probe.Success && cs.started
	}
	if kill && podrules.IsPodSidecar(w.pod, c) && w.viewOfLocked(w.pod, false).appsEnding {
		// The pod is ending: a sidecar is no longer restarted, so it is
		// not killed either; it stops with the pod, as the kubelet's stop
		// the sidecars only once the app containers have exited. Its
		// probe, having failed, probes no more.
		kill = false
	}
	if kill {
		cs.killedAttempt = attempt + 1
	}
	w.mu.Unlock()
	if r == probe.Failure {
		w.event(corev1.EventTypeWarning, "Unhealthy", "%s probe failed: %s", probeTitle(kind), strings.TrimSpace(msg))
	}
	if kill {
		// As the kubelet kills it: its preStop hook first, all within the
		// probe's grace period.
		deadline := w.deps.clock.Now().Add(podrules.ProbeGracePeriod(w.spec(), p))
		why := fmt.Sprintf("Container %s failed %s probe, will be restarted", c.Name, kind)
		if sb := w.currentSandbox(); sb != nil {
			go w.stopContainer(ctx, sb, c, deadline, true, why, nowTurn)
		} else {
			w.event(corev1.EventTypeNormal, "Killing", "%s", why)
		}
	}
	w.kick()
}

func probeTitle(k probe.Kind) string {
	s := string(k)
	return strings.ToUpper(s[:1]) + s[1:]
}

func (w *podWorker) stopProbes() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, cs := range w.containers {
		if cs.probeCancel != nil {
			cs.probeCancel()
			cs.probeCancel = nil
		}
		cs.ready = false
	}
}
