package cri

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	criapitesting "k8s.io/cri-api/pkg/apis/testing"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestImageGC(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC))
	is := criapitesting.NewFakeImageService()
	is.SetFakeImageSize(100)
	is.SetFakeImages([]string{"old", "newer", "used", "pinned", "young"})
	is.SetFakeImagePinned("pinned", true)
	is.SetFakeFilesystemUsage([]*runtimeapi.FilesystemUsage{{FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: "/images"}}})
	rs := criapitesting.NewFakeRuntimeService()
	rs.SetFakeContainers([]*criapitesting.FakeContainer{{ContainerStatus: runtimeapi.ContainerStatus{
		Id: "c1", ImageRef: "used", Image: &runtimeapi.ImageSpec{Image: "used"}, State: runtimeapi.ContainerState_CONTAINER_RUNNING}}})

	gc := newImageGC(clk, 85, 80, 2*time.Minute)
	free := uint64(50)
	gc.capacity = func(string) (uint64, uint64, error) { return 1000, free, nil }
	remaining := func() []string {
		var ids []string
		list, _ := is.ListImages(ctx, nil)
		for _, img := range list {
			ids = append(ids, img.Id)
		}
		slices.Sort(ids)
		return ids
	}

	// Seen for the first time: too young to go, even at 95%.
	if _, err := gc.collect(ctx, rs, is); err == nil {
		t.Error("nothing could be freed, but no error")
	}
	if got := remaining(); len(got) != 5 {
		t.Fatalf("images removed before their minimum age: %v left", got)
	}
	// "old" was last used longer ago than "newer".
	rs.SetFakeContainers([]*criapitesting.FakeContainer{{ContainerStatus: runtimeapi.ContainerStatus{
		Id: "c2", ImageRef: "newer", Image: &runtimeapi.ImageSpec{Image: "newer"}, State: runtimeapi.ContainerState_CONTAINER_EXITED}},
		{ContainerStatus: runtimeapi.ContainerStatus{Id: "c1", ImageRef: "used", Image: &runtimeapi.ImageSpec{Image: "used"}, State: runtimeapi.ContainerState_CONTAINER_RUNNING}}})
	clk.Step(time.Minute)
	is.SetFakeImages(nil)
	is.SetFakeImages([]string{"old", "newer", "used", "pinned", "young"})
	free = 900 // 10%: below the high threshold, nothing happens
	if freed, err := gc.collect(ctx, rs, is); err != nil || freed != 0 {
		t.Fatalf("below the high threshold: freed %d, %v", freed, err)
	}
	rs.SetFakeContainers([]*criapitesting.FakeContainer{{ContainerStatus: runtimeapi.ContainerStatus{
		Id: "c1", ImageRef: "used", Image: &runtimeapi.ImageSpec{Image: "used"}, State: runtimeapi.ContainerState_CONTAINER_RUNNING}}})
	clk.Step(2 * time.Minute)
	gc.firstSeen["young"] = clk.Now()
	// At 86%, 60 bytes must go to reach 80%: one image of 100, the least
	// recently used ("old" never was).
	free = 140
	freed, err := gc.collect(ctx, rs, is)
	if err != nil || freed != 100 {
		t.Fatalf("freed %d, %v; want 100", freed, err)
	}
	if got, want := remaining(), []string{"newer", "pinned", "used", "young"}; !slices.Equal(got, want) {
		t.Errorf("left %v, want %v", got, want)
	}
	// Still full: "newer" goes; in use, pinned and young ones never do.
	free = 50
	if _, err := gc.collect(ctx, rs, is); err == nil {
		t.Error("could not free enough, but no error")
	}
	if got, want := remaining(), []string{"pinned", "used", "young"}; !slices.Equal(got, want) {
		t.Errorf("left %v, want %v", got, want)
	}
}

