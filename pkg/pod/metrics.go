package pod

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the controller's kubelet-like Prometheus metrics, served at
// the kubelet API's /metrics.
type metrics struct {
	startDuration prometheus.Histogram
	syncDuration  *prometheus.HistogramVec
}

func newMetrics() *metrics {
	return &metrics{
		startDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Subsystem: "kubelet", Name: "pod_start_duration_seconds",
			Help:    "Duration in seconds from a pod's creation to the first status write that shows it Running, as the kubelet's.",
			Buckets: []float64{0.5, 1, 2, 3, 4, 5, 6, 8, 10, 20, 30, 45, 60, 120, 180, 240, 300, 360, 480, 600, 900, 1200, 1800, 2700, 3600},
		}),
		syncDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "kubelet", Name: "pod_worker_duration_seconds",
			Help:    "Duration in seconds to sync a single pod with its provider (operation \"sync\"); its status is written apart.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
		}, []string{"operation"}),
	}
}

// observeStart records a pod's start latency when a status write takes it
// to Running for the first time.
func (m *metrics) observeStart(pod *corev1.Pod, want *corev1.PodStatus, now time.Time) {
	if pod.Status.Phase == corev1.PodRunning || want.Phase != corev1.PodRunning || pod.CreationTimestamp.IsZero() {
		return
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.RestartCount > 0 || cs.LastTerminationState.Terminated != nil {
			return // Running again, not for the first time
		}
	}
	m.startDuration.Observe(now.Sub(pod.CreationTimestamp.Time).Seconds())
}

// Register adds the controller's metrics to reg: its histograms, and the
// counts of running pods and containers on its nodes as the API has them.
func (c *Controller) Register(reg prometheus.Registerer) error {
	runningPods := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Subsystem: "kubelet", Name: "running_pods",
		Help: "Number of pods on the agent's nodes whose status shows them Running.",
	}, func() float64 {
		n := 0
		c.forEachPod(func(p *corev1.Pod) {
			if p.Status.Phase == corev1.PodRunning {
				n++
			}
		})
		return float64(n)
	})
	containers := &containerStates{c: c, desc: prometheus.NewDesc("kubelet_running_containers",
		"Number of containers on the agent's nodes, by the state their pods' statuses show.", []string{"container_state"}, nil)}
	for _, col := range []prometheus.Collector{c.metrics.startDuration, c.metrics.syncDuration, runningPods, containers} {
		if err := reg.Register(col); err != nil {
			return err
		}
	}
	return nil
}

// forEachPod calls f with each cached pod bound to one of our nodes.
func (c *Controller) forEachPod(f func(*corev1.Pod)) {
	pods, err := c.lister.List(labels.Everything())
	if err != nil {
		return
	}
	for _, p := range pods {
		if _, ok := c.provider(p.Spec.NodeName); ok {
			f(p)
		}
	}
}

// containerStates counts containers by state at each scrape.
type containerStates struct {
	c    *Controller
	desc *prometheus.Desc
}

func (s *containerStates) Describe(ch chan<- *prometheus.Desc) { ch <- s.desc }

func (s *containerStates) Collect(ch chan<- prometheus.Metric) {
	counts := map[string]int{"running": 0, "waiting": 0, "exited": 0}
	s.c.forEachPod(func(p *corev1.Pod) {
		for _, list := range [][]corev1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
			for _, cs := range list {
				switch {
				case cs.State.Running != nil:
					counts["running"]++
				case cs.State.Terminated != nil:
					counts["exited"]++
				default:
					counts["waiting"]++
				}
			}
		}
	})
	for state, n := range counts {
		ch <- prometheus.MustNewConstMetric(s.desc, prometheus.GaugeValue, float64(n), state)
	}
}
