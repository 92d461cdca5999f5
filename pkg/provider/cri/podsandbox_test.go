package cri

import (
	"context"
	"slices"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	criapitesting "k8s.io/cri-api/pkg/apis/testing"

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
