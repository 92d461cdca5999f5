package lifecycle

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/pkg/lifecycle/probe"
)

// ProbeMetrics count the probe attempts of the pods, as the kubelet serves
// them at /metrics/probes. A pod's series go when the pod does.
type ProbeMetrics struct {
	total    *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// NewProbeMetrics returns the probe metrics, a collector to be registered
// by the caller.
func NewProbeMetrics() *ProbeMetrics {
	return &ProbeMetrics{
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "prober", Name: "probe_total",
			Help: "Cumulative number of a liveness, readiness or startup probe for a container by result.",
		}, []string{"probe_type", "result", "container", "pod", "namespace", "pod_uid"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "prober", Name: "probe_duration_seconds",
			Help:    "Duration in seconds for a probe response.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}, []string{"probe_type", "container", "pod", "namespace"}),
	}
}

// Describe and Collect make the probe metrics one prometheus.Collector.
func (m *ProbeMetrics) Describe(ch chan<- *prometheus.Desc) {
	m.total.Describe(ch)
	m.duration.Describe(ch)
}

func (m *ProbeMetrics) Collect(ch chan<- prometheus.Metric) {
	m.total.Collect(ch)
	m.duration.Collect(ch)
}

// observe counts one attempt of a probe.
func (m *ProbeMetrics) observe(kind probe.Kind, container, pod, namespace string, uid types.UID, r probe.Result, took time.Duration) {
	if m == nil {
		return
	}
	result := "unknown"
	switch r {
	case probe.Success, probe.Warning:
		result = "successful"
	case probe.Failure:
		result = "failed"
	}
	typ := probeTitle(kind)
	m.total.WithLabelValues(typ, result, container, pod, namespace, string(uid)).Inc()
	m.duration.WithLabelValues(typ, container, pod, namespace).Observe(took.Seconds())
}

// forget drops a pod's series.
func (m *ProbeMetrics) forget(pod, namespace string, uid types.UID) {
	if m == nil {
		return
	}
	m.total.DeletePartialMatch(prometheus.Labels{"pod_uid": string(uid)})
	m.duration.DeletePartialMatch(prometheus.Labels{"pod": pod, "namespace": namespace})
}

// RuntimeMetrics count the calls the pod workers make to the runtime and
// those that failed, by operation, as the kubelet's
// kubelet_runtime_operations_total and kubelet_runtime_operations_errors_total.
type RuntimeMetrics struct {
	total, errors *prometheus.CounterVec
}

// NewRuntimeMetrics returns the runtime metrics, a collector to be
// registered by the caller.
func NewRuntimeMetrics() *RuntimeMetrics {
	return &RuntimeMetrics{
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "kubelet", Name: "runtime_operations_total",
			Help: "Cumulative number of runtime operations by operation type.",
		}, []string{"operation_type"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "kubelet", Name: "runtime_operations_errors_total",
			Help: "Cumulative number of runtime operation errors by operation type.",
		}, []string{"operation_type"}),
	}
}

func (m *RuntimeMetrics) Describe(ch chan<- *prometheus.Desc) {
	m.total.Describe(ch)
	m.errors.Describe(ch)
}

func (m *RuntimeMetrics) Collect(ch chan<- prometheus.Metric) {
	m.total.Collect(ch)
	m.errors.Collect(ch)
}

func (m *RuntimeMetrics) record(op string, err error) {
	m.total.WithLabelValues(op).Inc()
	if err != nil {
		m.errors.WithLabelValues(op).Inc()
	}
}

// countedRuntime counts the calls to a runtime and its sandboxes.
type countedRuntime struct {
	Runtime
	m *RuntimeMetrics
}

func (r countedRuntime) Sandboxes(ctx context.Context) ([]Sandbox, error) {
	list, err := r.Runtime.Sandboxes(ctx)
	r.m.record("list_podsandbox", err)
	for i, sb := range list {
		list[i] = countedSandbox{Sandbox: sb, m: r.m}
	}
	return list, err
}

func (r countedRuntime) EnsureSandbox(ctx context.Context, spec SandboxSpec) (Sandbox, error) {
	sb, err := r.Runtime.EnsureSandbox(ctx, spec)
	r.m.record("run_podsandbox", err)
	if sb == nil {
		return nil, err
	}
	return countedSandbox{Sandbox: sb, m: r.m}, err
}

func (r countedRuntime) RemoveSandbox(ctx context.Context, uid types.UID) error {
	err := r.Runtime.RemoveSandbox(ctx, uid)
	r.m.record("remove_podsandbox", err)
	return err
}

type countedSandbox struct {
	Sandbox
	m *RuntimeMetrics
}

func (s countedSandbox) StartContainer(ctx context.Context, spec ContainerSpec) error {
	err := s.Sandbox.StartContainer(ctx, spec)
	s.m.record("start_container", err)
	return err
}

func (s countedSandbox) StopContainer(ctx context.Context, name string, grace time.Duration) error {
	err := s.Sandbox.StopContainer(ctx, name, grace)
	s.m.record("stop_container", err)
	return err
}

func (s countedSandbox) UpdateResources(ctx context.Context, pod *corev1.Pod, c *corev1.Container) error {
	err := s.Sandbox.UpdateResources(ctx, pod, c)
	s.m.record("update_container_resources", err)
	return err
}

func (s countedSandbox) ExecSync(ctx context.Context, container string, argv []string) ([]byte, int, error) {
	out, code, err := s.Sandbox.ExecSync(ctx, container, argv)
	s.m.record("exec_sync", err)
	return out, code, err
}

// unwrapped is the runtime rt counts the operations of, with the metrics
// it counts them in (nil when rt is not counted): what it implements
// beyond Runtime is found there.
func unwrapped(rt Runtime) (Runtime, *RuntimeMetrics) {
	if c, ok := rt.(countedRuntime); ok {
		return c.Runtime, c.m
	}
	return rt, nil
}
