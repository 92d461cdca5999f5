package cri

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	criapitesting "k8s.io/cri-api/pkg/apis/testing"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/pkg/lifecycle"
)

// A container stopped through the sandbox (a failed liveness probe, a
// resize) is told to the lifecycle as exited: the relist that follows
// sees nothing new, so without it the container was never restarted.
func TestStoppedContainerIsToldAsExited(t *testing.T) {
	ctx := context.Background()
	rs := criapitesting.NewFakeRuntimeService()
	rs.SetFakeContainers([]*criapitesting.FakeContainer{{
		SandboxID: "sb1",
		ContainerStatus: runtimeapi.ContainerStatus{
			Id: "c1", Metadata: &runtimeapi.ContainerMetadata{Name: "app"},
			State: runtimeapi.ContainerState_CONTAINER_RUNNING, StartedAt: 1,
		},
	}})
	rt := &criRuntime{conn: &connection{runtime: rs}, sandboxes: map[types.UID]*criSandbox{}, relistNow: make(chan struct{}, 1)}
	var mu sync.Mutex
	var exits []string
	rt.OnExit(func(uid types.UID, name string) {
		mu.Lock()
		exits = append(exits, string(uid)+"/"+name)
		mu.Unlock()
	})
	sb := &criSandbox{rt: rt, uid: "u1", id: "sb1", containers: map[string][]*criContainer{}}
	sb.refresh(ctx, rs)
	if st, ok := sb.Container("app"); !ok || st.State != lifecycle.StateRunning {
		t.Fatalf("app: %+v %v, want running", st, ok)
	}
	if err := sb.StopContainer(ctx, "app", 0); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(exits, []string{"u1/app"}) {
		t.Errorf("exits told: %v, want u1/app", exits)
	}
}

func fakeContainer(state runtimeapi.ContainerState) []*criapitesting.FakeContainer {
	return []*criapitesting.FakeContainer{{
		SandboxID: "sb1",
		ContainerStatus: runtimeapi.ContainerStatus{
			Id: "c1", Metadata: &runtimeapi.ContainerMetadata{Name: "app"},
			State: state, StartedAt: 1, FinishedAt: 2,
		},
	}}
}

// A relist that listed the containers before a container was started must
// not drop it from the snapshot the start's own refresh filled in; and an
// exit is told also when no list saw the container running (it exited at
// once). Before both, a container that exited at once was never restarted
// or reported: its pod stayed Running.
func TestStaleListAndQuickExit(t *testing.T) {
	ctx := context.Background()
	rs := criapitesting.NewFakeRuntimeService()
	rt := &criRuntime{conn: &connection{runtime: rs}, sandboxes: map[types.UID]*criSandbox{}, relistNow: make(chan struct{}, 1)}
	var mu sync.Mutex
	var exits []string
	rt.OnExit(func(uid types.UID, name string) {
		mu.Lock()
		exits = append(exits, name)
		mu.Unlock()
	})
	told := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(exits)
	}
	sb := &criSandbox{rt: rt, uid: "u1", id: "sb1", containers: map[string][]*criContainer{}}

	staleSeq := rt.listSeq.Add(1)
	stale, err := rs.ListContainers(ctx, &runtimeapi.ContainerFilter{PodSandboxId: "sb1"})
	if err != nil {
		t.Fatal(err)
	}
	rs.SetFakeContainers(fakeContainer(runtimeapi.ContainerState_CONTAINER_RUNNING))
	sb.refresh(ctx, rs)
	sb.update(ctx, rs, staleSeq, stale)
	if st, ok := sb.Container("app"); !ok || st.State != lifecycle.StateRunning {
		t.Fatalf("after a stale list, app: %+v %v, want running", st, ok)
	}

	quick := &criSandbox{rt: rt, uid: "u2", id: "sb1", containers: map[string][]*criContainer{}}
	rs.SetFakeContainers(fakeContainer(runtimeapi.ContainerState_CONTAINER_EXITED))
	quick.refresh(ctx, rs)
	if st, ok := quick.Container("app"); !ok || st.State != lifecycle.StateExited {
		t.Fatalf("app: %+v %v, want exited", st, ok)
	}
	if got := told(); !slices.Equal(got, []string{"app"}) {
		t.Errorf("exits told: %v, want app once", got)
	}
	quick.refresh(ctx, rs)
	if got := told(); !slices.Equal(got, []string{"app"}) {
		t.Errorf("exits told after a second refresh: %v, want app once", got)
	}
}

