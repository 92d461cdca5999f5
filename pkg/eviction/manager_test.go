package eviction

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodelet/nodelet/pkg/provider"
)

var memoryHard = map[string]string{"memory.available": "100Mi"}

func conditionOf(node *corev1.Node, typ corev1.NodeConditionType) corev1.NodeCondition {
	for _, c := range node.Status.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return corev1.NodeCondition{}
}

func TestNewRequiresDeps(t *testing.T) {
	n := newFakeNode()
	full := n.deps(false)
	for name, d := range map[string]Deps{
		"no Summary":    {ActivePods: full.ActivePods, Evict: full.Evict},
		"no ActivePods": {Summary: full.Summary, Evict: full.Evict},
		"no Evict":      {Summary: full.Summary, ActivePods: full.ActivePods},
	} {
		if _, err := New(d, Options{}); err == nil {
			t.Errorf("%s: New succeeded", name)
		}
	}
	if _, err := New(full, Options{Period: -time.Second}); err == nil {
		t.Error("a negative period was accepted")
	}
	m, err := New(full, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if m.opts.Period != 10*time.Second || m.opts.PressureTransitionPeriod != 5*time.Minute || m.opts.Clock == nil {
		t.Errorf("defaults: %+v", m.opts)
	}
}

func TestNodeConditionsAndTransitionPeriod(t *testing.T) {
	n := newFakeNode()
	n.setMemory(50*Mi, 8*Gi)
	n.setNodeFs(100*Gi, 100*Gi)
	n.setPIDs(100, 1000)
	m, clk := newManager(t, n, false, Options{PressureTransitionPeriod: 5 * time.Minute},
		map[string]string{"memory.available": "100Mi", "nodefs.available": "10%", "pid.available": "10%"}, nil, nil, nil)

	node := &corev1.Node{}
	m.SetNodeConditions(node)
	for _, typ := range []corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure} {
		if c := conditionOf(node, typ); c.Status != corev1.ConditionFalse {
			t.Errorf("before any synchronization %s = %+v, want False", typ, c)
		}
	}

	mustSync(t, m)
	if got := m.Conditions(); !slices.Equal(got, []corev1.NodeConditionType{corev1.NodeMemoryPressure}) || n.changed != 1 {
		t.Fatalf("conditions %v after %d change reports, want [MemoryPressure] after 1", got, n.changed)
	}
	m.SetNodeConditions(node)
	if c := conditionOf(node, corev1.NodeMemoryPressure); c.Status != corev1.ConditionTrue || c.Reason != "KubeletHasInsufficientMemory" || c.Message != "kubelet has insufficient memory available" {
		t.Errorf("MemoryPressure = %+v", c)
	}
	if c := conditionOf(node, corev1.NodeDiskPressure); c.Status != corev1.ConditionFalse || c.Reason != "KubeletHasNoDiskPressure" || c.Message != "kubelet has no disk pressure" {
		t.Errorf("DiskPressure = %+v", c)
	}
	if c := conditionOf(node, corev1.NodePIDPressure); c.Status != corev1.ConditionFalse || c.Reason != "KubeletHasSufficientPID" {
		t.Errorf("PIDPressure = %+v", c)
	}

	// Relieved, the condition stays for the transition period after the
	// threshold was last met, and nothing changes to report meanwhile.
	n.setMemory(4*Gi, 8*Gi)
	for _, after := range []time.Duration{time.Minute, 3 * time.Minute, 59 * time.Second} {
		clk.Step(after)
		mustSync(t, m)
		if got := m.Conditions(); len(got) != 1 || n.changed != 1 {
			t.Fatalf("%s after the threshold was last met: conditions %v, %d change reports", clk.Since(start), got, n.changed)
		}
	}
	clk.Step(time.Second)
	mustSync(t, m)
	if got := m.Conditions(); len(got) != 0 || n.changed != 2 {
		t.Fatalf("after the transition period: conditions %v, %d change reports; want none, 2", got, n.changed)
	}
	m.SetNodeConditions(node)
	if c := conditionOf(node, corev1.NodeMemoryPressure); c.Status != corev1.ConditionFalse || c.Reason != "KubeletHasSufficientMemory" || c.Message != "kubelet has sufficient memory available" {
		t.Errorf("MemoryPressure = %+v", c)
	}
	if len(node.Status.Conditions) != 3 {
		t.Errorf("conditions duplicated: %+v", node.Status.Conditions)
	}

	// Disk and PID pressure together, met again and again, keep going.
	n.setNodeFs(5*Gi, 100*Gi)
	n.setPIDs(950, 1000)
	mustSync(t, m)
	m.SetNodeConditions(node)
	if got := m.Conditions(); !slices.Equal(got, []corev1.NodeConditionType{corev1.NodeDiskPressure, corev1.NodePIDPressure}) {
		t.Errorf("conditions %v, want DiskPressure and PIDPressure", got)
	}
	if c := conditionOf(node, corev1.NodeDiskPressure); c.Status != corev1.ConditionTrue || c.Reason != "KubeletHasDiskPressure" || c.Message != "kubelet has disk pressure" {
		t.Errorf("DiskPressure = %+v", c)
	}
	if c := conditionOf(node, corev1.NodePIDPressure); c.Status != corev1.ConditionTrue || c.Reason != "KubeletHasInsufficientPID" || c.Message != "kubelet has insufficient PID available" {
		t.Errorf("PIDPressure = %+v", c)
	}
}

