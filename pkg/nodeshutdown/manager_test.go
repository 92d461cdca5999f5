package nodeshutdown

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/provider"
)

func TestGroups(t *testing.T) {
	tests := []struct {
		name            string
		grace, critical time.Duration
		byPriority      []Group
		want            []Group
	}{
		{name: "disabled"},
		{name: "ordinary and critical", grace: 30 * time.Second, critical: 10 * time.Second,
			want: []Group{{0, 20 * time.Second}, {SystemCriticalPriority, 10 * time.Second}}},
		{name: "by priority, sorted", grace: 30 * time.Second,
			byPriority: []Group{{100000, 5 * time.Second}, {0, 10 * time.Second}},
			want:       []Group{{0, 10 * time.Second}, {100000, 5 * time.Second}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Groups(tt.grace, tt.critical, tt.byPriority); !slices.Equal(got, tt.want) {
				t.Errorf("Groups = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestGroupOf(t *testing.T) {
	groups := []Group{{0, time.Second}, {1000, time.Second}, {SystemCriticalPriority, time.Second}}
	for p, want := range map[int32]int{-5: 0, 0: 0, 999: 0, 1000: 1, 5000: 1, SystemCriticalPriority: 2, SystemCriticalPriority + 1: 2} {
		if got := groupOf(groups, p); got != want {
			t.Errorf("groupOf(%d) = %d, want %d", p, got, want)
		}
	}
}

// fakeNode is a node whose pods finish once stopped and the clock has
// moved on by their stop time.
type fakeNode struct {
	mu      sync.Mutex
	clock   *testingclock.FakeClock
	pods    []*corev1.Pod
	takes   map[string]time.Duration // how long each pod takes to stop
	stopped map[string]time.Time     // when Stop was called
	order   []string
	graces  map[string]time.Duration
	status  map[string]corev1.PodStatus
}

func (n *fakeNode) active() []*corev1.Pod {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []*corev1.Pod
	for _, p := range n.pods {
		at, ok := n.stopped[p.Name]
		if !ok || n.clock.Now().Before(at.Add(min(n.takes[p.Name], n.graces[p.Name]))) {
			out = append(out, p)
		}
	}
	return out
}

func (n *fakeNode) stop(pod *corev1.Pod, grace time.Duration, status corev1.PodStatus) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.stopped[pod.Name] = n.clock.Now()
	n.order = append(n.order, pod.Name)
	n.graces[pod.Name] = grace
	n.status[pod.Name] = status
	return nil
}

func pod(name string, prio int32, grace int64) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID(name)},
		Spec:       corev1.PodSpec{Priority: ptr.To(prio), TerminationGracePeriodSeconds: ptr.To(grace)},
	}
}

func TestShutdown(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	clk := testingclock.NewFakeClock(time.Now())
	n := &fakeNode{clock: clk, stopped: map[string]time.Time{}, graces: map[string]time.Duration{},
		status: map[string]corev1.PodStatus{},
		pods:   []*corev1.Pod{pod("critical", SystemCriticalPriority, 30), pod("web", 0, 30), pod("batch", -10, 2), pod("db", 1000, 60)},
		takes:  map[string]time.Duration{"critical": time.Second, "web": 5 * time.Second, "batch": time.Second, "db": time.Hour},
	}
	changed := 0
	m := New(Deps{ActivePods: n.active, Stop: n.stop, NodeConditionsChanged: func() { changed++ }}, Options{
		NodeName: "node-a",
		Groups:   []Group{{0, 20 * time.Second}, {1000, 10 * time.Second}, {SystemCriticalPriority, 10 * time.Second}},
		Clock:    clk,
	})
	if err := m.Admit(pod("new", 0, 30)); err != nil {
		t.Fatalf("Admit before the shutdown: %v", err)
	}
	done := make(chan error, 1)
	var steps []string
	go func() { done <- m.Shutdown(ctx, func(s string) { steps = append(steps, s) }) }()

	// Step the clock a second each time the manager waits, until the
	// shutdown is done; each group waits for its pods, the db pod never
	// stops by itself.
	deadline := time.Now().Add(10 * time.Second)
	for finished := false; !finished; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Shutdown: %v", err)
			}
			finished = true
		case <-time.After(time.Millisecond):
			if time.Now().After(deadline) {
				t.Fatal("the shutdown is not done after 10s")
			}
			if clk.HasWaiters() {
				clk.Step(time.Second)
			}
		}
	}
	if want := []string{"web", "batch", "db", "critical"}; !slices.Equal(n.order, want) {
		t.Errorf("stopped in order %v, want %v (lowest priority first)", n.order, want)
	}
	for name, want := range map[string]time.Duration{"web": 20 * time.Second, "batch": 2 * time.Second, "db": 10 * time.Second, "critical": 10 * time.Second} {
		if n.graces[name] != want {
			t.Errorf("pod %s stopped within %s, want %s (the lesser of its grace and its group's)", name, n.graces[name], want)
		}
	}
	// db's group gave up after its 10s: critical was stopped then.
	if gap := n.stopped["critical"].Sub(n.stopped["db"]); gap < 10*time.Second {
		t.Errorf("critical pods stopped %s after the db group began, want its 10s", gap)
	}
	if gap := n.stopped["db"].Sub(n.stopped["web"]); gap < 5*time.Second || gap >= 20*time.Second {
		t.Errorf("the db group began %s after the first, want once web stopped (5s), before the group's 20s", gap)
	}
	st := n.status["web"]
	if st.Phase != corev1.PodFailed || st.Reason != TerminatedReason || st.Message != TerminatedMessage ||
		len(st.Conditions) != 1 || st.Conditions[0].Type != corev1.DisruptionTarget || st.Conditions[0].Reason != "TerminationByKubelet" {
		t.Errorf("stopped pod's status %+v, want Failed %s with a DisruptionTarget", st, TerminatedReason)
	}

	var rej *provider.Rejection
	if err := m.Admit(pod("late", 0, 30)); !errors.As(err, &rej) || rej.Reason != RejectedReason {
		t.Errorf("Admit during the shutdown = %v, want a %s rejection", err, RejectedReason)
	}
	if why := m.NotReady(); why != NotReadyMessage {
		t.Errorf("not ready during the shutdown for %q, want %q", why, NotReadyMessage)
	}
	if changed != 1 {
		t.Errorf("node status asked for %d times, want once at the start", changed)
	}
	if len(steps) == 0 || steps[len(steps)-1] != "Node shutdown done" {
		t.Errorf("progress %q, want it to end with the shutdown done", steps)
	}
}

