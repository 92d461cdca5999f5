package cri

import (
	"context"
	"errors"
	"slices"
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
