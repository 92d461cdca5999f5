// Package mountinfo reads the mount table of the calling process's mount
// namespace (/proc/self/mountinfo, parsed by github.com/moby/sys/mountinfo)
// for the parts of the agent that must know what is mounted before they
// unmount or remove a directory.
package mountinfo

import (
	"fmt"
	"path/filepath"
	"slices"

	mobymountinfo "github.com/moby/sys/mountinfo"
)

// Mount is one mount of the table.
type Mount struct {
	// Point is the mount point, unescaped.
	Point string
	// Options are the per-mount options, comma-separated ("rw,nosuid").
	Options string
}

// Read returns the mounts of the calling process's mount namespace, in the
// order they were mounted: a later mount at a point lies on top of an
// earlier one.
func Read() ([]Mount, error) {
	return read(nil)
}

// Under lists the mount points of the calling process's mount namespace
// strictly below dir. A pod's directory holds its volumes: removing it while
// one is still mounted would delete the volume's data.
func Under(dir string) ([]string, error) {
	dir = filepath.Clean(dir)
	mounts, err := read(mobymountinfo.PrefixFilter(dir))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range mounts {
		if m.Point != dir {
			out = append(out, m.Point)
		}
	}
	return out, nil
}

// CgroupHierarchies are the mount points of the cgroup v1 and v2
// hierarchies, each once.
func CgroupHierarchies() ([]string, error) {
	mounts, err := read(mobymountinfo.FSTypeFilter("cgroup", "cgroup2"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range mounts {
		if !slices.Contains(out, m.Point) {
			out = append(out, m.Point)
		}
	}
	return out, nil
}

func read(filter mobymountinfo.FilterFunc) ([]Mount, error) {
	infos, err := mobymountinfo.GetMounts(filter)
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	out := make([]Mount, 0, len(infos))
	for _, i := range infos {
		out = append(out, Mount{Point: i.Mountpoint, Options: i.Options})
	}
	return out, nil
}
