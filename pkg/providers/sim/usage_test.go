package sim

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodelet/nodelet/pkg/provider"
)

func halfOfRequests(o *Options) { o.Usage.CPURequestRatio, o.Usage.MemoryRequestRatio = 0.5, 0.5 }

// A pod uses a share of its requests (here half), integrated over time into its
// cumulative CPU; an annotation changes its load at once; the node adds
// the system's usage to its pods'.
func TestSimulatedUsage(t *testing.T) {
	ctx := context.Background()
	p, clk, _ := newTest(t, halfOfRequests)
	pod := testPod("web", "200m", "100Mi")
	pod.Spec.Containers = pod.Spec.Containers[:1] // app alone: the side container has no requests
	if err := p.CreatePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	sample := func() (rate, total, mem uint64) {
		t.Helper()
		stats, err := p.PodStats(ctx)
		if err != nil || len(stats) != 1 {
			t.Fatalf("PodStats: %v, %d pods", err, len(stats))
		}
		s := stats[0]
		if len(s.Containers) != 1 || *s.Containers[0].CPU.UsageNanoCores != *s.CPU.UsageNanoCores {
			t.Errorf("containers %+v: want one with the whole pod's usage", s.Containers)
		}
		return *s.CPU.UsageNanoCores, *s.CPU.UsageCoreNanoSeconds, *s.Memory.WorkingSetBytes
	}
	if rate, total, mem := sample(); rate != 1e8 || total != 0 || mem != 50<<20 {
		t.Errorf("first sample: rate %d total %d memory %d, want 1e8, 0, 50Mi", rate, total, mem)
	}
	clk.Step(10 * time.Second)
	if _, total, _ := sample(); total != 1e9 {
		t.Errorf("after 10 s at 100m: total %d, want 1e9", total)
	}

	busy := pod.DeepCopy()
	busy.Annotations = map[string]string{AnnotationCPUUsage: "1500m", AnnotationMemoryUsage: "1Gi"}
	if err := p.UpdatePod(ctx, busy); err != nil {
		t.Fatal(err)
	}
	if rate, _, mem := sample(); rate != 15e8 || mem != 1<<30 {
		t.Errorf("annotated: rate %d memory %d, want 1.5e9 and 1Gi", rate, mem)
	}

	ns, err := p.NodeStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := *ns.CPU.UsageNanoCores; got != 16e8 {
		t.Errorf("node cpu %d, want the pod's 1.5 cores and the system's 100m", got)
	}
	wantWS := uint64(1<<30 + 512<<20)
	if got := *ns.Memory.WorkingSetBytes; got != wantWS {
		t.Errorf("node working set %d, want %d", got, wantWS)
	}
	capacity := resource.MustParse("8Gi")
	if got := *ns.Memory.AvailableBytes; got != uint64(capacity.Value())-wantWS {
		t.Errorf("node available %d, want capacity less the working set", got)
	}
}

// metrics-server takes a pod's CPU as the difference of two cumulative
// samples over the difference of their timestamps, which
// /metrics/resource carries in whole milliseconds, and kubectl top
// rounds the rate up to a millicore: a counter integrated to finer
// instants than the timestamps it is shown with made 1500m show as
// 1501m (seen in CI).
func TestUsageRateFromTwoSamplesAsMetricsServerTakesIt(t *testing.T) {
	ctx := context.Background()
	p, clk, _ := newTest(t, nil)
	clk.Step(400 * time.Microsecond)
	pod := testPod("web", "200m", "100Mi")
	pod.Annotations = map[string]string{AnnotationCPUUsage: "1500m"}
	if err := p.CreatePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	// scrape is what metrics-server reads of one sample: the timestamp
	// in milliseconds and the counter in seconds.
	scrape := func() (time.Time, uint64) {
		t.Helper()
		stats, err := p.PodStats(ctx)
		if err != nil || len(stats) != 1 {
			t.Fatalf("PodStats: %v, %d pods", err, len(stats))
		}
		cpu := stats[0].CPU
		seconds := float64(*cpu.UsageCoreNanoSeconds) / 1e9
		return time.UnixMilli(cpu.Time.UnixMilli()), uint64(seconds * 1e9)
	}
	for _, step := range []time.Duration{15*time.Second + 700*time.Microsecond, 15*time.Second + 300*time.Microsecond, 14*time.Second + 999*time.Microsecond} {
		at1, c1 := scrape()
		clk.Step(step)
		at2, c2 := scrape()
		rate := uint64(float64(c2-c1) / at2.Sub(at1).Seconds())
		if got := resource.NewScaledQuantity(int64(rate), resource.Nano).MilliValue(); got != 1500 {
			t.Errorf("after a step of %v: metrics-server's rate %dn shows as %dm, want the annotation's 1500m", step, rate, got)
		}
	}
}

