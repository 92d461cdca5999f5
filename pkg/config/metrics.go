package config

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodelet/nodelet/pkg/config/checkpoint"
)

// metrics are the controller's Prometheus metrics.
type metrics struct {
	active *prometheus.GaugeVec
	ok     prometheus.Gauge
}

func newMetrics() *metrics {
	return &metrics{
		active: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nodelet_config_active_info",
			Help: "The configuration in use: 1 for it, labelled by its source (\"local\" or the ConfigMap's <namespace>/<name>), " +
				"the ConfigMap's uid and resourceVersion, and the sha256 of its content (of the ConfigMap's config; for the local config, of its settings as JSON).",
		}, []string{"source", "uid", "resource_version", "checksum"}),
		ok: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nodelet_config_ok",
			Help: "1 when the node condition ConfigOK is True (the assigned configuration is in use and the last sync worked), else 0.",
		}),
	}
}

func (m *metrics) setActive(src *checkpoint.Source, checksum string) {
	m.active.Reset()
	if src == nil {
		m.active.WithLabelValues("local", "", "", checksum).Set(1)
		return
	}
	m.active.WithLabelValues(src.Namespace+"/"+src.Name, string(src.UID), src.ResourceVersion, checksum).Set(1)
}

func (m *metrics) setOK(ok bool) {
	if ok {
		m.ok.Set(1)
	} else {
		m.ok.Set(0)
	}
}

// Register adds the controller's metrics to reg.
func (c *Controller) Register(reg prometheus.Registerer) error {
	for _, col := range []prometheus.Collector{c.metrics.active, c.metrics.ok} {
		if err := reg.Register(col); err != nil {
			return err
		}
	}
	return nil
}
