package sim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/pkg/podrules"
	"github.com/nodelet/nodelet/pkg/provider"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// recorder collects notified pods.
type recorder struct {
	mu   sync.Mutex
	pods []*corev1.Pod
}

func (r *recorder) notify(pod *corev1.Pod) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pods = append(r.pods, pod)
}

func (r *recorder) phases() []corev1.PodPhase {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []corev1.PodPhase
	for _, p := range r.pods {
		out = append(out, p.Status.Phase)
	}
	return out
}

func (r *recorder) last() *corev1.Pod {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.pods) == 0 {
		return nil
	}
	return r.pods[len(r.pods)-1]
}

func newTest(t testing.TB, mutate func(*Options)) (*Provider, *clocktesting.FakeClock, *recorder) {
	t.Helper()
	clk := clocktesting.NewFakeClock(t0)
	opts := Options{
		NodeName: "sim-0",
		PodCIDR:  "10.0.0.0/24",
		Address:  "192.168.0.10",
		Port:     10250,
		Capacity: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("4"),
			corev1.ResourceMemory: resource.MustParse("8Gi"),
			corev1.ResourcePods:   resource.MustParse("10"),
		},
		Clock: clk,
	}
	if mutate != nil {
		mutate(&opts)
	}
	p, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	rec := &recorder{}
	p.NotifyPods(context.Background(), rec.notify)
	return p, clk, rec
}

func testPod(name, cpu, memory string) *corev1.Pod {
	c := corev1.Container{Name: "app", Image: "nginx:1.27"}
	if cpu != "" || memory != "" {
		c.Resources.Requests = corev1.ResourceList{}
	}
	if cpu != "" {
		c.Resources.Requests[corev1.ResourceCPU] = resource.MustParse(cpu)
	}
	if memory != "" {
		c.Resources.Requests[corev1.ResourceMemory] = resource.MustParse(memory)
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{
			NodeName:       "sim-0",
			InitContainers: []corev1.Container{{Name: "init", Image: "busybox"}},
			Containers:     []corev1.Container{c, {Name: "side", Image: "envoy"}},
		},
	}
}

func mustGet(t *testing.T, p *Provider, name string) *corev1.Pod {
	t.Helper()
	pod, err := p.GetPod(context.Background(), "ns", name)
	if err != nil {
		t.Fatalf("GetPod %s: %v", name, err)
	}
	return pod
}

func condition(pod *corev1.Pod, typ corev1.PodConditionType) corev1.ConditionStatus {
	for _, c := range pod.Status.Conditions {
		if c.Type == typ {
			return c.Status
		}
	}
	return ""
}

func checkRunning(t *testing.T, pod *corev1.Pod, at time.Time) {
	t.Helper()
	if pod.Status.Phase != corev1.PodRunning {
		t.Fatalf("phase = %s, want Running", pod.Status.Phase)
	}
	for _, typ := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		if got := condition(pod, typ); got != corev1.ConditionTrue {
			t.Errorf("condition %s = %q, want True", typ, got)
		}
	}
	if len(pod.Status.ContainerStatuses) != len(pod.Spec.Containers) {
		t.Fatalf("got %d container statuses, want %d", len(pod.Status.ContainerStatuses), len(pod.Spec.Containers))
	}
	for i, cs := range pod.Status.ContainerStatuses {
		c := pod.Spec.Containers[i]
		if cs.Name != c.Name || cs.State.Running == nil || !cs.State.Running.StartedAt.Time.Equal(at) || !cs.Ready || cs.Started == nil || !*cs.Started {
			t.Errorf("container %s: status %+v, want running since %v and ready", c.Name, cs, at)
		}
		if want := "sim://" + string(pod.UID) + "/" + c.Name; cs.ContainerID != want {
			t.Errorf("container %s: containerID %q, want %q", c.Name, cs.ContainerID, want)
		}
		if cs.Image != c.Image || cs.ImageID != "sim://"+c.Image {
			t.Errorf("container %s: image %q imageID %q", c.Name, cs.Image, cs.ImageID)
		}
	}
	for _, cs := range pod.Status.InitContainerStatuses {
		if cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 0 || cs.State.Terminated.Reason != "Completed" {
			t.Errorf("init container %s: state %+v, want terminated Completed", cs.Name, cs.State)
		}
	}
}

