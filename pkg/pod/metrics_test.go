package pod

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A pod reported Running is counted as running with its container, its
// start latency is observed once, and syncs are timed.
func TestMetrics(t *testing.T) {
	p := newFakeProvider()
	_, c := runController(t, p, testPod("a", "n", func(p *corev1.Pod) {
		p.CreationTimestamp = metav1.NewTime(time.Now().Add(-3 * time.Second))
	}))
	reg := prometheus.NewRegistry()
	if err := c.Register(reg); err != nil {
		t.Fatal(err)
	}
	exposition := func() string {
		rec := httptest.NewRecorder()
		promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		return rec.Body.String()
	}
	want := []string{
		"kubelet_running_pods 1\n",
		`kubelet_running_containers{container_state="running"} 1` + "\n",
		"kubelet_pod_start_duration_seconds_count 1\n",
		`kubelet_pod_worker_duration_seconds_count{operation="sync"} `,
	}
	eventually(t, "the running pod in the metrics", func() bool {
		out := exposition()
		for _, w := range want {
			if !strings.Contains(out, w) {
				return false
			}
		}
		return true
	})
	if out := exposition(); !strings.Contains(out, `kubelet_pod_start_duration_seconds_bucket{le="2"} 0`) {
		t.Errorf("a pod created 3 s ago counted as started within 2 s:\n%s", out)
	}
}