// eventsOnce is a runtime whose container event stream breaks at once the
// first time and stays open afterwards; it counts the streams followed.
type eventsOnce struct {
	*criapitesting.FakeRuntimeService
	mu      sync.Mutex
	streams int
}

func (r *eventsOnce) GetContainerEvents(ctx context.Context, _ chan *runtimeapi.ContainerEventResponse, _ func(runtimeapi.RuntimeService_GetContainerEventsClient)) error {
	r.mu.Lock()
	r.streams++
	n := r.streams
	r.mu.Unlock()
	if n == 1 {
		return errors.New("rpc error: code = Unavailable desc = error reading from server: EOF")
	}
	<-ctx.Done()
	return ctx.Err()
}

func (r *eventsOnce) followed() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.streams
}

// A broken event stream (the runtime restarted) is followed again: the
// watcher once stayed stuck on the closed stream, kicking relists in a
// tight loop and never seeing another event.
func TestContainerEventsFollowedAgainAfterABreak(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rs := &eventsOnce{FakeRuntimeService: criapitesting.NewFakeRuntimeService()}
	clk := testingclock.NewFakeClock(time.Now())
	rt := &criRuntime{conn: &connection{runtime: rs}, clock: clk, sandboxes: map[types.UID]*criSandbox{}, relistNow: make(chan struct{}, 1)}
	done := make(chan struct{})
	go func() { rt.watchEvents(ctx); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for rs.followed() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the event stream was followed %d times, want it followed again after it broke", rs.followed())
		}
		if clk.HasWaiters() {
			clk.Step(5 * time.Second)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
}

// A container the runtime lost track of (CONTAINER_UNKNOWN, as containerd
// reports a container whose start a restart of it cut short) is told to
// the lifecycle, marked Unknown, so that it is stopped and started again:
// before, it was reported as an exit (code 255) of a container that never
// ran, and a pod that does not restart failed with it.
func TestLostContainerIsTold(t *testing.T) {
	ctx := context.Background()
	rs := criapitesting.NewFakeRuntimeService()
	rs.SetFakeContainers(fakeContainer(runtimeapi.ContainerState_CONTAINER_RUNNING))
	rt := &criRuntime{conn: &connection{runtime: rs}, sandboxes: map[types.UID]*criSandbox{}, relistNow: make(chan struct{}, 1)}
	sb := &criSandbox{rt: rt, uid: "u1", id: "sb1", containers: map[string][]*criContainer{}}
	list := func() []*runtimeapi.Container {
		cs, err := rs.ListContainers(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	if told := sb.update(ctx, rs, 1, list()); len(told) != 0 {
		t.Fatalf("told %v of a running container", told)
	}
	lost := fakeContainer(runtimeapi.ContainerState_CONTAINER_UNKNOWN)
	lost[0].ExitCode, lost[0].Reason = 255, "Unknown"
	rs.SetFakeContainers(lost)
	if told := sb.update(ctx, rs, 2, list()); !slices.Equal(told, []string{"app"}) {
		t.Errorf("told %v, want app", told)
	}
	if st, ok := sb.Container("app"); !ok || !st.Unknown || st.State != lifecycle.StateExited {
		t.Errorf("app: %+v %v, want an exited attempt marked Unknown", st, ok)
	}
	// Stopped, it is exited: told once more, no longer Unknown.
	stopped := fakeContainer(runtimeapi.ContainerState_CONTAINER_EXITED)
	stopped[0].ExitCode = 255
	rs.SetFakeContainers(stopped)
	if told := sb.update(ctx, rs, 3, list()); !slices.Equal(told, []string{"app"}) {
		t.Errorf("told %v after the stop, want app", told)
	}
	if st, _ := sb.Container("app"); st.Unknown {
		t.Errorf("app still Unknown once exited: %+v", st)
	}
}

// A relist whose list of sandboxes was taken before a pod's sandbox was
// set up must leave that sandbox alone: it dropped it, the next relist
// made an object of its own for it, and the pod's worker, which holds the
// one EnsureSandbox returned, never saw its containers' exits again.
func TestRelistKeepsASandboxSetUpAfterItsList(t *testing.T) {
	ctx := context.Background()
	rs := criapitesting.NewFakeRuntimeService()
	rt := &criRuntime{conn: &connection{runtime: rs}, sandboxes: map[types.UID]*criSandbox{}, relistNow: make(chan struct{}, 1)}
	labels := map[string]string{labelPodUID: "u1", labelPodName: "p", labelPodNamespace: "ns"}

	listed := rt.listSeq.Add(1) // the relist lists: nothing yet
	// The sandbox is set up meanwhile (what EnsureSandbox does).
	set := &criSandbox{rt: rt, uid: "u1", id: "sb1", since: rt.listSeq.Add(1), ready: true, containers: map[string][]*criContainer{}}
	rt.sandboxes["u1"] = set
	rt.apply(ctx, rs, listed, nil, rt.listSeq.Add(1), nil)
	if rt.sandboxes["u1"] != set {
		t.Fatalf("a list taken before the sandbox was set up dropped it: %v", rt.sandboxes["u1"])
	}
	// Nor does a list that shows the pod's sandbox before it replace it.
	old := &runtimeapi.PodSandbox{Id: "sb0", Labels: labels, State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY}
	rt.apply(ctx, rs, listed, []*runtimeapi.PodSandbox{old}, rt.listSeq.Add(1), nil)
	if rt.sandboxes["u1"] != set {
		t.Fatalf("a list taken before the sandbox was set up replaced it with %s", rt.sandboxes["u1"].id)
	}
	// A list begun after it judges it: gone from the runtime, it goes.
	rt.apply(ctx, rs, rt.listSeq.Add(1), nil, rt.listSeq.Add(1), nil)
	if sb := rt.sandboxes["u1"]; sb != nil {
		t.Errorf("a sandbox no list shows any more is kept: %s", sb.id)
	}
}

// The runtime's handlers and features are the node's status.runtimeHandlers,
// the default handler first, as the kubelet lists them: the node e2e
// suite's recursive read-only mount specs read them to know what the
// runtime supports.
func TestRuntimeHandlers(t *testing.T) {
	got := runtimeHandlers([]*runtimeapi.RuntimeHandler{
		{Name: "test-handler", Features: &runtimeapi.RuntimeHandlerFeatures{RecursiveReadOnlyMounts: true}},
		{Name: "", Features: &runtimeapi.RuntimeHandlerFeatures{RecursiveReadOnlyMounts: true, UserNamespaces: true}},
		{Name: "runc"},
	})
	var names []string
	for _, h := range got {
		names = append(names, h.Name)
	}
	if strings.Join(names, ",") != ",runc,test-handler" {
		t.Errorf("handlers %q, want the default first, then by name", names)
	}
	if f := got[0].Features; !*f.RecursiveReadOnlyMounts || !*f.UserNamespaces {
		t.Errorf("default handler's features %+v", f)
	}
	if f := got[1].Features; *f.RecursiveReadOnlyMounts {
		t.Errorf("runc's features %+v, want none", f)
	}
}