func TestSoftThresholdGracePeriod(t *testing.T) {
	n := newFakeNode()
	n.setMemory(400*Mi, 8*Gi)
	p := newPod("a", 0, 0, 0)
	p.Spec.TerminationGracePeriodSeconds = ptr(int64(60))
	n.addPod(p, podUsage(1*Gi, 0, 1))
	soft := map[string]string{"memory.available": "500Mi"}
	grace := map[string]string{"memory.available": "1m30s"}
	m, clk := newManager(t, n, false, Options{MaxPodGracePeriodSeconds: 20}, nil, soft, grace, nil)

	mustSync(t, m)
	if len(m.Conditions()) != 1 {
		t.Errorf("conditions %v: a soft threshold raises its condition before its grace period", m.Conditions())
	}
	clk.Step(time.Minute)
	if mustSync(t, m) != nil {
		t.Fatal("evicted before the grace period")
	}
	// A break restarts the grace period.
	n.setMemory(600*Mi, 8*Gi)
	clk.Step(10 * time.Second)
	mustSync(t, m)
	n.setMemory(400*Mi, 8*Gi)
	clk.Step(10 * time.Second)
	mustSync(t, m)
	clk.Step(80 * time.Second)
	if mustSync(t, m) != nil {
		t.Fatal("evicted 80s after the threshold was met again, grace period 90s")
	}
	clk.Step(10 * time.Second)
	if got := mustSync(t, m); got == nil || got.Name != "a" {
		t.Fatalf("evicted %v once the grace period passed, want a", got)
	}
	// The pod's own 60s, capped by evictionMaxPodGracePeriod.
	if n.evicted[0].grace != 20 {
		t.Errorf("grace period %d, want 20", n.evicted[0].grace)
	}
}

func TestEvictionGracePeriods(t *testing.T) {
	tests := []struct {
		name     string
		soft     bool
		max      int64
		podGrace *int64
		want     int64
	}{
		{name: "hard: at once, whatever the pod says", podGrace: ptr(int64(60)), max: 10, want: 1},
		{name: "soft: the pod's own", soft: true, podGrace: ptr(int64(60)), want: 60},
		{name: "soft: the pod's default", soft: true, want: 30},
		{name: "soft: capped", soft: true, podGrace: ptr(int64(60)), max: 10, want: 10},
		{name: "soft: under the cap", soft: true, podGrace: ptr(int64(5)), max: 10, want: 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newFakeNode()
			n.setMemory(50*Mi, 8*Gi)
			p := newPod("a", 0, 0, 0)
			p.Spec.TerminationGracePeriodSeconds = tt.podGrace
			n.addPod(p, podUsage(Gi, 0, 1))
			hard, soft, grace := memoryHard, map[string]string(nil), map[string]string(nil)
			if tt.soft {
				hard, soft, grace = nil, memoryHard, map[string]string{"memory.available": "1s"}
			}
			m, clk := newManager(t, n, false, Options{MaxPodGracePeriodSeconds: tt.max}, hard, soft, grace, nil)
			mustSync(t, m)
			clk.Step(time.Second)
			mustSync(t, m)
			if len(n.evicted) != 1 || n.evicted[0].grace != tt.want {
				t.Fatalf("evictions %+v, want one with grace period %d", n.evicted, tt.want)
			}
		})
	}
}

