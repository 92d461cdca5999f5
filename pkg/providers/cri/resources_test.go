package cri

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"
)

const gi = 1 << 30

func rl(pairs ...string) corev1.ResourceList {
	list := corev1.ResourceList{}
	for i := 0; i < len(pairs); i += 2 {
		list[corev1.ResourceName(pairs[i])] = resource.MustParse(pairs[i+1])
	}
	return list
}

func res(requests, limits corev1.ResourceList) corev1.ResourceRequirements {
	return corev1.ResourceRequirements{Requests: requests, Limits: limits}
}

func testNode() nodeSettings {
	return nodeSettings{NodeName: "node-a", MemoryCapacity: 4 * gi}.withDefaults()
}

func TestMilliCPUConversions(t *testing.T) {
	for _, tt := range []struct{ milli, shares int64 }{
		{0, 2}, {1, 2}, {100, 102}, {1000, 1024}, {300000, 262144},
	} {
		if got := milliCPUToShares(tt.milli); got != tt.shares {
			t.Errorf("milliCPUToShares(%d) = %d, want %d", tt.milli, got, tt.shares)
		}
	}
	for _, tt := range []struct{ milli, period, quota int64 }{
		{0, 100000, 0}, {1, 100000, 1000}, {250, 100000, 25000}, {2000, 100000, 200000}, {500, 50000, 25000},
	} {
		if got := milliCPUToQuota(tt.milli, tt.period); got != tt.quota {
			t.Errorf("milliCPUToQuota(%d, %d) = %d, want %d", tt.milli, tt.period, got, tt.quota)
		}
	}
}

