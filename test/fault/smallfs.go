package fault

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// SmallFS is a tmpfs of a fixed size mounted on a directory (root only),
// for an agent's root directory that a test fills up.
type SmallFS struct {
	Dir  string
	fill string
}

// MountSmallFS mounts a tmpfs of size bytes on dir, which must exist.
func MountSmallFS(dir string, size int64) (*SmallFS, error) {
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,mode=0755", size)); err != nil {
		return nil, fmt.Errorf("mount a tmpfs of %d bytes on %s: %w", size, dir, err)
	}
	return &SmallFS{Dir: dir, fill: filepath.Join(dir, "fill")}, nil
}

// Fill writes a file until the file system has no space left and returns
// how many bytes it wrote.
func (s *SmallFS) Fill() (int64, error) {
	f, err := os.OpenFile(s.fill, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	var n int64
	for {
		w, err := f.Write(buf)
		n += int64(w)
		if errors.Is(err, syscall.ENOSPC) {
			break
		}
		if err != nil {
			return n, err
		}
	}
	// Single pages may still be free: take them one by one.
	for {
		w, err := f.Write(buf[:512])
		n += int64(w)
		if err != nil || w == 0 {
			break
		}
	}
	return n, nil
}

// Available is the space left, in bytes.
func (s *SmallFS) Available() (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(s.Dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}

// Free removes what Fill wrote.
func (s *SmallFS) Free() error {
	if err := os.Remove(s.fill); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// Unmount unmounts the file system; what was on it is gone.
func (s *SmallFS) Unmount() error {
	if err := unix.Unmount(s.Dir, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("unmount %s: %w", s.Dir, err)
	}
	return nil
}
