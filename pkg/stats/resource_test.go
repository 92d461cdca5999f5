package stats

import (
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/klog/v2/ktesting"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// scrape serves one request of the resource metrics handler and parses
// the text exposition it answers.
func scrape(t *testing.T, summary *statsv1alpha1.Summary, err error) (string, map[string]*dto.MetricFamily) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	h := ResourceMetricsHandler(func(*http.Request) (*statsv1alpha1.Summary, error) { return summary, err })
	rec := httptest.NewRecorder()
	req := httptest.NewRequestWithContext(ctx, http.MethodGet, "/metrics/resource", nil)
	req.Header.Set("Accept-Encoding", "gzip") // as Go's HTTP client (metrics-server's) asks
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d %q, want 200", rec.Code, rec.Body)
	}
	if ce := rec.Header().Get("Content-Encoding"); ce != "" {
		t.Errorf("content encoding %q, want none", ce)
	}
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("content type %q, want the text format", ct)
	}
	body := rec.Body.String()
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, perr := parser.TextToMetricFamilies(strings.NewReader(body))
	if perr != nil {
		t.Fatalf("parse the exposition: %v\n%s", perr, body)
	}
	return body, families
}

// series is one parsed sample.
type series struct {
	labels    map[string]string
	value     float64
	timestamp int64 // ms, 0 when absent
}

func samples(f *dto.MetricFamily) []series {
	var out []series
	for _, m := range f.GetMetric() {
		s := series{labels: map[string]string{}, timestamp: m.GetTimestampMs()}
		for _, l := range m.GetLabel() {
			s.labels[l.GetName()] = l.GetValue()
		}
		switch {
		case m.Counter != nil:
			s.value = m.Counter.GetValue()
		case m.Gauge != nil:
			s.value = m.Gauge.GetValue()
		case m.Untyped != nil:
			s.value = m.Untyped.GetValue()
		}
		out = append(out, s)
	}
	return out
}