func TestMinimumReclaim(t *testing.T) {
	n := newFakeNode()
	for _, name := range []string{"a", "b", "c"} {
		n.addPod(newPod(name, 0, 0, 0), podUsage(Gi, 0, 1))
	}
	m, _ := newManager(t, n, false, Options{}, memoryHard, nil, nil, map[string]string{"memory.available": "200Mi"})

	// Above the threshold, below threshold + minimum reclaim, never met:
	// nothing happens.
	n.setMemory(200*Mi, 8*Gi)
	if p := mustSync(t, m); p != nil || len(m.Conditions()) != 0 {
		t.Fatalf("evicted %v with conditions %v above the threshold", p, m.Conditions())
	}
	n.setMemory(50*Mi, 8*Gi)
	if p := mustSync(t, m); p == nil {
		t.Fatal("no eviction below the threshold")
	}
	// Back above the threshold but not its minimum reclaim: still met.
	n.setMemory(250*Mi, 8*Gi)
	if p := mustSync(t, m); p == nil {
		t.Fatal("no eviction before the minimum reclaim was done")
	}
	n.setMemory(301*Mi, 8*Gi)
	if p := mustSync(t, m); p != nil {
		t.Fatalf("evicted %s once the minimum reclaim was done", p.Name)
	}
	// Resolved, the threshold is back to itself.
	n.setMemory(250*Mi, 8*Gi)
	if p := mustSync(t, m); p != nil {
		t.Fatalf("evicted %s above a resolved threshold", p.Name)
	}
	if got := n.evictedNames(); len(got) != 2 {
		t.Errorf("evicted %v, want two pods", got)
	}
}

func TestReclaimBeforeEviction(t *testing.T) {
	tests := []struct {
		name        string
		hard        map[string]string
		reclaim     bool
		freed       map[string]int64 // nodefs available after each step
		wantReclaim []string
		wantEvicted []string
	}{
		{name: "dead containers free enough", hard: map[string]string{"nodefs.available": "10%"}, reclaim: true,
			freed: map[string]int64{"containers": 20 * Gi}, wantReclaim: []string{"containers", "images"}},
		{name: "unused images free enough", hard: map[string]string{"imagefs.available": "10%"}, reclaim: true,
			freed: map[string]int64{"images": 20 * Gi}, wantReclaim: []string{"containers", "images"}},
		{name: "not enough: one pod evicted", hard: map[string]string{"nodefs.available": "10%"}, reclaim: true,
			freed: map[string]int64{"images": 6 * Gi}, wantReclaim: []string{"containers", "images"}, wantEvicted: []string{"big"}},
		{name: "freed above the threshold but not its minimum reclaim", hard: map[string]string{"nodefs.available": "10%"}, reclaim: true,
			freed: map[string]int64{"images": 11 * Gi}, wantReclaim: []string{"containers", "images"}, wantEvicted: []string{"big"}},
		{name: "nothing to reclaim", hard: map[string]string{"nodefs.available": "10%"}, wantEvicted: []string{"big"}},
		{name: "memory is never reclaimed at node level", hard: memoryHard, reclaim: true, wantEvicted: []string{"big"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newFakeNode()
			n.setMemory(50*Mi, 8*Gi)
			n.setNodeFs(5*Gi, 100*Gi)
			n.onReclaim = func(step string, n *fakeNode) {
				if avail, ok := tt.freed[step]; ok {
					n.summary.Node.Fs = &statsv1alpha1.FsStats{AvailableBytes: ptr(uint64(avail)), CapacityBytes: ptr(uint64(100 * Gi))}
				}
			}
			n.addPod(newPod("small", 0, 0, 0), podUsage(Mi, Gi, 1))
			n.addPod(newPod("big", 0, 0, 0), podUsage(Gi, 10*Gi, 1))
			m, _ := newManager(t, n, tt.reclaim, Options{}, tt.hard, nil, nil, map[string]string{"nodefs.available": "5%"})
			mustSync(t, m)
			if !slices.Equal(n.reclaims, tt.wantReclaim) {
				t.Errorf("reclaim steps %v, want %v", n.reclaims, tt.wantReclaim)
			}
			if got := n.evictedNames(); !slices.Equal(got, tt.wantEvicted) {
				t.Errorf("evicted %v, want %v", got, tt.wantEvicted)
			}
		})
	}
}