func TestShutdownDisabled(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	m := New(Deps{}, Options{})
	if err := m.Shutdown(ctx, nil); !errors.Is(err, ErrDisabled) {
		t.Errorf("Shutdown without a grace period = %v, want ErrDisabled", err)
	}
	if m.ShuttingDown() {
		t.Error("a refused shutdown left the node shutting down")
	}
}

func TestSocket(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	path := filepath.Join(t.TempDir(), SocketName)
	n := &fakeNode{clock: testingclock.NewFakeClock(time.Now()), stopped: map[string]time.Time{}, graces: map[string]time.Duration{},
		status: map[string]corev1.PodStatus{}, pods: []*corev1.Pod{pod("web", 0, 0)}, takes: map[string]time.Duration{"web": 0}}
	m := New(Deps{ActivePods: n.active, Stop: n.stop}, Options{NodeName: "node-a", Groups: []Group{{0, time.Minute}}, Clock: n.clock})
	s := &Socket{Path: path, Manager: m}
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("socket left behind: %v", err)
		}
	})
	var out strings.Builder
	deadline := time.Now().Add(10 * time.Second)
	for {
		out.Reset()
		err := Request(ctx, path, &out)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Request: %v", err)
		}
		time.Sleep(10 * time.Millisecond) // the socket is not listening yet
	}
	if !strings.Contains(out.String(), "Stopping 1 pods") || !strings.HasSuffix(out.String(), "done\n") {
		t.Errorf("progress %q, want the steps and done", out.String())
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket %v %v, want mode 0600", fi, err)
	}

	disabled := &Socket{Path: filepath.Join(t.TempDir(), SocketName), Manager: New(Deps{}, Options{})}
	ctx2, cancel2 := context.WithCancel(ctx)
	done2 := make(chan error, 1)
	go func() { done2 <- disabled.Run(ctx2) }()
	defer func() { cancel2(); <-done2 }()
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if err = Request(ctx, disabled.Path, io.Discard); err == nil || strings.Contains(err.Error(), "not configured") {
			break
		}
	}
	if err == nil || !strings.Contains(err.Error(), "shutdownGracePeriod is 0") {
		t.Errorf("Request to an agent without a grace period = %v, want it to say so", err)
	}
}
