package lifecycle

import (
	"time"

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
