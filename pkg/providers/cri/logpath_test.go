package cri

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/nodelet/nodelet/pkg/nofollow"
)

// TestCheckLogPath: a log or log directory swapped for a symbolic link, as
// a pod with the pod logs directory as a hostPath volume could, is refused
// before the runtime's reader opens it.
func TestCheckLogPath(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "0.log"), []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"main", "linked-file"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "main", "0.log"), nil, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "0.log"), filepath.Join(dir, "linked-file", "0.log")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "linked-dir")); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		path    string
		wantErr error
	}{
		{"main/0.log", nil},
		{"main/1.log", nil}, // missing: the reader says so
		{"linked-file/0.log", nofollow.ErrSymlink},
		{"linked-dir/0.log", nofollow.ErrSymlink},
		{"../0.log", nofollow.ErrOutside},
	} {
		err := checkLogPath(dir, filepath.Join(dir, tt.path))
		if tt.wantErr == nil && err != nil || tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
			t.Errorf("checkLogPath(%s) = %v, want %v", tt.path, err, tt.wantErr)
		}
	}
}
