package csidriver

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
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
	table, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return mountInfo{}, false, fmt.Errorf("read mount table: %w", err)
	}
	var found mountInfo
	mounted := false
	sc := bufio.NewScanner(bytes.NewReader(table))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		// Fields: ID, parent ID, major:minor, root, mount point, mount
		// options, optional fields..., "-", type, source, super options.
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || unescapeMountPath(fields[4]) != real {
			continue
		}
		// Later lines are mounted on top of earlier ones.
		mounted = true
		found = mountInfo{readOnly: hasOption(fields[5], "ro")}
	}
	if err := sc.Err(); err != nil {
		return mountInfo{}, false, fmt.Errorf("parse mount table: %w", err)
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

// unescapeMountPath undoes the octal escapes (\040 for a space, and so on)
// of paths in /proc/self/mountinfo.
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func hasOption(options, option string) bool {
	for o := range strings.SplitSeq(options, ",") {
		if o == option {
			return true
		}
	}
	return false
}
