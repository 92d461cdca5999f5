package cri

import (
	"context"
	"fmt"
	"sort"
	"time"

	"golang.org/x/sys/unix"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// imageGC frees the image filesystem as the kubelet's image garbage
// collection does: once its usage reaches highPercent, it removes images
// no container uses (in the whole runtime, not only this node's), least
// recently used first and none younger than minAge since it was first
// seen, until usage is down to lowPercent.
type imageGC struct {
	clock       clock.Clock
	highPercent int
	lowPercent  int
	minAge      time.Duration
	// capacity reads a filesystem's size and free bytes; statfs by default.
	capacity func(path string) (total, free uint64, err error)

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
	images, err := is.ListImages(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("list images: %w", err)
	}
	containers, err := rs.ListContainers(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("list containers: %w", err)
	}
	now := g.clock.Now()
	inUse := map[string]bool{}
	for _, c := range containers {
		inUse[c.ImageRef] = true
		inUse[c.GetImage().GetImage()] = true
	}
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
	logger := klog.FromContext(ctx)
	logger.Info("Image filesystem usage above the high threshold; removing unused images", "usage", usage, "high", g.highPercent, "toFree", toFree)

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
	var freed uint64
	for _, img := range candidates {
		if int64(freed) >= toFree {
			break
		}
		if err := is.RemoveImage(ctx, &runtimeapi.ImageSpec{Image: img.Id}); err != nil {
			logger.Error(err, "Removing an unused image failed", "image", img.Id)
			continue
		}
		freed += img.Size
		delete(g.firstSeen, img.Id)
		delete(g.lastUsed, img.Id)
	}
	if int64(freed) < toFree {
		return freed, fmt.Errorf("image filesystem at %d%%: freed %d of the %d bytes to free", usage, freed, toFree)
	}
	return freed, nil
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