func TestCreatePod(t *testing.T) {
	tests := []struct {
		name        string
		startDelay  time.Duration
		wantPending bool
	}{
		{name: "no delay runs at once"},
		{name: "start delay stays pending", startDelay: 10 * time.Second, wantPending: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			p, clk, rec := newTest(t, func(o *Options) { o.StartDelay = tt.startDelay })
			if err := p.CreatePod(ctx, testPod("web", "100m", "64Mi")); err != nil {
				t.Fatalf("CreatePod: %v", err)
			}
			pod := mustGet(t, p, "web")
			if pod.Status.PodIP != "10.0.0.1" || len(pod.Status.PodIPs) != 1 || pod.Status.PodIPs[0].IP != "10.0.0.1" {
				t.Errorf("podIP %q podIPs %v, want 10.0.0.1", pod.Status.PodIP, pod.Status.PodIPs)
			}
			if pod.Status.HostIP != "192.168.0.10" {
				t.Errorf("hostIP = %q", pod.Status.HostIP)
			}
			if pod.Status.StartTime == nil || !pod.Status.StartTime.Time.Equal(t0) {
				t.Errorf("startTime = %v, want %v", pod.Status.StartTime, t0)
			}
			if !tt.wantPending {
				checkRunning(t, pod, t0)
				if got := rec.phases(); len(got) != 1 || got[0] != corev1.PodRunning {
					t.Errorf("notified phases %v, want [Running]", got)
				}
				return
			}

			if pod.Status.Phase != corev1.PodPending {
				t.Fatalf("phase = %s, want Pending", pod.Status.Phase)
			}
			for _, cs := range pod.Status.ContainerStatuses {
				if cs.State.Waiting == nil || cs.State.Waiting.Reason != "PodInitializing" {
					t.Errorf("container %s: state %+v, want waiting", cs.Name, cs.State)
				}
			}
			for typ, want := range map[corev1.PodConditionType]corev1.ConditionStatus{
				corev1.PodScheduled: corev1.ConditionTrue, corev1.PodInitialized: corev1.ConditionFalse,
				corev1.ContainersReady: corev1.ConditionFalse, corev1.PodReady: corev1.ConditionFalse,
			} {
				if got := condition(pod, typ); got != want {
					t.Errorf("pending condition %s = %q, want %q", typ, got, want)
				}
			}
			clk.Step(tt.startDelay - time.Second)
			if got := mustGet(t, p, "web").Status.Phase; got != corev1.PodPending {
				t.Fatalf("phase before the delay = %s, want Pending", got)
			}
			clk.Step(time.Second)
			checkRunning(t, mustGet(t, p, "web"), t0.Add(tt.startDelay))
			got := rec.phases()
			if want := []corev1.PodPhase{corev1.PodPending, corev1.PodRunning}; fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("notified phases %v, want %v", got, want)
			}
			checkRunning(t, rec.last(), t0.Add(tt.startDelay))
		})
	}
}

func TestCreatePodIsIdempotent(t *testing.T) {
	ctx := context.Background()
	p, _, rec := newTest(t, nil)
	pod := testPod("web", "1", "")
	for range 2 {
		if err := p.CreatePod(ctx, pod); err != nil {
			t.Fatalf("CreatePod: %v", err)
		}
	}
	if pods, _ := p.GetPods(ctx); len(pods) != 1 {
		t.Errorf("GetPods returned %d pods, want 1", len(pods))
	}
	if len(rec.phases()) != 1 {
		t.Errorf("notified %d times, want 1", len(rec.phases()))
	}
	if p.used.MilliCPU != 1000 {
		t.Errorf("used cpu %d, want 1000", p.used.MilliCPU)
	}
	other := testPod("web", "1", "")
	other.UID = "another"
	if err := p.CreatePod(ctx, other); err == nil {
		t.Error("CreatePod of a different pod with the same name succeeded")
	}
	// The status is the provider's own: changing the caller's or a
	// returned one changes nothing stored.
	pod.Status.Phase = corev1.PodFailed
	got := mustGet(t, p, "web")
	got.Status.Conditions[0].Status = "changed"
	got.Status.Phase = corev1.PodUnknown
	if again := mustGet(t, p, "web"); again.Status.Phase != corev1.PodRunning || again.Status.Conditions[0].Status != corev1.ConditionTrue {
		t.Errorf("stored status changed with the caller's or a returned pod: %+v", again.Status)
	}
}