// Under disk pressure every unused image old enough goes, whatever the
// filesystem's usage; its age counts from the listing that first found it.
func TestImageGCRemoveUnused(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC))
	is := criapitesting.NewFakeImageService()
	is.SetFakeImagePinned("pinned", true) // read when the images are made
	is.SetFakeImages([]string{"idle", "used", "pinned"})
	rs := criapitesting.NewFakeRuntimeService()
	rs.SetFakeContainers([]*criapitesting.FakeContainer{{ContainerStatus: runtimeapi.ContainerStatus{
		Id: "c1", ImageRef: "used", Image: &runtimeapi.ImageSpec{Image: "used"}, State: runtimeapi.ContainerState_CONTAINER_RUNNING}}})
	gc := newImageGC(clk, 85, 80, time.Second)
	gc.capacity = func(string) (uint64, uint64, error) { return 1000, 900, nil } // 10% used: no pressure of its own

	list, _ := is.ListImages(ctx, nil)
	gc.detected(list)
	if _, err := gc.removeUnused(ctx, rs, is); err != nil {
		t.Fatal(err)
	}
	if got, _ := is.ListImages(ctx, nil); len(got) != 3 {
		t.Fatalf("images younger than the minimum age removed: %d left", len(got))
	}
	clk.Step(2 * time.Second)
	if _, err := gc.removeUnused(ctx, rs, is); err != nil {
		t.Fatal(err)
	}
	var left []string
	got, _ := is.ListImages(ctx, nil)
	for _, img := range got {
		left = append(left, img.Id)
	}
	slices.Sort(left)
	if !slices.Equal(left, []string{"pinned", "used"}) {
		t.Errorf("images left %v, want the pinned and the used one", left)
	}
}

// An image a container mounts as an image volume is in use: the collection
// reads it from the container's status, as the kubelet's does. A container
// gone since the listing mounts nothing; a status that cannot be read
// stops the collection rather than remove an image that may be mounted.
func TestImageGCKeepsImageVolumes(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC))
	is := criapitesting.NewFakeImageService()
	is.SetFakeImages([]string{"idle", "run", "mounted"})
	rs := criapitesting.NewFakeRuntimeService()
	rs.SetFakeContainers([]*criapitesting.FakeContainer{{ContainerStatus: runtimeapi.ContainerStatus{
		Id: "c1", ImageRef: "run", Image: &runtimeapi.ImageSpec{Image: "run"}, State: runtimeapi.ContainerState_CONTAINER_RUNNING,
		Mounts: []*runtimeapi.Mount{
			{ContainerPath: "/data", HostPath: "/var/lib/nodelet/pods/u/volumes/x"},
			{ContainerPath: "/vol", Readonly: true, Image: &runtimeapi.ImageSpec{Image: "mounted", UserSpecifiedImage: "tools:1"}},
		}}}})
	gc := newImageGC(clk, 85, 80, time.Second)
	gc.capacity = func(string) (uint64, uint64, error) { return 1000, 900, nil }
	list, _ := is.ListImages(ctx, nil)
	gc.detected(list)
	clk.Step(2 * time.Second)
	left := func() []string {
		var ids []string
		got, _ := is.ListImages(ctx, nil)
		for _, img := range got {
			ids = append(ids, img.Id)
		}
		slices.Sort(ids)
		return ids
	}

	rs.InjectError("ContainerStatus", errors.New("rpc error: code = Unavailable desc = runtime busy"))
	if _, err := gc.removeUnused(ctx, rs, is); err == nil || !strings.Contains(err.Error(), "status of container c1") {
		t.Errorf("err = %v, want the status that could not be read", err)
	}
	if got := left(); len(got) != 3 {
		t.Fatalf("images removed while a container's mounts were unknown: %v left", got)
	}
	if _, err := gc.removeUnused(ctx, rs, is); err != nil {
		t.Fatal(err)
	}
	if got, want := left(), []string{"mounted", "run"}; !slices.Equal(got, want) {
		t.Errorf("left %v, want %v", got, want)
	}
	// Removed since it was listed: its image volume is no longer in use.
	rs.InjectError("ContainerStatus", status.Error(codes.NotFound, "container c1 not found"))
	if _, err := gc.removeUnused(ctx, rs, is); err != nil {
		t.Fatal(err)
	}
	if got, want := left(), []string{"run"}; !slices.Equal(got, want) {
		t.Errorf("left %v, want %v", got, want)
	}
}