func TestContainerResources(t *testing.T) {
	tests := []struct {
		name   string
		pod    func() *corev1.Pod
		node   func(nodeSettings) nodeSettings
		want   *runtimeapi.LinuxContainerResources
		errHas string
	}{
		{
			name: "best effort",
			pod:  func() *corev1.Pod { return podWith(corev1.Container{Name: "c"}) },
			want: &runtimeapi.LinuxContainerResources{CpuShares: 2, CpuPeriod: 100000, OomScoreAdj: 1000},
		},
		{
			name: "burstable",
			pod: func() *corev1.Pod {
				return podWith(corev1.Container{Name: "c", Resources: res(rl("cpu", "250m", "memory", "128Mi"), rl("cpu", "500m", "memory", "256Mi"))})
			},
			// 1000 - 1000*128Mi/4Gi = 1000 - 31
			want: &runtimeapi.LinuxContainerResources{CpuShares: 256, CpuPeriod: 100000, CpuQuota: 50000, MemoryLimitInBytes: 256 << 20, OomScoreAdj: 969},
		},
		{
			name: "guaranteed from limits only, as recorded in the status",
			pod: func() *corev1.Pod {
				p := podWith(corev1.Container{Name: "c", Resources: res(nil, rl("cpu", "1", "memory", "1Gi"))})
				p.Status.QOSClass = corev1.PodQOSGuaranteed
				return p
			},
			want: &runtimeapi.LinuxContainerResources{CpuShares: 1024, CpuPeriod: 100000, CpuQuota: 100000, MemoryLimitInBytes: gi, OomScoreAdj: -997},
		},
		{
			name: "pod-level limits are inherited",
			pod: func() *corev1.Pod {
				p := podWith(corev1.Container{Name: "c", Resources: res(rl("cpu", "100m"), nil)})
				p.Spec.Resources = &corev1.ResourceRequirements{Limits: rl("cpu", "2", "memory", "1Gi")}
				return p
			},
			want: &runtimeapi.LinuxContainerResources{CpuShares: 102, CpuPeriod: 100000, CpuQuota: 200000, MemoryLimitInBytes: gi, OomScoreAdj: 999},
		},
		{
			name: "quota off, group OOM kill, other period",
			pod: func() *corev1.Pod {
				return podWith(corev1.Container{Name: "c", Resources: res(rl("cpu", "1"), rl("cpu", "1"))})
			},
			node: func(n nodeSettings) nodeSettings {
				n.DisableCPUCFSQuota, n.GroupOOMKill = true, true
				return n
			},
			want: &runtimeapi.LinuxContainerResources{CpuShares: 1024, OomScoreAdj: 999, Unified: map[string]string{"memory.oom.group": "1"}},
		},
		{
			name: "huge pages",
			pod: func() *corev1.Pod {
				return podWith(corev1.Container{Name: "c", Resources: res(rl("hugepages-2Mi", "64Mi", "memory", "128Mi"), rl("hugepages-2Mi", "64Mi", "memory", "128Mi"))})
			},
			node: func(n nodeSettings) nodeSettings {
				n.HugePageSizes = []string{"2MB", "1GB"}
				return n
			},
			want: &runtimeapi.LinuxContainerResources{
				CpuShares: 2, CpuPeriod: 100000, MemoryLimitInBytes: 128 << 20, OomScoreAdj: 969,
				HugepageLimits: []*runtimeapi.HugepageLimit{{PageSize: "2MB", Limit: 64 << 20}, {PageSize: "1GB"}},
			},
		},
		{
			name: "bad huge page size",
			pod: func() *corev1.Pod {
				return podWith(corev1.Container{Name: "c", Resources: res(nil, rl("hugepages-3000", "1Mi"))})
			},
			node: func(n nodeSettings) nodeSettings {
				n.HugePageSizes = []string{"2MB"}
				return n
			},
			errHas: "hugepages-3000",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := tt.pod()
			node := testNode()
			if tt.node != nil {
				node = tt.node(node)
			}
			got, err := containerResources(pod, &pod.Spec.Containers[0], node)
			if tt.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errHas) {
					t.Fatalf("err = %v, want one containing %q", err, tt.errHas)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func podWith(containers ...corev1.Container) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid"},
		Spec:       corev1.PodSpec{Containers: containers},
	}
}

func TestOOMScoreAdj(t *testing.T) {
	always := ptr.To(corev1.ContainerRestartPolicyAlways)
	tests := []struct {
		name      string
		pod       func() *corev1.Pod
		container string
		want      int64
	}{
		{
			name: "node critical",
			pod: func() *corev1.Pod {
				p := podWith(corev1.Container{Name: "c", Resources: res(rl("memory", "1Mi"), nil)})
				p.Spec.Priority, p.Spec.PriorityClassName = ptr.To[int32](2000001000), "system-node-critical"
				return p
			},
			container: "c", want: -997,
		},
		{
			name: "critical priority of another class is burstable",
			pod: func() *corev1.Pod {
				p := podWith(corev1.Container{Name: "c", Resources: res(rl("memory", "1Gi"), nil)})
				p.Spec.Priority, p.Spec.PriorityClassName = ptr.To[int32](2000000000), "system-cluster-critical"
				return p
			},
			container: "c", want: 750,
		},
		{
			name: "request above capacity stays above guaranteed",
			pod: func() *corev1.Pod {
				return podWith(corev1.Container{Name: "c", Resources: res(rl("memory", "8Gi"), nil)})
			},
			container: "c", want: 3,
		},
		{
			name: "sidecar no higher than the smallest regular container",
			pod: func() *corev1.Pod {
				p := podWith(
					corev1.Container{Name: "a", Resources: res(rl("memory", "2Gi"), nil)},
					corev1.Container{Name: "b", Resources: res(rl("memory", "1Gi"), nil)},
				)
				p.Spec.InitContainers = []corev1.Container{{Name: "side", RestartPolicy: always, Resources: res(rl("cpu", "1"), nil)}}
				return p
			},
			container: "side", want: 750,
		},
		{
			name: "pod-level request shared among containers",
			pod: func() *corev1.Pod {
				p := podWith(
					corev1.Container{Name: "a", Resources: res(rl("memory", "1Gi"), nil)},
					corev1.Container{Name: "b"},
				)
				p.Spec.Resources = &corev1.ResourceRequirements{Requests: rl("memory", "2Gi")}
				return p
			},
			// (2Gi - 1Gi) / 2 containers = 512Mi each: 1000 - 1000*512Mi/4Gi
			container: "b", want: 875,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := tt.pod()
			var c *corev1.Container
			for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
				for i := range list {
					if list[i].Name == tt.container {
						c = &list[i]
					}
				}
			}
			if got := oomScoreAdj(pod, c, 4*gi); got != tt.want {
				t.Errorf("oomScoreAdj = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestSandboxResources(t *testing.T) {
	always := ptr.To(corev1.ContainerRestartPolicyAlways)
	pod := podWith(
		corev1.Container{Name: "a", Resources: res(rl("cpu", "200m"), rl("cpu", "1", "memory", "1Gi"))},
		corev1.Container{Name: "b", Resources: res(nil, rl("memory", "1Gi"))},
	)
	pod.Spec.InitContainers = []corev1.Container{
		{Name: "side", RestartPolicy: always, Resources: res(rl("cpu", "100m"), nil)},
		{Name: "init", Resources: res(rl("cpu", "500m"), nil)},
	}
	pod.Spec.Overhead = rl("cpu", "100m", "memory", "64Mi")
	resources, overhead := sandboxResources(pod, testNode())
	// requests: max(200m + 100m sidecar, 500m init + 100m sidecar) = 600m
	want := &runtimeapi.LinuxContainerResources{CpuShares: 614, CpuPeriod: 100000, CpuQuota: 100000, MemoryLimitInBytes: 2 * gi}
	if diff := cmp.Diff(want, resources, protocmp.Transform()); diff != "" {
		t.Errorf("resources (-want +got):\n%s", diff)
	}
	wantOverhead := &runtimeapi.LinuxContainerResources{CpuShares: 102, CpuPeriod: 100000, CpuQuota: 10000, MemoryLimitInBytes: 64 << 20}
	if diff := cmp.Diff(wantOverhead, overhead, protocmp.Transform()); diff != "" {
		t.Errorf("overhead (-want +got):\n%s", diff)
	}

	pod.Spec.Overhead = nil
	pod.Spec.Resources = &corev1.ResourceRequirements{Requests: rl("cpu", "2"), Limits: rl("memory", "3Gi")}
	resources, overhead = sandboxResources(pod, testNode())
	want = &runtimeapi.LinuxContainerResources{CpuShares: 2048, CpuPeriod: 100000, CpuQuota: 100000, MemoryLimitInBytes: 3 * gi}
	if diff := cmp.Diff(want, resources, protocmp.Transform()); diff != "" {
		t.Errorf("pod-level resources (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(&runtimeapi.LinuxContainerResources{}, overhead, protocmp.Transform()); diff != "" {
		t.Errorf("no overhead (-want +got):\n%s", diff)
	}
}

func TestHugePageSize(t *testing.T) {
	tests := []struct {
		name corev1.ResourceName
		want string
		err  bool
	}{
		{"hugepages-2Mi", "2MB", false},
		{"hugepages-1Gi", "1GB", false},
		{"hugepages-64Ki", "64KB", false},
		{"hugepages-3000", "", true},
		{"hugepages-0", "", true},
		{"hugepages-x", "", true},
	}
	for _, tt := range tests {
		got, err := hugePageSize(tt.name)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("hugePageSize(%s) = %q, %v; want %q, error %v", tt.name, got, err, tt.want, tt.err)
		}
	}
}