func TestOneEvictionAtATime(t *testing.T) {
	n := newFakeNode()
	n.keepEvicted = true
	n.setMemory(50*Mi, 8*Gi)
	for _, name := range []string{"a", "b", "c"} {
		n.addPod(newPod(name, 0, 0, 0), podUsage(Gi, 0, 1))
	}
	m, clk := newManager(t, n, false, Options{}, memoryHard, nil, nil, nil)
	if p := mustSync(t, m); p == nil || p.Name != "a" {
		t.Fatalf("first pass evicted %v, want a", p)
	}
	// a is still stopping: no other eviction, for up to 30s.
	clk.Step(10 * time.Second)
	if p := mustSync(t, m); p != nil {
		t.Fatalf("evicted %s while a was still active", p.Name)
	}
	clk.Step(10 * time.Second)
	n.mu.Lock()
	n.pods = n.pods[1:]
	n.mu.Unlock()
	if p := mustSync(t, m); p == nil || p.Name != "b" {
		t.Fatalf("evicted %v once a was gone, want b", p)
	}
	clk.Step(29 * time.Second)
	if p := mustSync(t, m); p != nil {
		t.Fatalf("evicted %s 29s after b, which is still active", p.Name)
	}
	clk.Step(time.Second)
	if p := mustSync(t, m); p == nil {
		t.Fatal("no eviction 30s after b, which never went")
	}
	if got := m.Evictions(); got[SignalMemoryAvailable] != 3 || len(got) != 1 {
		t.Errorf("Evictions() = %v, want 3 for memory.available", got)
	}
}

func TestStaleStatsDoNotEvictAgain(t *testing.T) {
	n := newFakeNode()
	n.setMemory(50*Mi, 8*Gi)
	n.summary.Node.Memory.Time = metav1.NewTime(start)
	n.addPod(newPod("a", 0, 0, 0), podUsage(Gi, 0, 1))
	n.addPod(newPod("b", 0, 0, 0), podUsage(Gi, 0, 1))
	m, clk := newManager(t, n, false, Options{}, memoryHard, nil, nil, nil)
	if mustSync(t, m) == nil {
		t.Fatal("no eviction")
	}
	clk.Step(10 * time.Second)
	if p := mustSync(t, m); p != nil || len(m.Conditions()) != 1 {
		t.Fatalf("evicted %v on stats taken before the last eviction (conditions %v)", p, m.Conditions())
	}
	n.summary.Node.Memory.Time = metav1.NewTime(clk.Now())
	if p := mustSync(t, m); p == nil {
		t.Fatal("no eviction on fresh stats")
	}
}