func TestDeletePod(t *testing.T) {
	tests := []struct {
		name        string
		deleteDelay time.Duration
		grace       *int64
		wantAfter   time.Duration // when it is gone
	}{
		{name: "no delay", wantAfter: 0},
		{name: "delete delay", deleteDelay: 5 * time.Second, wantAfter: 5 * time.Second},
		{name: "grace period shorter than delay", deleteDelay: 5 * time.Second, grace: ptr(int64(2)), wantAfter: 2 * time.Second},
		{name: "grace period zero", deleteDelay: 5 * time.Second, grace: ptr(int64(0)), wantAfter: 0},
		{name: "grace period longer than delay", deleteDelay: 5 * time.Second, grace: ptr(int64(30)), wantAfter: 5 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			p, clk, rec := newTest(t, func(o *Options) { o.DeleteDelay = tt.deleteDelay })
			if err := p.CreatePod(ctx, testPod("web", "1", "1Gi")); err != nil {
				t.Fatal(err)
			}
			clk.Step(time.Minute)
			del := testPod("web", "1", "1Gi")
			del.DeletionTimestamp = ptr(metav1.NewTime(clk.Now()))
			del.DeletionGracePeriodSeconds = tt.grace
			if err := p.DeletePod(ctx, del); err != nil {
				t.Fatalf("DeletePod: %v", err)
			}
			if err := p.DeletePod(ctx, del); err != nil {
				t.Fatalf("second DeletePod: %v", err)
			}
			if tt.wantAfter > 0 {
				clk.Step(tt.wantAfter - time.Millisecond)
				pods, _ := p.GetPods(ctx)
				if len(pods) != 1 || pods[0].DeletionTimestamp == nil {
					t.Fatalf("before the delay: GetPods = %d pods, want the terminating pod", len(pods))
				}
				clk.Step(time.Millisecond)
			}
			if _, err := p.GetPod(ctx, "ns", "web"); !errors.Is(err, provider.ErrNotFound) {
				t.Fatalf("GetPod after termination: err = %v, want ErrNotFound", err)
			}
			if pods, _ := p.GetPods(ctx); len(pods) != 0 {
				t.Fatalf("GetPods after termination lists %d pods", len(pods))
			}

			if got, want := fmt.Sprint(rec.phases()), fmt.Sprint([]corev1.PodPhase{corev1.PodRunning, corev1.PodSucceeded}); got != want {
				t.Errorf("notified phases %s, want %s", got, want)
			}
			final := rec.last()
			finished := t0.Add(time.Minute + tt.wantAfter)
			for _, cs := range final.Status.ContainerStatuses {
				term := cs.State.Terminated
				if term == nil || term.ExitCode != 0 || term.Reason != "Completed" || !term.StartedAt.Time.Equal(t0) || !term.FinishedAt.Time.Equal(finished) || cs.Ready {
					t.Errorf("container %s: final status %+v, want terminated Completed from %v to %v", cs.Name, cs, t0, finished)
				}
			}
			for _, typ := range []corev1.PodConditionType{corev1.PodReady, corev1.ContainersReady} {
				if got := condition(final, typ); got != corev1.ConditionFalse {
					t.Errorf("final condition %s = %q, want False", typ, got)
				}
			}

			// The IP and the resources are free again.
			if p.used != (podrules.Requests{}) {
				t.Errorf("used = %+v after termination, want zero", p.used)
			}
			if err := p.CreatePod(ctx, testPod("next", "1", "")); err != nil {
				t.Fatal(err)
			}
			if ip := mustGet(t, p, "next").Status.PodIP; ip != "10.0.0.1" {
				t.Errorf("next pod got %s, want the freed 10.0.0.1", ip)
			}
		})
	}
}

