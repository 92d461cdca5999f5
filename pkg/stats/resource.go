package stats

import (
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// The kubelet's resource metrics. metrics-server finds them by these names
// and labels, and takes each sample's time from its timestamp, so names,
// labels and help (with the kubelet's stability prefix) are the kubelet's.
var (
	containerLabels = []string{"container", "pod", "namespace"}
	podLabels       = []string{"pod", "namespace"}

	nodeCPUUsageDesc = prometheus.NewDesc("node_cpu_usage_seconds_total",
		"[STABLE] Cumulative cpu time consumed by the node in core-seconds", nil, nil)
	nodeMemoryWorkingSetDesc = prometheus.NewDesc("node_memory_working_set_bytes",
		"[STABLE] Current working set of the node in bytes", nil, nil)
	nodeSwapUsageDesc = prometheus.NewDesc("node_swap_usage_bytes",
		"[ALPHA] Current swap usage of the node in bytes. Reported only on non-windows systems", nil, nil)

	containerStartTimeDesc = prometheus.NewDesc("container_start_time_seconds",
		"[STABLE] Start time of the container since unix epoch in seconds", containerLabels, nil)
	containerCPUUsageDesc = prometheus.NewDesc("container_cpu_usage_seconds_total",
		"[STABLE] Cumulative cpu time consumed by the container in core-seconds", containerLabels, nil)
	containerMemoryWorkingSetDesc = prometheus.NewDesc("container_memory_working_set_bytes",
		"[STABLE] Current working set of the container in bytes", containerLabels, nil)
	containerSwapUsageDesc = prometheus.NewDesc("container_swap_usage_bytes",
		"[ALPHA] Current amount of the container swap usage in bytes. Reported only on non-windows systems", containerLabels, nil)
	containerSwapLimitDesc = prometheus.NewDesc("container_swap_limit_bytes",
		"[ALPHA] Current amount of the container swap limit in bytes. Reported only on non-windows systems", containerLabels, nil)

	podCPUUsageDesc = prometheus.NewDesc("pod_cpu_usage_seconds_total",
		"[STABLE] Cumulative cpu time consumed by the pod in core-seconds", podLabels, nil)
	podMemoryWorkingSetDesc = prometheus.NewDesc("pod_memory_working_set_bytes",
		"[STABLE] Current working set of the pod in bytes", podLabels, nil)
	podSwapUsageDesc = prometheus.NewDesc("pod_swap_usage_bytes",
		"[ALPHA] Current amount of the pod swap usage in bytes. Reported only on non-windows systems", podLabels, nil)

	scrapeErrorDesc = prometheus.NewDesc("resource_scrape_error",
		"[STABLE] 1 if there was an error while getting container metrics, 0 otherwise", nil, nil)
)

// resourceCollector exposes the resource metrics of one summary, or only
// the scrape error when the summary could not be had.
type resourceCollector struct {
	summary *statsv1alpha1.Summary
	err     error
}

// NewResourceCollector returns a collector of the kubelet's resource
// metrics of summary. A non-nil err (the summary failed) reports
// resource_scrape_error 1 and nothing else.
func NewResourceCollector(summary *statsv1alpha1.Summary, err error) prometheus.Collector {
	return resourceCollector{summary: summary, err: err}
}

func (c resourceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		nodeCPUUsageDesc, nodeMemoryWorkingSetDesc, nodeSwapUsageDesc,
		containerStartTimeDesc, containerCPUUsageDesc, containerMemoryWorkingSetDesc, containerSwapUsageDesc, containerSwapLimitDesc,
		podCPUUsageDesc, podMemoryWorkingSetDesc, podSwapUsageDesc,
		scrapeErrorDesc,
	} {
		ch <- d
	}
}

