// Package nofollow opens files below a directory the agent trusts (a pod's
// log directory) without following a symbolic link anywhere below it: what
// a container that can write there planted is refused, never read or
// written through. It owns no files; it only opens them.
package nofollow

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ErrSymlink is the error of a path that is, or goes through, a symbolic
// link below the trusted directory.
var ErrSymlink = errors.New("is or goes through a symbolic link")

// ErrOutside is the error of a path that does not lie below the directory.
var ErrOutside = errors.New("is not below the directory")

// Open opens path, which must lie below dir, with flag and perm as
// os.OpenFile does, resolving each element after dir without following a
// symbolic link: one of them being a link fails with ErrSymlink. dir
// itself is opened as given.
func Open(dir, path string, flag int, perm os.FileMode) (*os.File, error) {
	rel, err := filepath.Rel(dir, path)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) || filepath.IsAbs(rel) {
		return nil, &os.PathError{Op: "open", Path: path, Err: fmt.Errorf("%w %s", ErrOutside, dir)}
	}
	f, err := openBelow(dir, strings.Split(rel, string(filepath.Separator)), flag, perm)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return f, nil
}