// TestDeletePendingPod checks the final status of a pod deleted before its
// init container ran: the init container never ran, so it stays waiting
// and the pod was never initialized; the completed init container of a
// pod deleted after it started stays ready, as the kubelet reports it.
func TestDeletePendingPod(t *testing.T) {
	ctx := context.Background()
	p, clk, rec := newTest(t, func(o *Options) { o.StartDelay = time.Minute })
	if err := p.CreatePod(ctx, testPod("web", "", "")); err != nil {
		t.Fatal(err)
	}
	del := testPod("web", "", "")
	del.DeletionTimestamp = ptr(metav1.NewTime(clk.Now()))
	del.DeletionGracePeriodSeconds = ptr(int64(0))
	if err := p.DeletePod(ctx, del); err != nil {
		t.Fatalf("DeletePod: %v", err)
	}
	final := rec.last()
	if got := condition(final, corev1.PodInitialized); got != corev1.ConditionFalse {
		t.Errorf("final Initialized = %q, want False: the init container never ran", got)
	}
	if cs := final.Status.InitContainerStatuses; len(cs) != 1 || cs[0].State.Waiting == nil || cs[0].Ready {
		t.Errorf("final init container status %+v, want waiting and not ready", cs)
	}

	if err := p.CreatePod(ctx, testPod("started", "", "")); err != nil {
		t.Fatal(err)
	}
	clk.Step(time.Minute)
	del = testPod("started", "", "")
	del.DeletionTimestamp = ptr(metav1.NewTime(clk.Now()))
	del.DeletionGracePeriodSeconds = ptr(int64(0))
	if err := p.DeletePod(ctx, del); err != nil {
		t.Fatalf("DeletePod: %v", err)
	}
	final = rec.last()
	if got := condition(final, corev1.PodInitialized); got != corev1.ConditionTrue {
		t.Errorf("final Initialized = %q, want True", got)
	}
	if cs := final.Status.InitContainerStatuses; len(cs) != 1 || cs[0].State.Terminated == nil || !cs[0].Ready {
		t.Errorf("final init container status %+v, want completed and ready", cs)
	}
}

func TestDeletePodEdgeCases(t *testing.T) {
	ctx := context.Background()
	t.Run("unknown pod", func(t *testing.T) {
		p, _, _ := newTest(t, nil)
		if err := p.DeletePod(ctx, testPod("nope", "", "")); err != nil {
			t.Errorf("DeletePod of an unknown pod: %v", err)
		}
	})
	t.Run("pending pod never runs", func(t *testing.T) {
		p, clk, rec := newTest(t, func(o *Options) { o.StartDelay, o.DeleteDelay = 10*time.Second, 20*time.Second })
		if err := p.CreatePod(ctx, testPod("web", "", "")); err != nil {
			t.Fatal(err)
		}
		if err := p.DeletePod(ctx, testPod("web", "", "")); err != nil {
			t.Fatal(err)
		}
		clk.Step(10 * time.Second)
		if got := mustGet(t, p, "web").Status.Phase; got != corev1.PodPending {
			t.Errorf("deleted pending pod went %s", got)
		}
		clk.Step(10 * time.Second)
		if got, want := fmt.Sprint(rec.phases()), fmt.Sprint([]corev1.PodPhase{corev1.PodPending, corev1.PodSucceeded}); got != want {
			t.Errorf("notified phases %s, want %s", got, want)
		}
	})
	t.Run("second delete shortens the grace period", func(t *testing.T) {
		p, clk, rec := newTest(t, func(o *Options) { o.DeleteDelay = time.Minute })
		if err := p.CreatePod(ctx, testPod("web", "", "")); err != nil {
			t.Fatal(err)
		}
		if err := p.DeletePod(ctx, testPod("web", "", "")); err != nil {
			t.Fatal(err)
		}
		clk.Step(time.Second)
		short := testPod("web", "", "")
		short.DeletionGracePeriodSeconds = ptr(int64(3))
		if err := p.DeletePod(ctx, short); err != nil {
			t.Fatal(err)
		}
		clk.Step(3 * time.Second)
		if _, err := p.GetPod(ctx, "ns", "web"); !errors.Is(err, provider.ErrNotFound) {
			t.Fatalf("pod still there after the shorter grace period: %v", err)
		}
		clk.Step(time.Minute) // the first timer fires and does nothing
		if got := len(rec.phases()); got != 2 {
			t.Errorf("notified %d times, want 2", got)
		}
	})
	t.Run("name reused by a new pod", func(t *testing.T) {
		p, clk, _ := newTest(t, func(o *Options) { o.DeleteDelay = 5 * time.Second })
		if err := p.CreatePod(ctx, testPod("web", "", "")); err != nil {
			t.Fatal(err)
		}
		newer := testPod("web", "", "")
		newer.UID = "newer"
		if err := p.DeletePod(ctx, newer); err != nil {
			t.Fatal(err)
		}
		clk.Step(time.Minute)
		if got := mustGet(t, p, "web"); got.DeletionTimestamp != nil || got.Status.Phase != corev1.PodRunning {
			t.Errorf("deleting another pod of the same name touched the running one")
		}
	})
}

