// Package atomicfile replaces files so that a reader, or the next agent
// after a crash, sees the old content or the new one and never a part: the
// data goes to a temporary file in the same directory, which is renamed
// over the target.
//
// It owns only the temporary files it creates beside its targets.
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// TempSuffix ends the name of the temporary file of a write with
// Options.FixedTemp: <target>.tmp. A crash leaves at most that one file
// behind, which whoever removes the directory knows by name.
const TempSuffix = ".tmp"

// Options of a write. The zero value writes with mode 0600, no fsync and a
// temporary file of a random name (.<target>.tmp<random>).
type Options struct {
	// Perm is the file's mode; 0 means 0600.
	Perm os.FileMode
	// Sync makes the write durable against a crash of the machine: the
	// file is synced before the rename and the directory after it. Records
	// that only describe processes, which a crash of the machine ends too,
	// need not pay for it.
	Sync bool
	// FixedTemp names the temporary file <target>.tmp, so a directory that
	// must be removable after a crash holds no file of an unknown name.
	// Writers of one target must then not run concurrently.
	FixedTemp bool
}

// Write replaces path with data.
func Write(path string, data []byte, opts Options) error {
	if err := write(path, data, opts); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func write(path string, data []byte, opts Options) error {
	perm := opts.Perm
	if perm == 0 {
		perm = 0o600
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	var f *os.File
	var err error
	if opts.FixedTemp {
		f, err = os.OpenFile(path+TempSuffix, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, perm)
	} else {
		f, err = os.CreateTemp(dir, tempPattern(base))
	}
	if err != nil {
		return err
	}
	tmp := f.Name()
	done := false
	defer func() {
		if !done {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Chmod(perm); err != nil {
		return err
	}
	if opts.Sync {
		if err := f.Sync(); err != nil {
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	done = true
	if opts.Sync {
		return SyncDir(dir)
	}
	return nil
}

// tempPattern is the os.CreateTemp pattern of the temporary file of a write
// to base without Options.FixedTemp.
func tempPattern(base string) string { return "." + base + TempSuffix + "*" }

// IsTemp reports whether name, a base name, has the form of the temporary
// file of a write without Options.FixedTemp (.<target>.tmp<random>), which
// a crash can leave behind: the owner of a directory removes such files
// when it cleans up. The form is loose (a dot, a non-empty target, ".tmp"
// and anything non-empty), so use it only in a directory of one's own.
func IsTemp(name string) bool {
	i := strings.LastIndex(name, TempSuffix)
	return strings.HasPrefix(name, ".") && i > 1 && i+len(TempSuffix) < len(name)
}

// SyncDir makes a directory's entries (a rename, a new or removed file)
// durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}
