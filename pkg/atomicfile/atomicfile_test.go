package atomicfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWrite(t *testing.T) {
	for name, opts := range map[string]Options{
		"default":       {},
		"perm and sync": {Perm: 0o640, Sync: true},
		"fixed temp":    {Perm: 0o644, FixedTemp: true},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "record")
			want := opts.Perm
			if want == 0 {
				want = 0o600
			}
			for _, content := range []string{"first", "second, longer than the first", ""} {
				if err := Write(path, []byte(content), opts); err != nil {
					t.Fatal(err)
				}
				got, err := os.ReadFile(path)
				if err != nil || string(got) != content {
					t.Errorf("after writing %q the file holds %q, %v", content, got, err)
				}
				if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != want {
					t.Errorf("mode %v, %v; want %v", fi.Mode().Perm(), err, want)
				}
			}
			assertOnly(t, dir, "record")
		})
	}
}

func TestWriteFixedTempName(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "vol_data.json")
	// A temporary file a crash left behind is overwritten, then renamed.
	if err := os.WriteFile(path+TempSuffix, []byte("stale, and longer than the new content"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Write(path, []byte("new"), Options{FixedTemp: true}); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(path); err != nil || string(got) != "new" {
		t.Errorf("file holds %q, %v; want %q", got, err, "new")
	}
	assertOnly(t, dir, "vol_data.json")
}

func TestWriteFailureKeepsTheOldFileAndNoTemporary(t *testing.T) {
	for name, opts := range map[string]Options{
		"random temp": {Sync: true},
		"fixed temp":  {FixedTemp: true},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			// A non-empty directory cannot be renamed over: the write fails
			// after the temporary file was written, and removes it.
			target := filepath.Join(dir, "target")
			if err := os.MkdirAll(filepath.Join(target, "child"), 0o700); err != nil {
				t.Fatal(err)
			}
			err := Write(target, []byte("new"), opts)
			if err == nil || !strings.Contains(err.Error(), target) {
				t.Errorf("write over a directory: %v, want an error naming %s", err, target)
			}
			if fi, err := os.Stat(target); err != nil || !fi.IsDir() {
				t.Errorf("the failed write changed %s: %v", target, err)
			}
			assertOnly(t, dir, "target")

			missing := filepath.Join(dir, "no-such-dir", "file")
			if err := Write(missing, []byte("x"), opts); err == nil || !strings.Contains(err.Error(), missing) {
				t.Errorf("write into a missing directory: %v, want an error naming %s", err, missing)
			}
		})
	}
}

func TestWriteIntoReadOnlyDir(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "record")
	if err := Write(path, []byte("old"), Options{}); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o500); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(dir, 0o700) })
	if f, err := os.CreateTemp(dir, "probe"); err == nil {
		f.Close()
		os.Remove(f.Name())
		t.Skip("the directory is writable despite its mode (running as root)")
	}
	for name, opts := range map[string]Options{"random temp": {Sync: true}, "fixed temp": {FixedTemp: true}} {
		if err := Write(path, []byte("new"), opts); err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: write into a read-only directory: %v, want an error naming %s", name, err, path)
		}
	}
	if got, err := os.ReadFile(path); err != nil || string(got) != "old" {
		t.Errorf("file holds %q, %v; want the old content", got, err)
	}
	assertOnly(t, dir, "record")
}

func TestIsTemp(t *testing.T) {
	// The names Write really creates.
	dir := t.TempDir()
	for _, base := range []string{"assigned", "state.json", "a"} {
		f, err := os.CreateTemp(dir, tempPattern(base))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		if name := filepath.Base(f.Name()); !IsTemp(name) {
			t.Errorf("IsTemp(%q) = false for a temporary of %q", name, base)
		}
	}
	for name, want := range map[string]bool{
		".assigned.tmp-123": true,
		".x.tmp1":           true,
		"assigned":          false,
		"assigned.tmp":      false, // a FixedTemp name: known by its target
		"assigned.tmp1":     false,
		".assigned.tmp":     false,
		"..tmp1":            false,
		".tmp1":             false,
		"":                  false,
	} {
		if got := IsTemp(name); got != want {
			t.Errorf("IsTemp(%q) = %v, want %v", name, got, want)
		}
	}
}

// assertOnly fails unless dir holds exactly the named entries.
func assertOnly(t *testing.T, dir string, names ...string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if strings.Join(got, ",") != strings.Join(names, ",") {
		t.Errorf("%s holds %q, want %q", dir, got, names)
	}
}