func TestUpdatePod(t *testing.T) {
	ctx := context.Background()
	p, _, _ := newTest(t, nil)
	if err := p.UpdatePod(ctx, testPod("web", "", "")); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("UpdatePod of an unknown pod: err = %v, want ErrNotFound", err)
	}
	if err := p.CreatePod(ctx, testPod("web", "", "")); err != nil {
		t.Fatal(err)
	}
	upd := testPod("web", "", "")
	upd.Labels = map[string]string{"a": "b"}
	upd.Spec.ActiveDeadlineSeconds = ptr(int64(60))
	if err := p.UpdatePod(ctx, upd); err != nil {
		t.Fatalf("UpdatePod: %v", err)
	}
	got := mustGet(t, p, "web")
	if got.Labels["a"] != "b" || got.Spec.ActiveDeadlineSeconds == nil {
		t.Errorf("update not applied: %+v", got.ObjectMeta)
	}
	checkRunning(t, got, t0)
}

func TestAdmission(t *testing.T) {
	tests := []struct {
		name        string
		existing    []*corev1.Pod
		pod         *corev1.Pod
		wantReason  string
		wantMessage string
	}{
		{
			name:        "cpu",
			existing:    []*corev1.Pod{testPod("a", "3", "")},
			pod:         testPod("b", "1500m", ""),
			wantReason:  "OutOfcpu",
			wantMessage: "Node didn't have enough resource: cpu, requested: 1500, used: 3000, capacity: 4000",
		},
		{
			name:        "memory",
			existing:    []*corev1.Pod{testPod("a", "", "6Gi")},
			pod:         testPod("b", "", "4Gi"),
			wantReason:  "OutOfmemory",
			wantMessage: "Node didn't have enough resource: memory, requested: 4294967296, used: 6442450944, capacity: 8589934592",
		},
		{
			name:        "pods",
			existing:    []*corev1.Pod{testPod("a", "", ""), testPod("b", "", ""), testPod("c", "", "")},
			pod:         testPod("d", "", ""),
			wantReason:  "OutOfpods",
			wantMessage: "Node didn't have enough resource: pods, requested: 1, used: 3, capacity: 3",
		},
		{
			name:     "fits exactly",
			existing: []*corev1.Pod{testPod("a", "3", "4Gi")},
			pod:      testPod("b", "1", "4Gi"),
		},
		{
			name:     "no requests always fit",
			existing: []*corev1.Pod{testPod("a", "4", "8Gi")},
			pod:      testPod("b", "", ""),
		},
		{
			name:        "init container counts when larger",
			existing:    []*corev1.Pod{testPod("a", "2", "")},
			pod:         withInit(testPod("b", "1", ""), "3"),
			wantReason:  "OutOfcpu",
			wantMessage: "Node didn't have enough resource: cpu, requested: 3000, used: 2000, capacity: 4000",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			p, _, _ := newTest(t, func(o *Options) { o.Capacity[corev1.ResourcePods] = resource.MustParse("3") })
			for _, pod := range tt.existing {
				if err := p.CreatePod(ctx, pod); err != nil {
					t.Fatalf("CreatePod %s: %v", pod.Name, err)
				}
			}
			err := p.CreatePod(ctx, tt.pod)
			if tt.wantReason == "" {
				if err != nil {
					t.Fatalf("CreatePod: %v", err)
				}
				return
			}
			var rej *provider.Rejection
			if !errors.As(err, &rej) {
				t.Fatalf("CreatePod: err = %v, want a Rejection", err)
			}
			if rej.Reason != tt.wantReason || rej.Message != tt.wantMessage {
				t.Errorf("rejected with %q %q, want %q %q", rej.Reason, rej.Message, tt.wantReason, tt.wantMessage)
			}
			if _, err := p.GetPod(ctx, tt.pod.Namespace, tt.pod.Name); !errors.Is(err, provider.ErrNotFound) {
				t.Errorf("rejected pod is stored: %v", err)
			}
		})
	}
}

