package sim

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/pkg/stage"
)

// BenchmarkPodLifecycle measures one pod's whole life in the provider,
// created, Running, deleted (30 s of grace) and gone, played by the
// built-in lifecycle and by kwok's published stage sets, with no delays
// (the fake clock is not moved, every step is due at once). Figures, not
// a test: go test -bench PodLifecycle -benchmem ./pkg/providers/sim/
func BenchmarkPodLifecycle(b *testing.B) {
	for _, bc := range []struct {
		name   string
		stages stage.Lifecycle
	}{
		{"builtin", nil},
		{"kwok-pod-fast", kwokSet(b, "pod/fast")},
		{"kwok-pod-general", zeroDelays(b)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ctx := context.Background()
			clk := clocktesting.NewFakeClock(t0)
			p, err := New(Options{
				NodeName: "sim-0", PodCIDR: "10.0.0.0/16", Address: "192.168.0.10", Port: 10250,
				Capacity: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("1000")},
				Clock:    clk, Stages: bc.stages,
			})
			if err != nil {
				b.Fatal(err)
			}
			p.NotifyPods(ctx, func(*corev1.Pod) {})
			var grace int64 = 30
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				pod := benchPod()
				pod.Name, pod.UID = fmt.Sprintf("p%d", i), types.UID(fmt.Sprintf("uid-%d", i))
				pod.Status.Phase = corev1.PodPending
				if err := p.CreatePod(ctx, pod); err != nil {
					b.Fatal(err)
				}
				if got, _ := p.GetPod(ctx, "ns", pod.Name); got.Status.Phase != corev1.PodRunning {
					b.Fatalf("phase %s, want Running", got.Status.Phase)
				}
				del := pod.DeepCopy()
				del.DeletionTimestamp = &metav1.Time{Time: clk.Now().Add(30 * time.Second)}
				del.DeletionGracePeriodSeconds = &grace
				if err := p.DeletePod(ctx, del); err != nil {
					b.Fatal(err)
				}
				p.rearming.Wait()
				if _, err := p.GetPod(ctx, "ns", pod.Name); err == nil {
					b.Fatal("pod still there after its delete")
				}
			}
		})
	}
}

// zeroDelays is kwok's general pod set without its delays (1 to 5 s a
// stage), so that every stage is due at once.
func zeroDelays(b *testing.B) stage.Lifecycle {
	b.Helper()
	stages, err := stage.Load("../../stage/testdata/kwok/pod/general")
	if err != nil {
		b.Fatal(err)
	}
	for _, s := range stages {
		s.Spec.Delay = nil
	}
	l, err := stage.CompileAll(stages)
	if err != nil {
		b.Fatal(err)
	}
	return l
}
