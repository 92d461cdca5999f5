//go:build !linux

package hostvolume

import (
	"errors"
	"fmt"
	"os"
)

// The process provider runs on Linux; elsewhere the package builds but
// cannot mount, and removes trees without the mount-point guard's table.

var errNoMounts = errors.New("mounts are supported on Linux only")

func ensureTmpfs(dir, opts string) error {
	return fmt.Errorf("mount tmpfs on %s: %w", dir, errNoMounts)
}

func unmountIfMounted(string) error { return nil }

func unmountVolume(string) error { return nil }

// IsMountPoint reports false: no mount is known without Linux's table.
func IsMountPoint(string) (bool, error) { return false, nil }

func removeTree(root string) error { return os.RemoveAll(root) }