func withInit(pod *corev1.Pod, cpu string) *corev1.Pod {
	pod.Spec.InitContainers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}
	return pod
}

func TestRestorePod(t *testing.T) {
	ctx := context.Background()
	started := metav1.NewTime(t0.Add(-time.Hour))
	running := testPod("web", "1", "")
	running.Status = corev1.PodStatus{
		Phase:     corev1.PodRunning,
		HostIP:    "192.168.0.10",
		PodIP:     "10.0.0.1",
		PodIPs:    []corev1.PodIP{{IP: "10.0.0.1"}},
		StartTime: &started,
		ContainerStatuses: []corev1.ContainerStatus{
			{Name: "app", Ready: true, RestartCount: 3, ContainerID: "sim://uid-web/app", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(t0.Add(-time.Minute))}}},
			{Name: "side", Ready: true, ContainerID: "sim://uid-web/side", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}},
		},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
	}

	t.Run("running", func(t *testing.T) {
		p, clk, rec := newTest(t, func(o *Options) { o.StartDelay = 10 * time.Second })
		if err := p.RestorePod(ctx, running); err != nil {
			t.Fatalf("RestorePod: %v", err)
		}
		if err := p.RestorePod(ctx, running); err != nil {
			t.Fatalf("second RestorePod: %v", err)
		}
		clk.Step(time.Hour)
		got := mustGet(t, p, "web")
		if fmt.Sprint(got.Status) != fmt.Sprint(running.Status) {
			t.Errorf("restored status changed:\n got %+v\nwant %+v", got.Status, running.Status)
		}
		if len(rec.phases()) != 0 {
			t.Errorf("restoring a running pod notified %v", rec.phases())
		}
		// Its IP is reserved and its requests count.
		if err := p.CreatePod(ctx, testPod("other", "", "")); err != nil {
			t.Fatal(err)
		}
		if ip := mustGet(t, p, "other").Status.PodIP; ip != "10.0.0.2" {
			t.Errorf("next pod got %s, want 10.0.0.2 (10.0.0.1 is restored)", ip)
		}
		if p.used.MilliCPU != 1000 {
			t.Errorf("used cpu = %d, want 1000", p.used.MilliCPU)
		}
	})

	t.Run("pending continues", func(t *testing.T) {
		p, clk, rec := newTest(t, func(o *Options) { o.StartDelay = 10 * time.Second })
		pending := testPod("web", "", "")
		since := metav1.NewTime(t0.Add(-4 * time.Second))
		pending.Status = corev1.PodStatus{Phase: corev1.PodPending, PodIP: "10.0.0.9", StartTime: &since}
		if err := p.RestorePod(ctx, pending); err != nil {
			t.Fatalf("RestorePod: %v", err)
		}
		clk.Step(5 * time.Second)
		if got := mustGet(t, p, "web").Status.Phase; got != corev1.PodPending {
			t.Fatalf("phase = %s before the remaining delay, want Pending", got)
		}
		clk.Step(time.Second)
		got := mustGet(t, p, "web")
		checkRunning(t, got, t0.Add(6*time.Second))
		if got.Status.PodIP != "10.0.0.9" || !got.Status.StartTime.Equal(&since) {
			t.Errorf("podIP %s startTime %v, want 10.0.0.9 and %v", got.Status.PodIP, got.Status.StartTime, since)
		}
		if len(rec.phases()) != 1 {
			t.Errorf("notified %v, want [Running]", rec.phases())
		}
	})

	t.Run("never started is created", func(t *testing.T) {
		p, _, _ := newTest(t, nil)
		if err := p.RestorePod(ctx, testPod("web", "", "")); err != nil {
			t.Fatalf("RestorePod: %v", err)
		}
		checkRunning(t, mustGet(t, p, "web"), t0)
	})

	t.Run("finished is ignored", func(t *testing.T) {
		p, _, _ := newTest(t, nil)
		done := testPod("web", "", "")
		done.Status.Phase = corev1.PodSucceeded
		if err := p.RestorePod(ctx, done); err != nil {
			t.Fatalf("RestorePod: %v", err)
		}
		if _, err := p.GetPod(ctx, "ns", "web"); !errors.Is(err, provider.ErrNotFound) {
			t.Errorf("finished pod restored: %v", err)
		}
	})
}

