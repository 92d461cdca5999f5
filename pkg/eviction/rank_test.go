package eviction

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

type rankPod struct {
	name            string
	priority        int32
	memReq, diskReq int64
	stats           *statsv1alpha1.PodStats // nil: no stats
	configure       func(*corev1.Pod)
}

func rankNames(s Signal, pods []rankPod) []string {
	var list []*corev1.Pod
	stats := map[string]*statsv1alpha1.PodStats{}
	for _, rp := range pods {
		p := newPod(rp.name, rp.priority, rp.memReq, rp.diskReq)
		if rp.configure != nil {
			rp.configure(p)
		}
		list = append(list, p)
		if rp.stats != nil {
			stats[string(p.UID)] = rp.stats
		}
	}
	var out []string
	for _, c := range rank(s, list, stats) {
		out = append(out, c.pod.Name)
	}
	return out
}

func TestRankMemory(t *testing.T) {
	tests := []struct {
		name string
		pods []rankPod
		want []string
	}{
		{name: "over requests before priority",
			pods: []rankPod{
				{name: "low-within", priority: 0, memReq: 2 * Gi, stats: podUsage(Gi, 0, 1)},
				{name: "high-over", priority: 1000, memReq: 100 * Mi, stats: podUsage(200*Mi, 0, 1)},
			},
			want: []string{"high-over", "low-within"}},
		{name: "then lower priority first",
			pods: []rankPod{
				{name: "high", priority: 1000, stats: podUsage(2*Gi, 0, 1)},
				{name: "low", priority: -5, stats: podUsage(Mi, 0, 1)},
			},
			want: []string{"low", "high"}},
		{name: "then the larger usage above requests",
			pods: []rankPod{
				{name: "small", stats: podUsage(500*Mi, 0, 1)},
				{name: "big-but-requested", memReq: 900 * Mi, stats: podUsage(Gi, 0, 1)},
				{name: "big", stats: podUsage(Gi, 0, 1)},
			},
			want: []string{"big", "small", "big-but-requested"}},
		{name: "pods without stats first",
			pods: []rankPod{
				{name: "over", stats: podUsage(Gi, 0, 1)},
				{name: "unknown", priority: 1000},
			},
			want: []string{"unknown", "over"}},
		{name: "within requests, by priority then usage below requests",
			pods: []rankPod{
				{name: "guaranteed-high", priority: 10, memReq: 4 * Gi, stats: podUsage(Gi, 0, 1)},
				{name: "guaranteed-low-near", priority: 1, memReq: 2 * Gi, stats: podUsage(2*Gi-Mi, 0, 1)},
				{name: "guaranteed-low-far", priority: 1, memReq: 4 * Gi, stats: podUsage(Gi, 0, 1)},
			},
			want: []string{"guaranteed-low-near", "guaranteed-low-far", "guaranteed-high"}},
		{name: "equal pods keep their order",
			pods: []rankPod{{name: "x", stats: podUsage(Gi, 0, 1)}, {name: "y", stats: podUsage(Gi, 0, 1)}, {name: "z", stats: podUsage(Gi, 0, 1)}},
			want: []string{"x", "y", "z"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := rankNames(SignalMemoryAvailable, tt.pods); !slices.Equal(got, tt.want) {
				t.Errorf("ranked %v, want %v", got, tt.want)
			}
		})
	}
}

