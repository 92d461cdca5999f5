package csidriver

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nodelet/nodelet/pkg/mountinfo"
)

// mountInfo is what the driver needs to know of a mount.
type mountInfo struct {
	readOnly bool
}

// findMount says whether path, with symbolic links resolved, is a mount
// point in the process's mount namespace, and if so describes the topmost
// mount there. A path that does not exist is not a mount point.
func findMount(path string) (mountInfo, bool, error) {
	real, err := resolve(path)
	if errors.Is(err, fs.ErrNotExist) {
		return mountInfo{}, false, nil
	}
	if err != nil {
		return mountInfo{}, false, err
	}
	mounts, err := mountinfo.Read()
	if err != nil {
		return mountInfo{}, false, err
	}
	var found mountInfo
	mounted := false
	for _, m := range mounts {
		if m.Point == real {
			// Later mounts lie on top of earlier ones.
			mounted = true
			found = mountInfo{readOnly: hasOption(m.Options, "ro")}
		}
	}
	return found, mounted, nil
}

// bindMount bind-mounts source at target, read-only if asked.
func bindMount(source, target string, readOnly bool) error {
	if err := unix.Mount(source, target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind-mount %s at %s: %w", source, target, err)
	}
	if !readOnly {
		return nil
	}
	// A bind mount takes its flags from a remount. Flags the mount has
	// already (nosuid, nodev, ...) are kept, as the kernel may refuse to
	// drop them.
	var st unix.Statfs_t
	if err := unix.Statfs(target, &st); err != nil {
		_ = unix.Unmount(target, 0)
		return fmt.Errorf("read flags of %s: %w", target, err)
	}
	keep := uintptr(st.Flags) & (unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC | unix.MS_NOATIME | unix.MS_NODIRATIME | unix.MS_RELATIME)
	if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|keep, ""); err != nil {
		_ = unix.Unmount(target, 0)
		return fmt.Errorf("make %s read-only: %w", target, err)
	}
	return nil
}

// unmountAll unmounts everything mounted at path, which need not exist.
func unmountAll(path string) error {
	// A bounded loop: a driver that never stacks mounts finds one at most,
	// but a CO or a test may have stacked a few.
	for range 16 {
		_, mounted, err := findMount(path)
		if err != nil || !mounted {
			return err
		}
		real, err := resolve(path)
		if err != nil {
			return err
		}
		if err := unix.Unmount(real, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("unmount %s: %w", real, err)
		}
	}
	return fmt.Errorf("unmount %s: still mounted after 16 unmounts", path)
}

func resolve(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("resolve %s: %w", path, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("resolve %s: %w", path, err)
	}
	return real, nil
}

func hasOption(options, option string) bool {
	for o := range strings.SplitSeq(options, ",") {
		if o == option {
			return true
		}
	}
	return false
}
