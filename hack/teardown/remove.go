//go:build linux

package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nodelet/nodelet/pkg/mountinfo"
)

// unmountUnder unmounts every mount strictly below dir, deepest first (the
// last mounted first among equals), until none is left. A busy mount is
// detached: what still holds it is no longer reachable through dir.
func (t *teardown) unmountUnder(dir string) error {
	for pass := 0; pass < 5; pass++ {
		points, err := mountinfo.Under(dir)
		if err != nil {
			return err
		}
		if len(points) == 0 {
			return nil
		}
		slices.Reverse(points)
		slices.SortStableFunc(points, func(a, b string) int { return depth(b) - depth(a) })
		for _, p := range points {
			err := unix.Unmount(p, unix.UMOUNT_NOFOLLOW)
			if errors.Is(err, unix.EBUSY) {
				t.log("%s is busy: detaching it", p)
				err = unix.Unmount(p, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
			}
			switch {
			case err == nil:
				t.log("unmounted %s", p)
			case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
				// Gone with the one above it, or with its propagation peer.
			default:
				return fmt.Errorf("unmount %s: %w", p, err)
			}
		}
	}
	points, _ := mountinfo.Under(dir)
	return fmt.Errorf("still mounted after 5 passes: %s", strings.Join(points, ", "))
}

func depth(p string) int { return strings.Count(filepath.Clean(p), "/") }

// removeTree removes dir and everything in it, as rm -rf does, except that
// it never descends into a mount point: one below dir fails the removal
// and is left as it is.
func (t *teardown) removeTree(dir string) error {
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if points, err := mountinfo.Under(dir); err != nil {
		return err
	} else if len(points) > 0 {
		return fmt.Errorf("not removing %s: %s is mounted", dir, strings.Join(points, ", "))
	}
	id, err := mountID(dir)
	if err != nil {
		return err
	}
	if err := removeBelow(dir, id); err != nil {
		return err
	}
	if err := os.Remove(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	t.log("removed %s", dir)
	return nil
}

// removeBelow removes what is in dir, checking before it enters a
// directory that it lies on the same mount as dir.
func removeBelow(dir string, id uint64) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if e.IsDir() { // false for a symbolic link, which is removed as such
			sub, err := mountID(p)
			if err != nil {
				return err
			}
			if sub != id {
				return fmt.Errorf("not removing %s: it is a mount point", p)
			}
			if err := removeBelow(p, id); err != nil {
				return err
			}
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove %s: %w", p, err)
		}
	}
	return nil
}

// mountID is the ID of the mount path lies on, without following a link:
// statx's mount ID, or the device number on kernels without it.
func mountID(path string) (uint64, error) {
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_MNT_ID, &st); err != nil {
		return 0, fmt.Errorf("stat %s: %w", path, err)
	}
	if st.Mask&unix.STATX_MNT_ID != 0 {
		return st.Mnt_id, nil
	}
	return uint64(unix.Mkdev(st.Dev_major, st.Dev_minor)), nil
}
