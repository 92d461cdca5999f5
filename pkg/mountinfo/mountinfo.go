// Package mountinfo reads the mount table of the calling process's mount
// namespace (/proc/self/mountinfo, parsed by github.com/moby/sys/mountinfo)
// for the parts of the agent that must know what is mounted before they
// unmount or remove a directory.
package mountinfo

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	mobymountinfo "github.com/moby/sys/mountinfo"
)

// Mount is one mount of the table.
type Mount struct {
	// Point is the mount point, unescaped.
	Point string
	// Options are the per-mount options, comma-separated ("rw,nosuid").
	Options string
	// Root is the directory of the mounted file system that the mount
	// shows at Point: "/" for a whole file system, the directory bound for
	// a bind mount.
	Root string
	// Major and Minor name the mounted file system's device.
	Major, Minor int
	// Propagation are the mount's propagation fields, space-separated
	// ("shared:1 master:2"); empty for a private mount.
	Propagation string
}

// Shared says whether mounts and unmounts below the mount propagate to
// its peers (mount --make-shared).
func (m Mount) Shared() bool {
	return slices.ContainsFunc(strings.Fields(m.Propagation), func(f string) bool { return strings.HasPrefix(f, "shared:") })
}

// Containing returns the mount that path lies on: the deepest mount point
// at or above it, the last mounted among those at the same point. path
// must be absolute and clean, with no symbolic link in it.
func Containing(mounts []Mount, path string) (Mount, bool) {
	var found Mount
	ok := false
	for _, m := range mounts {
		if !within(path, m.Point) {
			continue
		}
		if !ok || len(m.Point) >= len(found.Point) {
			found, ok = m, true
		}
	}
	return found, ok
}

// within says whether path is dir or lies below it.
func within(path, dir string) bool {
	return path == dir || dir == "/" || strings.HasPrefix(path, dir+"/")
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
		out = append(out, Mount{Point: i.Mountpoint, Options: i.Options, Root: i.Root, Major: i.Major, Minor: i.Minor, Propagation: i.Optional})
	}
	return out, nil
}
