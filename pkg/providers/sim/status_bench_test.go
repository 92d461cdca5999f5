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
		pod.Status = corev1.PodStatus{}
		setPending(pod, now, "10.0.0.1", "10.1.0.2")
		setRunning(pod, now)
		exitContainers(pod, now, 1)
		setBackOff(pod, now, 10*time.Second)
		setRestarted(pod, now)
		setFinished(pod, now)
	}
}

// BenchmarkStatusConditions measures the condition-only changes on a pod
// that already has its conditions: back-off and restart.
func BenchmarkStatusConditions(b *testing.B) {
	pod := benchPod()
	now := time.Unix(1_700_000_000, 0)
	setPending(pod, now, "10.0.0.1", "10.1.0.2")
	setRunning(pod, now)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		setRestarted(pod, now)
		setFinished(pod, now)
		setRunning(pod, now)
	}
}
