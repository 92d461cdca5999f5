package nofollow

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func TestOpen(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	write := func(path, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, path string) {
		t.Helper()
		if err := os.Symlink(target, path); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(dir, "logs/main/0.log"), "inside")
	write(filepath.Join(outside, "secret"), "outside")
	write(filepath.Join(outside, "0.log"), "outside")
	write(filepath.Join(dir, "logs/file/keep"), "")
	link(filepath.Join(outside, "secret"), filepath.Join(dir, "logs/file/0.log"))
	link("keep", filepath.Join(dir, "logs/file/1.log")) // a link even inside is refused
	link(outside, filepath.Join(dir, "logs/dir"))
	link(filepath.Join(outside, "new"), filepath.Join(dir, "logs/file/dangling.log"))

	tests := []struct {
		name    string
		path    string
		flag    int
		want    string
		wantErr error
	}{
		{name: "plain file", path: "logs/main/0.log", want: "inside"},
		{name: "the file is a link", path: "logs/file/0.log", wantErr: ErrSymlink},
		{name: "a link that stays inside", path: "logs/file/1.log", wantErr: ErrSymlink},
		{name: "a directory is a link", path: "logs/dir/0.log", wantErr: ErrSymlink},
		{name: "missing", path: "logs/main/1.log", wantErr: fs.ErrNotExist},
		{name: "created", path: "logs/main/2.log", flag: os.O_CREATE | os.O_WRONLY},
		{name: "created through a dangling link", path: "logs/file/dangling.log", flag: os.O_CREATE | os.O_WRONLY, wantErr: ErrSymlink},
		{name: "dot-dot", path: "../x", wantErr: ErrOutside},
		{name: "the directory itself", path: ".", wantErr: ErrOutside},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Open(dir, filepath.Join(dir, tt.path), tt.flag|os.O_RDONLY, 0o640)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Open = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if tt.flag&os.O_WRONLY != 0 {
				return
			}
			data, err := io.ReadAll(f)
			if err != nil || string(data) != tt.want {
				t.Errorf("read %q %v, want %q", data, err, tt.want)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(outside, "new")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the dangling link's target was created: %v", err)
	}
}