func (c resourceCollector) Collect(ch chan<- prometheus.Metric) {
	if c.err != nil || c.summary == nil {
		ch <- prometheus.MustNewConstMetric(scrapeErrorDesc, prometheus.GaugeValue, 1)
		return
	}
	node := c.summary.Node
	if cpu := node.CPU; cpu != nil && cpu.UsageCoreNanoSeconds != nil {
		ch <- sample(cpu.Time.Time, nodeCPUUsageDesc, prometheus.CounterValue, seconds(*cpu.UsageCoreNanoSeconds))
	}
	if mem := node.Memory; mem != nil && mem.WorkingSetBytes != nil {
		ch <- sample(mem.Time.Time, nodeMemoryWorkingSetDesc, prometheus.GaugeValue, float64(*mem.WorkingSetBytes))
	}
	if swap := node.Swap; swap != nil && swap.SwapUsageBytes != nil {
		ch <- sample(swap.Time.Time, nodeSwapUsageDesc, prometheus.GaugeValue, float64(*swap.SwapUsageBytes))
	}

	for _, pod := range c.summary.Pods {
		name, namespace := pod.PodRef.Name, pod.PodRef.Namespace
		for _, ctr := range pod.Containers {
			labels := []string{ctr.Name, name, namespace}
			// A zero start time is unknown, not 1970: leave it out.
			if ctr.StartTime.Unix() > 0 {
				// The start time has no sample time of its own: it is a fact, not a measurement.
				ch <- prometheus.MustNewConstMetric(containerStartTimeDesc, prometheus.GaugeValue,
					unixSeconds(ctr.StartTime.Time), labels...)
			}
			if cpu := ctr.CPU; cpu != nil && cpu.UsageCoreNanoSeconds != nil {
				ch <- sample(cpu.Time.Time, containerCPUUsageDesc, prometheus.CounterValue, seconds(*cpu.UsageCoreNanoSeconds), labels...)
			}
			if mem := ctr.Memory; mem != nil && mem.WorkingSetBytes != nil {
				ch <- sample(mem.Time.Time, containerMemoryWorkingSetDesc, prometheus.GaugeValue, float64(*mem.WorkingSetBytes), labels...)
			}
			if swap := ctr.Swap; swap != nil {
				var used uint64
				if swap.SwapUsageBytes != nil {
					used = *swap.SwapUsageBytes
					ch <- sample(swap.Time.Time, containerSwapUsageDesc, prometheus.GaugeValue, float64(used), labels...)
				}
				// The limit is what is used plus what is still available.
				if swap.SwapAvailableBytes != nil {
					ch <- sample(swap.Time.Time, containerSwapLimitDesc, prometheus.GaugeValue, float64(used+*swap.SwapAvailableBytes), labels...)
				}
			}
		}
		labels := []string{name, namespace}
		if cpu := pod.CPU; cpu != nil && cpu.UsageCoreNanoSeconds != nil {
			ch <- sample(cpu.Time.Time, podCPUUsageDesc, prometheus.CounterValue, seconds(*cpu.UsageCoreNanoSeconds), labels...)
		}
		if mem := pod.Memory; mem != nil && mem.WorkingSetBytes != nil {
			ch <- sample(mem.Time.Time, podMemoryWorkingSetDesc, prometheus.GaugeValue, float64(*mem.WorkingSetBytes), labels...)
		}
		if swap := pod.Swap; swap != nil && swap.SwapUsageBytes != nil {
			ch <- sample(swap.Time.Time, podSwapUsageDesc, prometheus.GaugeValue, float64(*swap.SwapUsageBytes), labels...)
		}
	}
	ch <- prometheus.MustNewConstMetric(scrapeErrorDesc, prometheus.GaugeValue, 0)
}

// sample is a metric stamped with the time it was measured, which
// metrics-server needs to turn cumulative CPU into a rate.
func sample(at time.Time, desc *prometheus.Desc, typ prometheus.ValueType, value float64, labels ...string) prometheus.Metric {
	return prometheus.NewMetricWithTimestamp(at, prometheus.MustNewConstMetric(desc, typ, value, labels...))
}

func seconds(nanoseconds uint64) float64 { return float64(nanoseconds) / float64(time.Second) }

// unixSeconds adds the fraction separately: divided as a whole, the
// nanoseconds since 1970 lose the fraction's last digits.
func unixSeconds(t time.Time) float64 {
	return float64(t.Unix()) + float64(t.Nanosecond())/float64(time.Second)
}

// ResourceMetricsHandler serves /metrics/resource: for each request it asks
// summarize for the summary the request is about and writes its resource
// metrics in the Prometheus text format (or what the client negotiates).
// When summarize fails, the answer is still 200, with resource_scrape_error
// 1, as from the kubelet.
func ResourceMetricsHandler(summarize func(*http.Request) (*statsv1alpha1.Summary, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		logger := klog.FromContext(r.Context())
		summary, err := summarize(r)
		if err != nil {
			logger.Error(err, "Unable to get the stats summary for the resource metrics")
		}
		// A registry per request: the collector holds this request's
		// summary, and pods that are gone leave no series behind.
		reg := prometheus.NewRegistry()
		if err := reg.Register(NewResourceCollector(summary, err)); err != nil {
			http.Error(w, fmt.Sprintf("register the resource metrics: %v", err), http.StatusInternalServerError)
			return
		}
		promhttp.HandlerFor(reg, promhttp.HandlerOpts{
			ErrorLog:      promLogger{logger},
			ErrorHandling: promhttp.ContinueOnError,
			// A node's answer is a few KB scraped every few seconds: gzip
			// would cost an agent of thousands of nodes a third of the
			// CPU it spends serving metrics-server, to save bytes on a
			// link to the control plane that has them to spare.
			DisableCompression: true,
		}).ServeHTTP(w, r)
	})
}

// promLogger logs promhttp's errors (a pod reported twice, say) to klog.
type promLogger struct{ logger klog.Logger }

func (l promLogger) Println(v ...any) {
	l.logger.Info("Resource metrics: " + fmt.Sprint(v...))
}