func TestRankDisk(t *testing.T) {
	ephemeral := func(bytes, inodes uint64) *statsv1alpha1.PodStats {
		ps := podUsage(Mi, 0, 1)
		ps.EphemeralStorage = &statsv1alpha1.FsStats{UsedBytes: &bytes, InodesUsed: &inodes}
		return ps
	}
	withVolume := func(rootfs, volume int64) *statsv1alpha1.PodStats {
		ps := podUsage(Mi, rootfs, 1)
		ps.VolumeStats = []statsv1alpha1.VolumeStats{
			{Name: "scratch", FsStats: statsv1alpha1.FsStats{UsedBytes: ptr(uint64(volume))}},
			{Name: "data", FsStats: statsv1alpha1.FsStats{UsedBytes: ptr(uint64(100 * Gi))}}, // a PVC: not the node's
		}
		return ps
	}
	addVolumes := func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{
			{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}}},
		}
	}
	tests := []struct {
		name   string
		signal Signal
		pods   []rankPod
		want   []string
	}{
		{name: "over requests before priority", signal: SignalNodeFsAvailable,
			pods: []rankPod{
				{name: "low-within", priority: 0, diskReq: 10 * Gi, stats: ephemeral(uint64(5*Gi), 10)},
				{name: "high-over", priority: 1000, diskReq: Gi, stats: ephemeral(uint64(2*Gi), 10)},
			},
			want: []string{"high-over", "low-within"}},
		{name: "then priority, then usage above requests", signal: SignalImageFsAvailable,
			pods: []rankPod{
				{name: "high", priority: 1000, stats: ephemeral(uint64(8*Gi), 10)},
				{name: "low-small", stats: ephemeral(uint64(Gi), 10)},
				{name: "low-big", stats: ephemeral(uint64(3*Gi), 10)},
			},
			want: []string{"low-big", "low-small", "high"}},
		{name: "without ephemeral storage figures: rootfs, logs and local volumes", signal: SignalNodeFsAvailable,
			pods: []rankPod{
				{name: "rootfs", stats: podUsage(Mi, 3*Gi, 1)},
				{name: "emptydir", stats: withVolume(Gi, 4*Gi), configure: addVolumes},
				{name: "pvc-only", stats: withVolume(0, 0), configure: addVolumes},
			},
			want: []string{"emptydir", "rootfs", "pvc-only"}},
		{name: "inodes: by inodes used", signal: SignalNodeFsInodesFree,
			pods: []rankPod{
				{name: "few", stats: ephemeral(uint64(10*Gi), 10)},
				{name: "many", stats: ephemeral(uint64(Gi), 100000)},
			},
			want: []string{"many", "few"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := rankNames(tt.signal, tt.pods); !slices.Equal(got, tt.want) {
				t.Errorf("ranked %v, want %v", got, tt.want)
			}
		})
	}
}

func TestRankPID(t *testing.T) {
	tests := []struct {
		name string
		pods []rankPod
		want []string
	}{
		{name: "priority first",
			pods: []rankPod{
				{name: "high-many", priority: 1000, stats: podUsage(Mi, 0, 5000)},
				{name: "low-few", priority: 0, stats: podUsage(Mi, 0, 1)},
			},
			want: []string{"low-few", "high-many"}},
		{name: "then more processes first",
			pods: []rankPod{
				{name: "few", stats: podUsage(Mi, 0, 2)},
				{name: "many", stats: podUsage(Mi, 0, 300)},
				{name: "none"},
			},
			want: []string{"none", "many", "few"}},
		{name: "memory use does not matter",
			pods: []rankPod{
				{name: "fat", stats: podUsage(10*Gi, 0, 1)},
				{name: "forky", stats: podUsage(Mi, 0, 10)},
			},
			want: []string{"forky", "fat"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := rankNames(SignalPIDAvailable, tt.pods); !slices.Equal(got, tt.want) {
				t.Errorf("ranked %v, want %v", got, tt.want)
			}
		})
	}
}

func TestEphemeralStorageRequest(t *testing.T) {
	q := func(n int64) corev1.ResourceList {
		return corev1.ResourceList{corev1.ResourceEphemeralStorage: *resource.NewQuantity(n, resource.BinarySI)}
	}
	always := corev1.ContainerRestartPolicyAlways
	p := &corev1.Pod{Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Resources: corev1.ResourceRequirements{Requests: q(Gi)}}, {}},
		InitContainers: []corev1.Container{
			{Resources: corev1.ResourceRequirements{Requests: q(Gi)}, RestartPolicy: &always},
			{Resources: corev1.ResourceRequirements{Requests: q(3 * Gi)}},
		},
		Overhead: q(Mi),
	}}
	// containers 1Gi + sidecar 1Gi = 2Gi; the init container runs beside
	// the sidecar: 4Gi; plus the overhead.
	if got := ephemeralStorageRequest(p); got != 4*Gi+Mi {
		t.Errorf("request = %d, want 4Gi+1Mi", got)
	}
}
