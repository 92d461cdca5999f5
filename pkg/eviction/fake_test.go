package eviction

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	testingclock "k8s.io/utils/clock/testing"
)

const (
	Ki = int64(1) << 10
	Mi = int64(1) << 20
	Gi = int64(1) << 30
)

var start = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// fakeNode is the node a test manager runs on: its usage is set directly,
// and evicted pods leave the active pods at once unless keepEvicted.
type fakeNode struct {
	mu          sync.Mutex
	summary     statsv1alpha1.Summary
	pods        []*corev1.Pod
	keepEvicted bool
	evicted     []evictCall
	reclaims    []string
	// onReclaim runs at each node-level reclaim step, by name.
	onReclaim func(step string, n *fakeNode)
	changed   int
	summaries int
}

type evictCall struct {
	pod    string
	grace  int64
	status EvictionStatus
}

func newFakeNode() *fakeNode {
	return &fakeNode{summary: statsv1alpha1.Summary{Node: statsv1alpha1.NodeStats{NodeName: "n"}}}
}

func (n *fakeNode) deps(reclaim bool) Deps {
	d := Deps{
		Summary: func(context.Context) (*statsv1alpha1.Summary, error) {
			n.mu.Lock()
			defer n.mu.Unlock()
			n.summaries++
			// The setters replace the node's figures rather than change
			// them, so a shallow copy is a snapshot.
			s := n.summary
			s.Pods = slices.Clone(s.Pods)
			return &s, nil
		},
		ActivePods: func() []*corev1.Pod {
			n.mu.Lock()
			defer n.mu.Unlock()
			return slices.Clone(n.pods)
		},
		Evict: func(_ context.Context, pod *corev1.Pod, grace int64, status EvictionStatus) error {
			n.mu.Lock()
			defer n.mu.Unlock()
			n.evicted = append(n.evicted, evictCall{pod.Name, grace, status})
			if !n.keepEvicted {
				n.pods = slices.DeleteFunc(n.pods, func(p *corev1.Pod) bool { return p.UID == pod.UID })
				n.summary.Pods = slices.DeleteFunc(n.summary.Pods, func(p statsv1alpha1.PodStats) bool { return p.PodRef.UID == string(pod.UID) })
			}
			return nil
		},
		NodeConditionsChanged: func() {
			n.mu.Lock()
			defer n.mu.Unlock()
			n.changed++
		},
	}
	if reclaim {
		step := func(name string) func(context.Context) error {
			return func(context.Context) error {
				n.mu.Lock()
				defer n.mu.Unlock()
				n.reclaims = append(n.reclaims, name)
				if n.onReclaim != nil {
					n.onReclaim(name, n)
				}
				return nil
			}
		}
		d.DeleteDeadContainers, d.DeleteUnusedImages = step("containers"), step("images")
	}
	return d
}

func (n *fakeNode) evictedNames() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for _, e := range n.evicted {
		out = append(out, e.pod)
	}
	return out
}

// setMemory sets the node's available memory out of capacity.
func (n *fakeNode) setMemory(available, capacity int64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	ws := uint64(capacity - available)
	n.summary.Node.Memory = &statsv1alpha1.MemoryStats{AvailableBytes: ptr(uint64(available)), WorkingSetBytes: &ws}
}

// setNodeFs sets the node filesystem's available bytes out of capacity.
func (n *fakeNode) setNodeFs(available, capacity int64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.summary.Node.Fs = &statsv1alpha1.FsStats{AvailableBytes: ptr(uint64(available)), CapacityBytes: ptr(uint64(capacity)),
		InodesFree: ptr(uint64(1e6)), Inodes: ptr(uint64(1e6))}
}

func (n *fakeNode) setPIDs(running, maxPID int64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.summary.Node.Rlimit = &statsv1alpha1.RlimitStats{MaxPID: &maxPID, NumOfRunningProcesses: &running}
}

// addPod adds a pod and its stats (nil: none).
func (n *fakeNode) addPod(pod *corev1.Pod, ps *statsv1alpha1.PodStats) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.pods = append(n.pods, pod)
	if ps != nil {
		ps.PodRef = statsv1alpha1.PodReference{Name: pod.Name, Namespace: pod.Namespace, UID: string(pod.UID)}
		n.summary.Pods = append(n.summary.Pods, *ps)
	}
}

func ptr[T any](v T) *T { return &v }

// newPod builds a pod with one container "app" requesting memory and
// ephemeral-storage (0: none) at a priority.
func newPod(name string, priority int32, memRequest, diskRequest int64) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name), Generation: 3},
		Spec: corev1.PodSpec{
			Priority:   &priority,
			Containers: []corev1.Container{{Name: "app"}},
		},
	}
	req := corev1.ResourceList{}
	if memRequest > 0 {
		req[corev1.ResourceMemory] = *resource.NewQuantity(memRequest, resource.BinarySI)
	}
	if diskRequest > 0 {
		req[corev1.ResourceEphemeralStorage] = *resource.NewQuantity(diskRequest, resource.BinarySI)
	}
	if len(req) > 0 {
		p.Spec.Containers[0].Resources.Requests = req
	}
	return p
}

// podUsage builds pod stats: the container "app" uses memory, disk (in its
// writable layer) and runs procs processes.
func podUsage(memory, disk int64, procs uint64) *statsv1alpha1.PodStats {
	ws, used := uint64(memory), uint64(disk)
	return &statsv1alpha1.PodStats{
		Memory: &statsv1alpha1.MemoryStats{WorkingSetBytes: &ws},
		Containers: []statsv1alpha1.ContainerStats{{
			Name:   "app",
			Memory: &statsv1alpha1.MemoryStats{WorkingSetBytes: &ws},
			Rootfs: &statsv1alpha1.FsStats{UsedBytes: &used},
			Logs:   &statsv1alpha1.FsStats{UsedBytes: ptr(uint64(0))},
		}},
		ProcessStats: &statsv1alpha1.ProcessStats{ProcessCount: &procs},
	}
}

// newManager builds a manager over n with thresholds from the kubelet's
// config maps and a fake clock at start.
func newManager(t *testing.T, n *fakeNode, reclaim bool, opts Options, hard, soft, grace, minReclaim map[string]string) (*Manager, *testingclock.FakeClock) {
	t.Helper()
	ts, err := ParseThresholds(hard, soft, grace, minReclaim)
	if err != nil {
		t.Fatal(err)
	}
	clk := testingclock.NewFakeClock(start)
	opts.NodeName, opts.Thresholds, opts.Clock = "n", ts, clk
	m, err := New(n.deps(reclaim), opts)
	if err != nil {
		t.Fatal(err)
	}
	return m, clk
}

func mustSync(t *testing.T, m *Manager) *corev1.Pod {
	t.Helper()
	p, err := m.Synchronize(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return p
}