func TestConfigureNode(t *testing.T) {
	p, _, _ := newTest(t, nil)
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "sim-0", Labels: map[string]string{"type": "mine"}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: "ConfigOK", Status: corev1.ConditionTrue},
			{Type: corev1.NodeReady, Status: corev1.ConditionFalse, LastHeartbeatTime: metav1.NewTime(t0)},
		}},
	}
	p.ConfigureNode(context.Background(), node)
	s := node.Status

	for _, l := range []corev1.ResourceList{s.Capacity, s.Allocatable} {
		if cpu := l[corev1.ResourceCPU]; cpu.String() != "4" {
			t.Errorf("cpu = %s, want 4", cpu.String())
		}
		if pods := l[corev1.ResourcePods]; pods.String() != "10" {
			t.Errorf("pods = %s, want 10", pods.String())
		}
	}
	conds := map[corev1.NodeConditionType]corev1.NodeCondition{}
	for _, c := range s.Conditions {
		conds[c.Type] = c
	}
	for typ, want := range map[corev1.NodeConditionType][2]string{
		corev1.NodeReady:          {"True", "KubeletReady"},
		corev1.NodeMemoryPressure: {"False", "KubeletHasSufficientMemory"},
		corev1.NodeDiskPressure:   {"False", "KubeletHasNoDiskPressure"},
		corev1.NodePIDPressure:    {"False", "KubeletHasSufficientPID"},
		"ConfigOK":                {"True", ""},
	} {
		if c := conds[typ]; string(c.Status) != want[0] || c.Reason != want[1] {
			t.Errorf("condition %s = %s/%s, want %s/%s", typ, c.Status, c.Reason, want[0], want[1])
		}
	}
	if msg := conds[corev1.NodeReady].Message; msg != "nodelet is posting ready status" {
		t.Errorf("Ready message %q", msg)
	}
	if !conds[corev1.NodeReady].LastHeartbeatTime.Time.Equal(t0) || !conds[corev1.NodeDiskPressure].LastHeartbeatTime.Time.IsZero() {
		t.Error("ConfigureNode changed heartbeat times")
	}
	want := []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.168.0.10"}, {Type: corev1.NodeHostName, Address: "sim-0"}}
	if fmt.Sprint(s.Addresses) != fmt.Sprint(want) {
		t.Errorf("addresses %v, want %v", s.Addresses, want)
	}
	if s.NodeInfo.KubeletVersion != DefaultVersion || s.NodeInfo.OperatingSystem != "linux" || s.NodeInfo.Architecture == "" ||
		s.NodeInfo.ContainerRuntimeVersion != "sim://1" || s.NodeInfo.KernelVersion != "nodelet sim" || s.NodeInfo.OSImage != "nodelet sim" {
		t.Errorf("nodeInfo %+v", s.NodeInfo)
	}
	if s.DaemonEndpoints.KubeletEndpoint.Port != 10250 {
		t.Errorf("kubelet port %d", s.DaemonEndpoints.KubeletEndpoint.Port)
	}
	if node.Labels["type"] != "mine" || node.Labels[corev1.LabelHostname] != "sim-0" || node.Labels[corev1.LabelOSStable] != "linux" || node.Labels[corev1.LabelArchStable] == "" {
		t.Errorf("labels %v", node.Labels)
	}
	if err := p.Ping(context.Background()); err != nil {
		t.Errorf("Ping: %v", err)
	}
}

