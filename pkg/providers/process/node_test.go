package process

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodelet/nodelet/pkg/providers/process/sandbox"
)

func container(requests, limits corev1.ResourceList) corev1.Container {
	return corev1.Container{Name: "c", Resources: corev1.ResourceRequirements{Requests: requests, Limits: limits}}
}

func TestPodResources(t *testing.T) {
	cpuMem := func(cpu, mem string) corev1.ResourceList {
		l := corev1.ResourceList{}
		if cpu != "" {
			l[corev1.ResourceCPU] = resource.MustParse(cpu)
		}
		if mem != "" {
			l[corev1.ResourceMemory] = resource.MustParse(mem)
		}
		return l
	}
	for name, c := range map[string]struct {
		init, app []corev1.Container
		want      sandbox.Resources
	}{
		"no resources": {app: []corev1.Container{container(nil, nil)}},
		"limits on every container add up": {
			app:  []corev1.Container{container(cpuMem("100m", ""), cpuMem("200m", "64Mi")), container(cpuMem("50m", ""), cpuMem("300m", "32Mi"))},
			want: sandbox.Resources{CPURequestMillis: 150, CPULimitMillis: 500, MemoryLimitBytes: 96 << 20},
		},
		"one container without a limit lifts the pod's": {
			app:  []corev1.Container{container(cpuMem("100m", ""), cpuMem("200m", "64Mi")), container(nil, cpuMem("", "32Mi"))},
			want: sandbox.Resources{CPURequestMillis: 100, MemoryLimitBytes: 96 << 20},
		},
		"a larger init container sets the limit": {
			init: []corev1.Container{container(cpuMem("1", ""), cpuMem("1", "1Gi"))},
			app:  []corev1.Container{container(cpuMem("100m", ""), cpuMem("200m", "64Mi"))},
			want: sandbox.Resources{CPURequestMillis: 1000, CPULimitMillis: 1000, MemoryLimitBytes: 1 << 30},
		},
	} {
		pod := &corev1.Pod{Spec: corev1.PodSpec{InitContainers: c.init, Containers: c.app}}
		if got := podResources(pod); got != c.want {
			t.Errorf("%s: podResources = %+v, want %+v", name, got, c.want)
		}
	}
}
