// Package mountinfo reads the mount table of the calling process's mount
// namespace (/proc/self/mountinfo), for the parts of the process provider
// that must know what is mounted before they unmount or remove a directory.
package mountinfo

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Mount is one mount of the table.
type Mount struct {
	// Point is the mount point, unescaped.
	Point string
	// Options are the per-mount options, comma-separated ("rw,nosuid").
	Options string
}

// Read returns the mounts of the calling process's mount namespace, in the
// order they were mounted: a later mount at a point lies on top of an
// earlier one.
func Read() ([]Mount, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	defer f.Close()
	var out []Mount
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		// Fields: ID, parent ID, major:minor, root, mount point, mount
		// options, optional fields..., "-", type, source, super options.
		fields := strings.Fields(sc.Text())
		if len(fields) > 5 {
			out = append(out, Mount{Point: Unescape(fields[4]), Options: fields[5]})
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	return out, nil
}

// Unescape undoes the octal escapes of paths in the mount table (\040 for
// a space, \011 for a tab, \012 for a newline, \134 for a backslash).
func Unescape(s string) string {
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

// Under lists the mount points of the calling process's mount namespace
// strictly below dir. A pod's directory holds its volumes: removing it while
// one is still mounted would delete the volume's data.
func Under(dir string) ([]string, error) {
	mounts, err := Read()
	if err != nil {
		return nil, err
	}
	prefix := filepath.Clean(dir) + string(filepath.Separator)
	var out []string
	for _, m := range mounts {
		if strings.HasPrefix(m.Point, prefix) {
			out = append(out, m.Point)
		}
	}
	return out, nil
}
