package podrules

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestGracePeriod(t *testing.T) {
	secs := func(s int64) *int64 { return &s }
	pod := func(deletion, spec *int64) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{DeletionGracePeriodSeconds: deletion},
			Spec:       corev1.PodSpec{TerminationGracePeriodSeconds: spec},
		}
	}
	tests := []struct {
		name      string
		pod       *corev1.Pod
		probe     *int64 // the probe's terminationGracePeriodSeconds
		want      time.Duration
		wantOK    bool
		wantProbe time.Duration
	}{
		{"none: the API server's default", pod(nil, nil), nil, 30 * time.Second, false, 30 * time.Second},
		{"spec", pod(nil, secs(5)), nil, 5 * time.Second, true, 5 * time.Second},
		{"deletion over spec", pod(secs(2), secs(5)), nil, 2 * time.Second, true, 2 * time.Second},
		{"deletion of 0", pod(secs(0), secs(5)), nil, 0, true, 0},
		{"deletion alone", pod(secs(45), nil), nil, 45 * time.Second, true, 45 * time.Second},
		{"probe over pod", pod(secs(2), secs(5)), secs(1), 2 * time.Second, true, time.Second},
		{"probe over default", pod(nil, nil), secs(60), 30 * time.Second, false, time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, ok := GracePeriod(tt.pod); got != tt.want || ok != tt.wantOK {
				t.Errorf("GracePeriod = %s, %t; want %s, %t", got, ok, tt.want, tt.wantOK)
			}
			probe := &corev1.Probe{TerminationGracePeriodSeconds: tt.probe}
			if got := ProbeGracePeriod(tt.pod, probe); got != tt.wantProbe {
				t.Errorf("ProbeGracePeriod = %s, want %s", got, tt.wantProbe)
			}
		})
	}
}
