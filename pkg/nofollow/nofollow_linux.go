package nofollow

import (
	"errors"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// openBelow walks the elements from dir one directory at a time with
// openat and O_NOFOLLOW, so that nothing can swap a link in between.
func openBelow(dir string, elems []string, flag int, perm os.FileMode) (*os.File, error) {
	cur, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer func() { unix.Close(cur) }()
	for _, el := range elems[:len(elems)-1] {
		next, err := unix.Openat(cur, el, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, linkError(cur, el, err)
		}
		unix.Close(cur)
		cur = next
	}
	last := elems[len(elems)-1]
	fd, err := unix.Openat(cur, last, flag|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(perm.Perm()))
	if err != nil {
		return nil, linkError(cur, last, err)
	}
	return os.NewFile(uintptr(fd), filepath.Join(append([]string{dir}, elems...)...)), nil
}

// linkError says ErrSymlink when el in dirfd is a symbolic link: openat
// with O_NOFOLLOW fails on one with ELOOP, or ENOTDIR where a directory is
// asked for.
func linkError(dirfd int, el string, err error) error {
	if !errors.Is(err, unix.ELOOP) && !errors.Is(err, unix.ENOTDIR) {
		return err
	}
	var st unix.Stat_t
	if unix.Fstatat(dirfd, el, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return ErrSymlink
	}
	return err
}
