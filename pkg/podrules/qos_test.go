package podrules

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestQOSClass(t *testing.T) {
	list := func(kv ...string) corev1.ResourceList {
		l := corev1.ResourceList{}
		for i := 0; i < len(kv); i += 2 {
			l[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
		}
		return l
	}
	res := func(requests, limits corev1.ResourceList) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{Requests: requests, Limits: limits}
	}
	guaranteed := res(list("cpu", "1", "memory", "1Gi"), list("cpu", "1", "memory", "1Gi"))
	pod := func(containers ...corev1.ResourceRequirements) *corev1.Pod {
		p := &corev1.Pod{}
		for _, r := range containers {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "c", Resources: r})
		}
		return p
	}
	tests := []struct {
		name string
		pod  func() *corev1.Pod
		want corev1.PodQOSClass
	}{
		{"nothing", func() *corev1.Pod { return pod(res(nil, nil)) }, corev1.PodQOSBestEffort},
		{"no containers", func() *corev1.Pod { return pod() }, corev1.PodQOSBestEffort},
		{"only other resources", func() *corev1.Pod {
			return pod(res(list("ephemeral-storage", "1Gi"), list("hugepages-2Mi", "2Mi")))
		}, corev1.PodQOSBestEffort},
		{"zero requests", func() *corev1.Pod { return pod(res(list("cpu", "0"), nil)) }, corev1.PodQOSBestEffort},
		{"requests only", func() *corev1.Pod { return pod(res(list("cpu", "100m"), nil)) }, corev1.PodQOSBurstable},
		{"limits equal requests", func() *corev1.Pod { return pod(guaranteed) }, corev1.PodQOSGuaranteed},
		{"limits only: requests default to them", func() *corev1.Pod {
			return pod(res(nil, list("cpu", "1", "memory", "1Gi")))
		}, corev1.PodQOSGuaranteed},
		{"one request defaulted, one lower", func() *corev1.Pod {
			return pod(res(list("cpu", "500m"), list("cpu", "1", "memory", "1Gi")))
		}, corev1.PodQOSBurstable},
		{"missing cpu limit", func() *corev1.Pod {
			return pod(res(list("cpu", "1", "memory", "1Gi"), list("memory", "1Gi")))
		}, corev1.PodQOSBurstable},
		{"request below limit", func() *corev1.Pod {
			return pod(res(list("cpu", "500m", "memory", "1Gi"), list("cpu", "1", "memory", "1Gi")))
		}, corev1.PodQOSBurstable},
		{"one guaranteed, one best effort", func() *corev1.Pod { return pod(guaranteed, res(nil, nil)) }, corev1.PodQOSBurstable},
		{"guaranteed with init container", func() *corev1.Pod {
			p := pod(guaranteed)
			p.Spec.InitContainers = []corev1.Container{{Name: "i", Resources: guaranteed}}
			return p
		}, corev1.PodQOSGuaranteed},
		{"init container without limits", func() *corev1.Pod {
			p := pod(guaranteed)
			p.Spec.InitContainers = []corev1.Container{{Name: "i"}}
			return p
		}, corev1.PodQOSBurstable},
		{"from status", func() *corev1.Pod {
			p := pod(res(nil, nil))
			p.Status.QOSClass = corev1.PodQOSGuaranteed
			return p
		}, corev1.PodQOSGuaranteed},
		{"status wins over a resize", func() *corev1.Pod {
			p := pod(res(list("cpu", "500m"), list("cpu", "1")))
			p.Status.QOSClass = corev1.PodQOSBestEffort
			return p
		}, corev1.PodQOSBestEffort},
		{"pod level guaranteed", func() *corev1.Pod {
			p := pod(res(nil, nil))
			p.Spec.Resources = &guaranteed
			return p
		}, corev1.PodQOSGuaranteed},
		{"pod level burstable over guaranteed containers", func() *corev1.Pod {
			p := pod(guaranteed)
			p.Spec.Resources = &corev1.ResourceRequirements{Requests: list("memory", "1Gi")}
			return p
		}, corev1.PodQOSBurstable},
		{"pod level limits of one resource", func() *corev1.Pod {
			p := pod(guaranteed)
			p.Spec.Resources = &corev1.ResourceRequirements{Limits: list("memory", "1Gi"), Requests: list("memory", "1Gi")}
			return p
		}, corev1.PodQOSBurstable},
		{"empty pod-level resources: the containers decide", func() *corev1.Pod {
			p := pod(guaranteed)
			p.Spec.Resources = &corev1.ResourceRequirements{}
			return p
		}, corev1.PodQOSGuaranteed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := QOSClass(tt.pod()); got != tt.want {
				t.Errorf("QOSClass = %s, want %s", got, tt.want)
			}
		})
	}
}
