package attachdetach

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Reasons of a forced detach, the values of the reason label.
const (
	// ForceDetachReasonTimeout: the volume was still mounted on an unhealthy
	// node when maxWaitForUnmount passed.
	ForceDetachReasonTimeout = "timeout"
	// ForceDetachReasonOutOfService: the node has the
	// node.kubernetes.io/out-of-service taint.
	ForceDetachReasonOutOfService = "out-of-service"
)

// metrics are the reconciler's Prometheus metrics.
type metrics struct {
	forcedDetaches *prometheus.CounterVec
}

func newMetrics() *metrics {
	m := &metrics{
		forcedDetaches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodelet_volume_forced_detaches_total",
			Help: "Detaches started without checking that the node unmounted the volume, by reason: " +
				"\"timeout\" (maxWaitForUnmount passed) or \"out-of-service\" (the node has the out-of-service taint).",
		}, []string{"reason"}),
	}
	// Both series exist from the start, at zero.
	m.forcedDetaches.WithLabelValues(ForceDetachReasonTimeout)
	m.forcedDetaches.WithLabelValues(ForceDetachReasonOutOfService)
	return m
}

// Register adds the reconciler's metrics to reg.
func (r *Reconciler) Register(reg prometheus.Registerer) error {
	return reg.Register(r.metrics.forcedDetaches)
}
