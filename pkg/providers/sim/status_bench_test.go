package sim

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func benchPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid"},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "init", Image: "busybox"}},
			Containers:     []corev1.Container{{Name: "app", Image: "nginx"}, {Name: "log", Image: "busybox"}},
		},
	}
}

// BenchmarkStatusLifecycle measures the status changes of one simulated
// pod from accepted to finished, with one crash and restart on the way.
func BenchmarkStatusLifecycle(b *testing.B) {
	pod := benchPod()
	now := time.Unix(1_700_000_000, 0)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		s := &corev1.PodStatus{}
		setPending(pod, s, now, "10.0.0.1", "10.1.0.2")
		setRunning(pod, s, now)
		exitContainers(s, now, 1)
		setBackOff(pod, s, now, 10*time.Second)
		setRestarted(pod, s, now)
		setFinished(pod, s, now)
	}
}

// BenchmarkStatusConditions measures the condition-only changes on a pod
// that already has its conditions: back-off and restart.
func BenchmarkStatusConditions(b *testing.B) {
	pod := benchPod()
	now := time.Unix(1_700_000_000, 0)
	s := &corev1.PodStatus{}
	setPending(pod, s, now, "10.0.0.1", "10.1.0.2")
	setRunning(pod, s, now)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		setRestarted(pod, s, now)
		setFinished(pod, s, now)
		setRunning(pod, s, now)
	}
}
