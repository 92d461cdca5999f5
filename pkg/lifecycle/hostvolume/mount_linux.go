package hostvolume

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/nodelet/nodelet/pkg/mountinfo"
)

// ensureTmpfs mounts a tmpfs with the given options on dir unless something
// is mounted there already. Without the privilege to mount, the error wraps
// os.ErrPermission.
func ensureTmpfs(dir, opts string) error {
	mounted, err := isMountPoint(dir)
	if err != nil {
		return err
	}
	if mounted {
		return nil
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, opts); err != nil {
		if errors.Is(err, syscall.EPERM) {
			return fmt.Errorf("mount tmpfs on %s: %w", dir, os.ErrPermission)
		}
		return fmt.Errorf("mount tmpfs on %s: %w", dir, err)
	}
	return nil
}

// unmountVolume unmounts what is mounted below a pod's volume directory,
// the deepest first, then what is mounted on it: a container whose mount
// of the volume propagates to the host (Bidirectional) may leave a file
// system it mounted inside, which would keep the volume, and so the pod,
// from being removed.
func unmountVolume(dir string) error {
	below, err := mountinfo.Under(dir)
	if err != nil {
		return err
	}
	slices.Reverse(below) // the last mounted first
	slices.SortStableFunc(below, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	for _, p := range below {
		if err := unmountIfMounted(p); err != nil {
			return err
		}
	}
	return unmountIfMounted(dir)
}

// unmountIfMounted unmounts whatever is mounted on dir, lazily if it is busy.
func unmountIfMounted(dir string) error {
	mounted, err := isMountPoint(dir)
	if err != nil || !mounted {
		return err
	}
	err = syscall.Unmount(dir, 0)
	if errors.Is(err, syscall.EBUSY) {
		err = syscall.Unmount(dir, syscall.MNT_DETACH)
	}
	if err != nil && !errors.Is(err, syscall.EINVAL) {
		return fmt.Errorf("unmount %s: %w", dir, err)
	}
	return nil
}

// IsMountPoint reports whether a file system is mounted on dir (false when
// dir does not exist).
func IsMountPoint(dir string) (bool, error) { return isMountPoint(dir) }

// isMountPoint reports whether a file system is mounted on dir: its device
// differs from its parent's, or it is listed as a mount point (bind mounts
// of the same file system).
func isMountPoint(dir string) (bool, error) {
	dev, err := device(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		return false, err
	}
	parent, err := device(filepath.Dir(dir))
	if err != nil {
		return false, err
	}
	if dev != parent {
		return true, nil
	}
	points, err := mountPoints()
	if err != nil {
		return false, err
	}
	return points[dir], nil
}

func device(p string) (uint64, error) {
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		return 0, &os.PathError{Op: "lstat", Path: p, Err: err}
	}
	return uint64(st.Dev), nil //nolint:unconvert // Dev's type differs by architecture
}

// mountPoints returns the mount points of this mount namespace.
func mountPoints() (map[string]bool, error) {
	mounts, err := mountinfo.Read()
	if err != nil {
		return nil, err
	}
	points := make(map[string]bool, len(mounts))
	for _, m := range mounts {
		points[m.Point] = true
	}
	return points, nil
}

// removeTree removes root and everything under it without following
// symbolic links and without entering another mount: a directory that is a
// mount point stops the removal with an error, so that no mounted file
// system (a hostPath, a tmpfs that failed to unmount) is ever emptied.
func removeTree(root string) error {
	rootDev, err := device(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	points, err := mountPoints()
	if err != nil {
		return err
	}
	return removeUnder(root, rootDev, points)
}

func removeUnder(p string, rootDev uint64, points map[string]bool) error {
	info, err := os.Lstat(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if info.IsDir() {
		dev, err := device(p)
		if err != nil {
			return err
		}
		if dev != rootDev || points[p] {
			return fmt.Errorf("refusing to remove %s: a file system is mounted there", p)
		}
		entries, err := os.ReadDir(p)
		if err != nil {
			return fmt.Errorf("read %s: %w", p, err)
		}
		for _, e := range entries {
			if err := removeUnder(filepath.Join(p, e.Name()), rootDev, points); err != nil {
				return err
			}
		}
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", p, err)
	}
	return nil
}