func TestCriticalPodsAreNeverEvicted(t *testing.T) {
	n := newFakeNode()
	n.setMemory(50*Mi, 8*Gi)
	static := newPod("static", 0, 0, 0)
	static.Annotations = map[string]string{"kubernetes.io/config.source": "file"}
	mirror := newPod("mirror", 0, 0, 0)
	mirror.Annotations = map[string]string{"kubernetes.io/config.mirror": "abc"}
	clusterCritical := newPod("cluster-critical", 2000000000, 0, 0)
	nodeCritical := newPod("node-critical", 2000001000, 0, 0)
	for _, p := range []*corev1.Pod{static, mirror, clusterCritical, nodeCritical} {
		n.addPod(p, podUsage(4*Gi, 0, 1))
	}
	m, _ := newManager(t, n, false, Options{}, memoryHard, nil, nil, nil)
	if p := mustSync(t, m); p != nil {
		t.Fatalf("evicted critical pod %s", p.Name)
	}
	fromAPI := newPod("api", 1000, Gi, 0)
	fromAPI.Annotations = map[string]string{"kubernetes.io/config.source": "api"}
	n.addPod(fromAPI, podUsage(Mi, 0, 1))
	if p := mustSync(t, m); p == nil || p.Name != "api" {
		t.Fatalf("evicted %v, want the one pod that is not critical", p)
	}
}

func TestEvictErrorIsReturned(t *testing.T) {
	n := newFakeNode()
	n.setMemory(50*Mi, 8*Gi)
	n.addPod(newPod("a", 0, 0, 0), podUsage(Gi, 0, 1))
	d := n.deps(false)
	boom := errors.New("boom")
	d.Evict = func(context.Context, *corev1.Pod, int64, EvictionStatus) error { return boom }
	ts, _ := ParseThresholds(memoryHard, nil, nil, nil)
	m, err := New(d, Options{Thresholds: ts})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Synchronize(context.Background()); !errors.Is(err, boom) || !strings.Contains(err.Error(), "ns/a") {
		t.Errorf("Synchronize = %v, want the eviction error naming the pod", err)
	}
	if len(m.Evictions()) != 0 {
		t.Errorf("a failed eviction was counted: %v", m.Evictions())
	}
}

func TestNoThresholdsNoWork(t *testing.T) {
	n := newFakeNode()
	m, _ := newManager(t, n, false, Options{}, nil, nil, nil, nil)
	mustSync(t, m)
	if n.summaries != 0 {
		t.Errorf("took %d summaries without thresholds", n.summaries)
	}
	if err := m.Admit(newPod("a", 0, 0, 0)); err != nil {
		t.Errorf("Admit = %v", err)
	}
}