func TestResourceMetrics(t *testing.T) {
	body, families := scrape(t, testSummary(), nil)
	const at = 1700000100500 // the samples' time, in ms
	web := func(container string) map[string]string {
		l := map[string]string{"namespace": "shop", "pod": "web"}
		if container != "" {
			l["container"] = container
		}
		return l
	}
	want := []struct {
		name, help string
		typ        dto.MetricType
		samples    []series
	}{
		{"node_cpu_usage_seconds_total", "[STABLE] Cumulative cpu time consumed by the node in core-seconds", dto.MetricType_COUNTER,
			[]series{{map[string]string{}, 12.5, at}}},
		{"node_memory_working_set_bytes", "[STABLE] Current working set of the node in bytes", dto.MetricType_GAUGE,
			[]series{{map[string]string{}, 4096, at}}},
		{"node_swap_usage_bytes", "[ALPHA] Current swap usage of the node in bytes. Reported only on non-windows systems", dto.MetricType_GAUGE,
			[]series{{map[string]string{}, 512, at}}},
		{"container_cpu_usage_seconds_total", "[STABLE] Cumulative cpu time consumed by the container in core-seconds", dto.MetricType_COUNTER,
			[]series{{web("app"), 2, at}, {web("init-less"), 1, at}}},
		{"container_memory_working_set_bytes", "[STABLE] Current working set of the container in bytes", dto.MetricType_GAUGE,
			[]series{{web("app"), 1024, at}, {web("init-less"), 1024, at}}},
		{"container_start_time_seconds", "[STABLE] Start time of the container since unix epoch in seconds", dto.MetricType_GAUGE,
			[]series{{web("app"), 1700000000.25, 0}}},
		{"container_swap_usage_bytes", "[ALPHA] Current amount of the container swap usage in bytes. Reported only on non-windows systems", dto.MetricType_GAUGE,
			[]series{{web("app"), 100, at}}},
		{"container_swap_limit_bytes", "[ALPHA] Current amount of the container swap limit in bytes. Reported only on non-windows systems", dto.MetricType_GAUGE,
			[]series{{web("app"), 1000, at}}},
		{"pod_cpu_usage_seconds_total", "[STABLE] Cumulative cpu time consumed by the pod in core-seconds", dto.MetricType_COUNTER,
			[]series{{web(""), 3, at}}},
		{"pod_memory_working_set_bytes", "[STABLE] Current working set of the pod in bytes", dto.MetricType_GAUGE,
			[]series{{web(""), 2048, at}}},
		{"pod_swap_usage_bytes", "[ALPHA] Current amount of the pod swap usage in bytes. Reported only on non-windows systems", dto.MetricType_GAUGE,
			[]series{{web(""), 0, at}}},
		{"resource_scrape_error", "[STABLE] 1 if there was an error while getting container metrics, 0 otherwise", dto.MetricType_GAUGE,
			[]series{{map[string]string{}, 0, 0}}},
	}
	var wantNames []string
	for _, w := range want {
		wantNames = append(wantNames, w.name)
		f, ok := families[w.name]
		if !ok {
			t.Errorf("no %s in\n%s", w.name, body)
			continue
		}
		if f.GetHelp() != w.help || f.GetType() != w.typ {
			t.Errorf("%s: help %q type %v, want %q %v", w.name, f.GetHelp(), f.GetType(), w.help, w.typ)
		}
		got := samples(f)
		if len(got) != len(w.samples) {
			t.Errorf("%s: %d samples %+v, want %+v", w.name, len(got), got, w.samples)
			continue
		}
		for i := range got {
			g, ws := got[i], w.samples[i]
			if !maps.Equal(g.labels, ws.labels) || g.value != ws.value || g.timestamp != ws.timestamp {
				t.Errorf("%s sample %d = %+v, want %+v", w.name, i, g, ws)
			}
		}
	}
	slices.Sort(wantNames)
	if names := slices.Sorted(maps.Keys(families)); !slices.Equal(names, wantNames) {
		t.Errorf("metric families %v, want %v", names, wantNames)
	}
	// metrics-server reads the raw lines: name, labels, value, time in ms.
	for _, line := range []string{
		"node_cpu_usage_seconds_total 12.5 1700000100500\n",
		`container_cpu_usage_seconds_total{container="app",namespace="shop",pod="web"} 2 1700000100500` + "\n",
		`pod_memory_working_set_bytes{namespace="shop",pod="web"} 2048 1700000100500` + "\n",
	} {
		if !strings.Contains(body, line) {
			t.Errorf("exposition lacks %q:\n%s", line, body)
		}
	}
}

func TestResourceMetricsScrapeError(t *testing.T) {
	body, families := scrape(t, nil, errors.New("runtime is down"))
	if len(families) != 1 {
		t.Errorf("families %v, want only resource_scrape_error:\n%s", slices.Sorted(maps.Keys(families)), body)
	}
	f, ok := families["resource_scrape_error"]
	if !ok || len(f.GetMetric()) != 1 || f.GetMetric()[0].GetGauge().GetValue() != 1 {
		t.Errorf("resource_scrape_error %v, want 1:\n%s", f, body)
	}
}

func TestResourceMetricsLeaveOutUnknownFigures(t *testing.T) {
	s := Summary(statsv1alpha1.NodeStats{NodeName: "n", CPU: &statsv1alpha1.CPUStats{}}, []statsv1alpha1.PodStats{{
		PodRef:     statsv1alpha1.PodReference{Name: "p", Namespace: "ns"},
		Containers: []statsv1alpha1.ContainerStats{{Name: "c", Swap: &statsv1alpha1.SwapStats{}}},
	}})
	body, families := scrape(t, s, nil)
	if names := slices.Sorted(maps.Keys(families)); !slices.Equal(names, []string{"resource_scrape_error"}) {
		t.Errorf("families %v, want only resource_scrape_error when no figure is known:\n%s", names, body)
	}
}
