//go:build !linux

package nofollow

import (
	"os"
	"path/filepath"
)

// openBelow checks each element with Lstat before opening: not proof
// against a link swapped in between, which the Linux version is.
func openBelow(dir string, elems []string, flag int, perm os.FileMode) (*os.File, error) {
	cur := dir
	for _, el := range elems {
		cur = filepath.Join(cur, el)
		fi, err := os.Lstat(cur)
		if err != nil {
			if os.IsNotExist(err) && cur == filepath.Join(append([]string{dir}, elems...)...) {
				break // to be created
			}
			return nil, err
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			return nil, ErrSymlink
		}
	}
	return os.OpenFile(cur, flag, perm)
}