// Noise varies samples within its share of the load.
func TestSimulatedUsageNoise(t *testing.T) {
	ctx := context.Background()
	p, _, _ := newTest(t, func(o *Options) { halfOfRequests(o); o.Usage.Noise = 0.2 })
	pod := testPod("web", "1", "1Gi")
	pod.Spec.Containers = pod.Spec.Containers[:1]
	if err := p.CreatePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	seen := map[uint64]bool{}
	for range 20 {
		stats, err := p.PodStats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rate := *stats[0].CPU.UsageNanoCores
		if rate < 4e8 || rate > 6e8 {
			t.Fatalf("rate %d outside 500m ± 20%%", rate)
		}
		seen[rate] = true
	}
	if len(seen) < 2 {
		t.Errorf("20 samples all %v: no noise", seen)
	}
}

// Containers share the pod's load in proportion to their requests, a
// container without one counting as AssumedCPU.
func TestSimulatedUsageShares(t *testing.T) {
	ctx := context.Background()
	p, _, _ := newTest(t, halfOfRequests)
	pod := testPod("web", "300m", "") // app 300m, side none: 100m assumed
	pod.Annotations = map[string]string{AnnotationCPUUsage: "2"}
	if err := p.CreatePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	stats, err := p.PodStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]uint64{}
	for _, c := range stats[0].Containers {
		got[c.Name] = *c.CPU.UsageNanoCores
	}
	if got["app"] != 15e8 || got["side"] != 5e8 {
		t.Errorf("container cpu %v, want app 1.5 cores and side 0.5", got)
	}
}

// An evicted pod fails at once with the eviction's reason, message and
// condition, releases what it held and never runs again; admission and
// pressure hooks are consulted.
func TestEvictAndPressureHooks(t *testing.T) {
	ctx := context.Background()
	refuse := false
	p, clk, rec := newTest(t, func(o *Options) {
		o.CompleteRatio, o.RunDuration = 1, time.Minute // a run that would end later
		o.Admit = func(*corev1.Pod) error {
			if refuse {
				return provider.Reject("Evicted", "The node had condition: [MemoryPressure]. ")
			}
			return nil
		}
		o.Pressure = func(n *corev1.Node) {
			setNodeCondition(&n.Status, corev1.NodeMemoryPressure, corev1.ConditionTrue, "KubeletHasInsufficientMemory", "kubelet has insufficient memory available")
		}
	})
	pod := testPod("hog", "1", "1Gi")
	if err := p.CreatePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	cond := corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "TerminationByKubelet"}
	if err := p.Evict(pod, provider.Eviction{Reason: "Evicted", Message: "The node was low on resource: memory. ", Conditions: []corev1.PodCondition{cond}}); err != nil {
		t.Fatal(err)
	}
	got := rec.last()
	if got.Status.Phase != corev1.PodFailed || got.Status.Reason != "Evicted" || condition(got, corev1.DisruptionTarget) != corev1.ConditionTrue {
		t.Errorf("evicted pod status %+v", got.Status)
	}
	clk.Step(2 * time.Minute)
	if now := mustGet(t, p, "hog"); now.Status.Phase != corev1.PodFailed {
		t.Errorf("the evicted pod went on: %s", now.Status.Phase)
	}
	if stats, _ := p.PodStats(ctx); len(stats) != 0 {
		t.Errorf("an evicted pod still uses resources: %+v", stats)
	}

	refuse = true
	if err := p.CreatePod(ctx, testPod("late", "", "")); !errors.As(err, new(*provider.Rejection)) {
		t.Errorf("CreatePod under pressure: %v, want a rejection", err)
	}
	node := &corev1.Node{}
	p.ConfigureNode(ctx, node)
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeMemoryPressure && c.Status != corev1.ConditionTrue {
			t.Errorf("MemoryPressure %s, want the hook's True", c.Status)
		}
	}
}

// BenchmarkPodStatsKwokExpressions is the cost of a sample of a pod of
// two containers: by the model alone, and by kwok's usage-from-annotation
// (two expressions a container).
func BenchmarkPodStatsKwokExpressions(b *testing.B) {
	for _, bc := range []struct {
		name  string
		rules string
	}{{"model", ""}, {"usage-from-annotation", kwokUsageFromAnnotation}} {
		b.Run(bc.name, func(b *testing.B) {
			p, _, _ := newTest(b, func(o *Options) {
				halfOfRequests(o)
				if bc.rules != "" {
					withRules(b, bc.rules)(o)
				}
			})
			pod := testPod("web", "200m", "100Mi")
			pod.Annotations = map[string]string{"kwok.x-k8s.io/usage-cpu": "250m"}
			if err := p.CreatePod(context.Background(), pod); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if s, err := p.PodStats(context.Background()); err != nil || len(s) != 1 {
					b.Fatal(s, err)
				}
			}
		})
	}
}
