package stats

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// testSummary is a summary of one node with one pod of two containers; the
// first container has no known start time.
func testSummary() *statsv1alpha1.Summary {
	at := metav1.NewTime(time.Unix(1700000100, 500_000_000))
	started := metav1.NewTime(time.Unix(1700000000, 250_000_000))
	fs := &statsv1alpha1.FsStats{Time: at, CapacityBytes: p(100), UsedBytes: p(10)}
	node := statsv1alpha1.NodeStats{
		NodeName:  "node-a",
		StartTime: metav1.NewTime(time.Unix(1600000000, 0)),
		CPU:       &statsv1alpha1.CPUStats{Time: at, UsageCoreNanoSeconds: p(12_500_000_000), UsageNanoCores: p(250_000_000)},
		Memory:    &statsv1alpha1.MemoryStats{Time: at, WorkingSetBytes: p(4096), UsageBytes: p(8192)},
		Swap:      &statsv1alpha1.SwapStats{Time: at, SwapUsageBytes: p(512)},
		Fs:        fs,
		Runtime:   &statsv1alpha1.RuntimeStats{ImageFs: fs},
		Rlimit:    &statsv1alpha1.RlimitStats{Time: at},
		Network:   &statsv1alpha1.NetworkStats{Time: at, InterfaceStats: statsv1alpha1.InterfaceStats{Name: "eth0"}},
		SystemContainers: []statsv1alpha1.ContainerStats{{
			Name: "runtime", StartTime: started, Memory: &statsv1alpha1.MemoryStats{Time: at, WorkingSetBytes: p(1)}, Rootfs: fs,
		}},
	}
	pod := statsv1alpha1.PodStats{
		PodRef:           statsv1alpha1.PodReference{Name: "web", Namespace: "shop", UID: "uid-1"},
		StartTime:        started,
		CPU:              &statsv1alpha1.CPUStats{Time: at, UsageCoreNanoSeconds: p(3_000_000_000)},
		Memory:           &statsv1alpha1.MemoryStats{Time: at, WorkingSetBytes: p(2048)},
		Swap:             &statsv1alpha1.SwapStats{Time: at, SwapUsageBytes: p(0)},
		Network:          &statsv1alpha1.NetworkStats{Time: at},
		VolumeStats:      []statsv1alpha1.VolumeStats{{Name: "data", FsStats: *fs}},
		EphemeralStorage: fs,
		Containers: []statsv1alpha1.ContainerStats{{
			Name:   "init-less",
			CPU:    &statsv1alpha1.CPUStats{Time: at, UsageCoreNanoSeconds: p(1_000_000_000)},
			Memory: &statsv1alpha1.MemoryStats{Time: at, WorkingSetBytes: p(1024)},
			Rootfs: fs, Logs: fs,
		}, {
			Name:      "app",
			StartTime: started,
			CPU:       &statsv1alpha1.CPUStats{Time: at, UsageCoreNanoSeconds: p(2_000_000_000)},
			Memory:    &statsv1alpha1.MemoryStats{Time: at, WorkingSetBytes: p(1024)},
			Swap:      &statsv1alpha1.SwapStats{Time: at, SwapUsageBytes: p(100), SwapAvailableBytes: p(900)},
		}},
	}
	return Summary(node, []statsv1alpha1.PodStats{pod})
}

func TestSummaryWithoutPods(t *testing.T) {
	data, err := json.Marshal(Summary(statsv1alpha1.NodeStats{NodeName: "n"}, nil))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"pods":[]`) {
		t.Errorf("summary %s, want an empty pod list", data)
	}
}

func TestCPUAndMemory(t *testing.T) {
	full := testSummary()
	before, _ := json.Marshal(full)
	got := CPUAndMemory(full)
	after, _ := json.Marshal(full)
	if string(before) != string(after) {
		t.Error("CPUAndMemory changed its argument")
	}

	n := got.Node
	if n.NodeName != "node-a" || !n.StartTime.Equal(&full.Node.StartTime) || n.CPU != full.Node.CPU || n.Memory != full.Node.Memory || n.Swap != full.Node.Swap {
		t.Errorf("node %+v: want its name, start time, cpu, memory and swap", n)
	}
	if n.Fs != nil || n.Runtime != nil || n.Rlimit != nil || n.Network != nil {
		t.Errorf("node %+v: want no filesystems, rlimit or network", n)
	}
	if len(n.SystemContainers) != 1 || n.SystemContainers[0].Rootfs != nil || n.SystemContainers[0].Memory == nil {
		t.Errorf("system containers %+v: want the runtime's memory without its filesystem", n.SystemContainers)
	}

	if len(got.Pods) != 1 {
		t.Fatalf("pods %+v, want one", got.Pods)
	}
	pod := got.Pods[0]
	if pod.PodRef != full.Pods[0].PodRef || pod.CPU == nil || pod.Memory == nil || pod.Swap == nil || pod.StartTime.IsZero() {
		t.Errorf("pod %+v: want its reference, start time, cpu, memory and swap", pod)
	}
	if pod.Network != nil || pod.VolumeStats != nil || pod.EphemeralStorage != nil {
		t.Errorf("pod %+v: want no network, volumes or ephemeral storage", pod)
	}
	if len(pod.Containers) != 2 || pod.Containers[0].Rootfs != nil || pod.Containers[0].Logs != nil ||
		pod.Containers[1].Swap == nil || pod.Containers[1].Name != "app" || pod.Containers[1].StartTime.IsZero() {
		t.Errorf("containers %+v: want both with cpu, memory and swap only", pod.Containers)
	}
}
