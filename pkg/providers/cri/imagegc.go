package cri

import (
	"context"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// imageGC frees the image filesystem as the kubelet's image garbage
// collection does: once its usage reaches highPercent, it removes images
// no container uses (in the whole runtime, not only this node's), as its
// image or mounted as an image volume, least recently used first and none
// younger than minAge since it was first seen, until usage is down to
// lowPercent.
type imageGC struct {
	clock       clock.Clock
	highPercent int
	lowPercent  int
	minAge      time.Duration
	// capacity reads a filesystem's size and free bytes; statfs by default.
	capacity func(path string) (total, free uint64, err error)

	// mu serializes the collections and the eviction manager's removals.
	mu sync.Mutex
	// firstSeen and lastUsed are per image ID; lastUsed is when a container
	// was last seen using it.
	firstSeen map[string]time.Time
	lastUsed  map[string]time.Time
}

func newImageGC(clk clock.Clock, high, low int, minAge time.Duration) *imageGC {
	return &imageGC{clock: clk, highPercent: high, lowPercent: low, minAge: minAge, capacity: statfs,
		firstSeen: map[string]time.Time{}, lastUsed: map[string]time.Time{}}
}

func statfs(path string) (total, free uint64, err error) {
	var fs unix.Statfs_t
	if err := unix.Statfs(path, &fs); err != nil {
		return 0, 0, fmt.Errorf("statfs %s: %w", path, err)
	}
	return fs.Blocks * uint64(fs.Bsize), fs.Bavail * uint64(fs.Bsize), nil
}

// collect looks at the image filesystem once and removes images if it is
// too full; it returns how many bytes it freed.
func (g *imageGC) collect(ctx context.Context, rs internalapi.RuntimeService, is internalapi.ImageManagerService) (uint64, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	candidates, err := g.scan(ctx, rs, is)
	if err != nil {
		return 0, err
	}
	fsInfo, err := is.ImageFsInfo(ctx)
	if err != nil {
		return 0, fmt.Errorf("image filesystem: %w", err)
	}
	fss := fsInfo.GetImageFilesystems()
	if len(fss) == 0 || fss[0].GetFsId().GetMountpoint() == "" {
		return 0, nil
	}
	total, free, err := g.capacity(fss[0].GetFsId().GetMountpoint())
	if err != nil || total == 0 {
		return 0, err
	}
	usage := int((total - free) * 100 / total)
	if usage < g.highPercent {
		return 0, nil
	}
	toFree := int64(total-free) - int64(total)*int64(g.lowPercent)/100
	klog.FromContext(ctx).Info("Image filesystem usage above the high threshold; removing unused images", "usage", usage, "high", g.highPercent, "toFree", toFree)
	freed := g.remove(ctx, is, candidates, toFree)
	if int64(freed) < toFree {
		return freed, fmt.Errorf("image filesystem at %d%%: freed %d of the %d bytes to free", usage, freed, toFree)
	}
	return freed, nil
}

// removeUnused removes every image no container uses that is not pinned
// and was first seen at least minAge ago, whatever the filesystem's usage:
// what the eviction manager asks for under disk pressure.
func (g *imageGC) removeUnused(ctx context.Context, rs internalapi.RuntimeService, is internalapi.ImageManagerService) (uint64, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	candidates, err := g.scan(ctx, rs, is)
	if err != nil {
		return 0, err
	}
	return g.remove(ctx, is, candidates, math.MaxInt64), nil
}

// detected records the images of a listing not seen before as first seen
// now: an image's minimum age counts from when the agent first listed it,
// as the kubelet's counts from its first detection.
func (g *imageGC) detected(images []*runtimeapi.Image) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.clock.Now()
	for _, img := range images {
		if _, ok := g.firstSeen[img.Id]; !ok {
			g.firstSeen[img.Id] = now
		}
	}
}

// scan updates when each image was first seen and last used, and returns
// the images that may be removed, least recently used first.
func (g *imageGC) scan(ctx context.Context, rs internalapi.RuntimeService, is internalapi.ImageManagerService) ([]*runtimeapi.Image, error) {
	images, err := is.ListImages(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("list images: %w", err)
	}
	containers, err := rs.ListContainers(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	inUse := map[string]bool{}
	for _, c := range containers {
		inUse[c.ImageRef] = true
		inUse[c.GetImage().GetImage()] = true
	}
	if err := imageVolumesInUse(ctx, rs, containers, inUse); err != nil {
		return nil, err
	}
	now := g.clock.Now()
	present := map[string]bool{}
	for _, img := range images {
		present[img.Id] = true
		if _, ok := g.firstSeen[img.Id]; !ok {
			g.firstSeen[img.Id] = now
		}
		if used(img, inUse) {
			g.lastUsed[img.Id] = now
		}
	}
	for id := range g.firstSeen {
		if !present[id] {
			delete(g.firstSeen, id)
			delete(g.lastUsed, id)
		}
	}
	var candidates []*runtimeapi.Image
	for _, img := range images {
		if used(img, inUse) || img.Pinned || now.Sub(g.firstSeen[img.Id]) < g.minAge {
			continue
		}
		candidates = append(candidates, img)
	}
	sort.Slice(candidates, func(i, j int) bool {
		a, b := candidates[i], candidates[j]
		if !g.lastUsed[a.Id].Equal(g.lastUsed[b.Id]) {
			return g.lastUsed[a.Id].Before(g.lastUsed[b.Id])
		}
		return g.firstSeen[a.Id].Before(g.firstSeen[b.Id])
	})
	return candidates, nil
}

// imageVolumesInUse adds to inUse the images the containers mount as image
// volumes, which only their status tells (as the kubelet reads them). A
// container removed since it was listed mounts nothing; any other error
// stops the collection rather than remove an image that may be mounted.
func imageVolumesInUse(ctx context.Context, rs internalapi.RuntimeService, containers []*runtimeapi.Container, inUse map[string]bool) error {
	for _, c := range containers {
		resp, err := rs.ContainerStatus(ctx, c.Id, false)
		switch {
		case status.Code(err) == codes.NotFound:
			continue
		case err != nil:
			return fmt.Errorf("status of container %s: %w", c.Id, err)
		}
		for _, m := range resp.GetStatus().GetMounts() {
			if img := m.GetImage().GetImage(); img != "" {
				inUse[img] = true
			}
		}
	}
	return nil
}

// remove removes candidates in order until toFree bytes are freed, and
// returns how many were.
func (g *imageGC) remove(ctx context.Context, is internalapi.ImageManagerService, candidates []*runtimeapi.Image, toFree int64) uint64 {
	var freed uint64
	for _, img := range candidates {
		if freed >= uint64(toFree) {
			break
		}
		if err := is.RemoveImage(ctx, &runtimeapi.ImageSpec{Image: img.Id}); err != nil {
			klog.FromContext(ctx).Error(err, "Removing an unused image failed", "image", img.Id)
			continue
		}
		freed += img.Size
		delete(g.firstSeen, img.Id)
		delete(g.lastUsed, img.Id)
	}
	return freed
}

// used tells whether a container runs the image, by its ID, a tag or a
// digest.
func used(img *runtimeapi.Image, inUse map[string]bool) bool {
	if inUse[img.Id] {
		return true
	}
	for _, names := range [][]string{img.RepoTags, img.RepoDigests} {
		for _, n := range names {
			if inUse[n] {
				return true
			}
		}
	}
	return false
}