func TestNew(t *testing.T) {
	tests := []struct {
		name    string
		opts    Options
		wantErr bool
	}{
		{"valid", Options{NodeName: "n", PodCIDR: "10.244.0.0/24"}, false},
		{"valid IPv6", Options{NodeName: "n", PodCIDR: "fd00::/64"}, false},
		{"bad CIDR", Options{NodeName: "n", PodCIDR: "10.244.0.0/33"}, true},
		{"not a CIDR", Options{NodeName: "n", PodCIDR: "banana"}, true},
		{"no CIDR", Options{NodeName: "n"}, true},
		{"no usable address", Options{NodeName: "n", PodCIDR: "10.0.0.0/31"}, true},
		{"no name", Options{PodCIDR: "10.244.0.0/24"}, true},
		{"bad address", Options{NodeName: "n", PodCIDR: "10.244.0.0/24", Address: "x"}, true},
		{"negative delay", Options{NodeName: "n", PodCIDR: "10.244.0.0/24", StartDelay: -time.Second}, true},
		{"negative jitter", Options{NodeName: "n", PodCIDR: "10.244.0.0/24", RunJitter: -time.Second}, true},
		{"ratios", Options{NodeName: "n", PodCIDR: "10.244.0.0/24", CompleteRatio: 0.7, FailRatio: 0.3}, false},
		{"ratio above 1", Options{NodeName: "n", PodCIDR: "10.244.0.0/24", FailRatio: 1.5}, true},
		{"ratio NaN", Options{NodeName: "n", PodCIDR: "10.244.0.0/24", CompleteRatio: math.NaN()}, true},
		{"ratios add up above 1", Options{NodeName: "n", PodCIDR: "10.244.0.0/24", CompleteRatio: 0.6, FailRatio: 0.5}, true},
		{"node condition", Options{NodeName: "n", PodCIDR: "10.244.0.0/24", NodeConditions: []NodeCondition{
			{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Every: time.Minute, For: time.Minute, NodeRatio: 0.5}}}, false},
		{"node condition for above every", Options{NodeName: "n", PodCIDR: "10.244.0.0/24", NodeConditions: []NodeCondition{
			{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Every: time.Minute, For: time.Hour, NodeRatio: 1}}}, true},
		{"node condition without status", Options{NodeName: "n", PodCIDR: "10.244.0.0/24", NodeConditions: []NodeCondition{
			{Type: corev1.NodeReady, Every: time.Minute, For: time.Second, NodeRatio: 1}}}, true},
		{"node condition without period", Options{NodeName: "n", PodCIDR: "10.244.0.0/24", NodeConditions: []NodeCondition{
			{Type: corev1.NodeReady, Status: corev1.ConditionFalse, NodeRatio: 1}}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.opts)
			if (err != nil) != tt.wantErr {
				t.Errorf("New: err = %v, wantErr %v", err, tt.wantErr)
			}
		})
	}
}

// TestConcurrent is for the race detector: pods of one node created, read
// and deleted from many goroutines while timers fire.
func TestConcurrent(t *testing.T) {
	ctx := context.Background()
	p, clk, rec := newTest(t, func(o *Options) {
		o.StartDelay, o.DeleteDelay = time.Second, time.Second
		o.PodCIDR = "10.0.0.0/16"
		o.Capacity = nil
	})
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			pod := testPod(fmt.Sprintf("p%d", i), "", "")
			if err := p.CreatePod(ctx, pod); err != nil {
				t.Error(err)
			}
			if _, err := p.GetPods(ctx); err != nil {
				t.Error(err)
			}
			if i%2 == 0 {
				if err := p.DeletePod(ctx, pod); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Go(func() {
		for range 5 {
			clk.Step(time.Second)
		}
	})
	wg.Wait()
	clk.Step(2 * time.Second)
	pods, _ := p.GetPods(ctx)
	if len(pods) != 100 {
		t.Errorf("%d pods left, want 100", len(pods))
	}
	for _, pod := range pods {
		if pod.Status.Phase != corev1.PodRunning {
			t.Errorf("pod %s is %s", pod.Name, pod.Status.Phase)
		}
	}
	if p.ips.inUse != 100 {
		t.Errorf("%d IPs in use, want 100", p.ips.inUse)
	}
	if last := rec.last(); last == nil {
		t.Error("no notifications")
	}
}

// What others wrote in the pod's status before the provider got it (a
// readiness gate's condition, the QoS class) stays in the status it
// reports: its own fields are set over it, not over an empty status.
func TestCreatedPodKeepsWhatOthersWrote(t *testing.T) {
	p, _, _ := newTest(t, nil)
	pod := testPod("web", "100m", "")
	pod.Status.QOSClass = corev1.PodQOSBurstable
	pod.Status.Conditions = []corev1.PodCondition{{Type: "example.com/gate", Status: corev1.ConditionTrue}}
	if err := p.CreatePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	got := mustGet(t, p, "web")
	if got.Status.QOSClass != corev1.PodQOSBurstable || condition(got, "example.com/gate") != corev1.ConditionTrue {
		t.Errorf("QoS class %q, gate %q; want what the API had kept: Burstable, True", got.Status.QOSClass, condition(got, "example.com/gate"))
	}
	if got.Status.Phase != corev1.PodRunning {
		t.Errorf("phase %s, want Running", got.Status.Phase)
	}
}
