package hostvolume

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"
)

// Layout of an API-derived volume, so that readers never see a mix of old
// and new files:
//
//	dir/..2024_05_01_10_00_00.123456789/   the files of one version
//	dir/..data -> ..2024_05_01_...        the current version
//	dir/key -> ..data/key                  one link per top-level name
//
// An update writes a new version directory, points a temporary link at it
// and renames that link over ..data: one atomic step. Readers that opened
// an old file keep reading it after the old version is removed.
const (
	dataLink    = "..data"
	dataLinkTmp = "..data_tmp"
	versionFmt  = "2006_01_02_15_04_05."
)

// writeAtomic makes dir hold exactly files, swapping versions only when the
// contents or modes differ. It reports whether it swapped.
func writeAtomic(dir string, files map[string]file, now time.Time) (bool, error) {
	clean := make(map[string]file, len(files))
	for p, f := range files {
		clean[path.Clean(p)] = f
	}
	files = clean

	old, err := os.Readlink(filepath.Join(dir, dataLink))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("read %s: %w", dataLink, err)
	}
	if old != "" && sameFiles(filepath.Join(dir, old), files) {
		return false, nil
	}

	version, err := os.MkdirTemp(dir, ".."+now.UTC().Format(versionFmt))
	if err != nil {
		return false, fmt.Errorf("create version directory: %w", err)
	}
	if err := writeVersion(version, files); err != nil {
		_ = os.RemoveAll(version)
		return false, err
	}

	tmp := filepath.Join(dir, dataLinkTmp)
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("remove stale %s: %w", dataLinkTmp, err)
	}
	if err := os.Symlink(filepath.Base(version), tmp); err != nil {
		_ = os.RemoveAll(version)
		return false, fmt.Errorf("link new version: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, dataLink)); err != nil {
		_ = os.Remove(tmp)
		_ = os.RemoveAll(version)
		return false, fmt.Errorf("swap %s: %w", dataLink, err)
	}

	// Visible links: add the new names, drop the names that went away.
	want := map[string]bool{}
	for p := range files {
		top, _, _ := strings.Cut(p, "/")
		want[top] = true
	}
	for top := range want {
		link := filepath.Join(dir, top)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join(dataLink, top), link); err != nil {
			return true, fmt.Errorf("link %s: %w", top, err)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return true, fmt.Errorf("read %s: %w", dir, err)
	}
	keep := filepath.Base(version)
	for _, e := range entries {
		name := e.Name()
		switch {
		case name == dataLink || name == keep:
		case strings.HasPrefix(name, ".."):
			// An older version, or the leftovers of an interrupted update.
			if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
				return true, fmt.Errorf("remove old version %s: %w", name, err)
			}
		case !want[name] && e.Type()&fs.ModeSymlink != 0:
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				return true, fmt.Errorf("remove link %s: %w", name, err)
			}
		}
	}
	return true, nil
}

func writeVersion(version string, files map[string]file) error {
	if err := os.Chmod(version, 0o755); err != nil {
		return fmt.Errorf("chmod version directory: %w", err)
	}
	for p, f := range files {
		full := filepath.Join(version, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return fmt.Errorf("create directory for %s: %w", p, err)
		}
		if err := os.WriteFile(full, f.data, f.mode); err != nil {
			return fmt.Errorf("write %s: %w", p, err)
		}
		// WriteFile's mode is filtered by the umask.
		if err := os.Chmod(full, f.mode); err != nil {
			return fmt.Errorf("chmod %s: %w", p, err)
		}
	}
	return nil
}

// sameFiles reports whether version holds exactly files with their modes.
func sameFiles(version string, files map[string]file) bool {
	seen := 0
	err := filepath.WalkDir(version, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(version, p)
		if err != nil {
			return err
		}
		f, ok := files[filepath.ToSlash(rel)]
		if !ok || !d.Type().IsRegular() {
			return errDiffer
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Mode().Perm() != f.mode.Perm() || info.Size() != int64(len(f.data)) {
			return errDiffer
		}
		data, err := os.ReadFile(p)
		if err != nil || !bytes.Equal(data, f.data) {
			return errDiffer
		}
		seen++
		return nil
	})
	return err == nil && seen == len(files)
}

var errDiffer = errors.New("contents differ")