func TestAdmit(t *testing.T) {
	bestEffort := newPod("be", 0, 0, 0)
	burstable := newPod("burstable", 0, Mi, 0)
	tolerates := func(key string, op corev1.TolerationOperator, effect corev1.TaintEffect) *corev1.Pod {
		p := newPod("tolerant", 0, 0, 0)
		p.Spec.Tolerations = []corev1.Toleration{{Key: key, Operator: op, Effect: effect}}
		return p
	}
	critical := newPod("critical", 2000001000, 0, 0)
	const memMsg = "The node had condition: [MemoryPressure]. "
	tests := []struct {
		name          string
		memory, disk  bool
		pid           bool
		pod           *corev1.Pod
		wantRejectMsg string // "" to admit
	}{
		{name: "no pressure", pod: bestEffort},
		{name: "memory: BestEffort refused", memory: true, pod: bestEffort, wantRejectMsg: memMsg},
		{name: "memory: Burstable admitted", memory: true, pod: burstable},
		{name: "memory: BestEffort tolerating the taint", memory: true, pod: tolerates("node.kubernetes.io/memory-pressure", corev1.TolerationOpExists, corev1.TaintEffectNoSchedule)},
		{name: "memory: BestEffort tolerating every taint", memory: true, pod: tolerates("", corev1.TolerationOpExists, "")},
		{name: "memory: BestEffort tolerating another effect", memory: true, pod: tolerates("node.kubernetes.io/memory-pressure", corev1.TolerationOpExists, corev1.TaintEffectNoExecute), wantRejectMsg: memMsg},
		{name: "memory: BestEffort tolerating disk pressure", memory: true, pod: tolerates("node.kubernetes.io/disk-pressure", corev1.TolerationOpExists, corev1.TaintEffectNoSchedule), wantRejectMsg: memMsg},
		{name: "memory: critical admitted", memory: true, pod: critical},
		{name: "disk: Burstable refused", disk: true, pod: burstable, wantRejectMsg: "The node had condition: [DiskPressure]. "},
		{name: "disk: even tolerating it, as the kubelet", disk: true, pod: tolerates("node.kubernetes.io/disk-pressure", corev1.TolerationOpExists, corev1.TaintEffectNoSchedule), wantRejectMsg: "The node had condition: [DiskPressure]. "},
		{name: "disk: critical admitted", disk: true, pod: critical},
		{name: "pid: refused", pid: true, pod: burstable, wantRejectMsg: "The node had condition: [PIDPressure]. "},
		{name: "memory and disk: tolerating memory pressure is not enough", memory: true, disk: true,
			pod: tolerates("node.kubernetes.io/memory-pressure", corev1.TolerationOpExists, corev1.TaintEffectNoSchedule), wantRejectMsg: "The node had condition: [MemoryPressure DiskPressure]. "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newFakeNode()
			n.setMemory(4*Gi, 8*Gi)
			n.setNodeFs(50*Gi, 100*Gi)
			n.setPIDs(10, 1000)
			if tt.memory {
				n.setMemory(50*Mi, 8*Gi)
			}
			if tt.disk {
				n.setNodeFs(5*Gi, 100*Gi)
			}
			if tt.pid {
				n.setPIDs(999, 1000)
			}
			m, _ := newManager(t, n, false, Options{}, map[string]string{"memory.available": "100Mi", "nodefs.available": "10%", "pid.available": "10"}, nil, nil, nil)
			mustSync(t, m)
			err := m.Admit(tt.pod)
			if tt.wantRejectMsg == "" {
				if err != nil {
					t.Errorf("Admit = %v, want admitted", err)
				}
				return
			}
			var r *provider.Rejection
			if !errors.As(err, &r) || r.Reason != "Evicted" || r.Message != tt.wantRejectMsg {
				t.Errorf("Admit = %#v, want a Rejection Evicted %q", err, tt.wantRejectMsg)
			}
		})
	}
}

func TestRunSynchronizesEveryPeriod(t *testing.T) {
	n := newFakeNode()
	n.setMemory(4*Gi, 8*Gi)
	m, clk := newManager(t, n, false, Options{Period: 10 * time.Second}, memoryHard, nil, nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- m.Run(ctx) }()
	summaries := func() int {
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.summaries
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitFor("the first pass", func() bool { return summaries() == 1 && clk.HasWaiters() })
	clk.Step(9 * time.Second)
	clk.Step(time.Second)
	waitFor("the second pass", func() bool { return summaries() == 2 })
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
}

func TestEvents(t *testing.T) {
	n := newFakeNode()
	n.setMemory(5432*Ki, 8*Gi)
	n.addPod(newPod("a", 0, 0, 0), podUsage(123*Mi, 0, 1))
	rec := record.NewFakeRecorder(10)
	d := n.deps(false)
	d.Recorder = rec
	ts, _ := ParseThresholds(memoryHard, nil, nil, nil)
	m, err := New(d, Options{NodeName: "n", Thresholds: ts})
	if err != nil {
		t.Fatal(err)
	}
	mustSync(t, m)
	close(rec.Events)
	var got []string
	for e := range rec.Events {
		got = append(got, e)
	}
	want := []string{
		"Warning EvictionThresholdMet Attempting to reclaim memory",
		"Warning Evicted The node was low on resource: memory. Threshold quantity: 100Mi, available: 5432Ki (signal memory.available). Container app was using 123Mi, request is 0, has larger consumption of memory. ",
	}
	if len(got) != len(want) {
		t.Fatalf("events %q, want %q", got, want)
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("event %d = %q, want %q", i, got[i], want[i])
		}
	}
}
