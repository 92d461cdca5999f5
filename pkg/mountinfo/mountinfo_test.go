package mountinfo

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

func TestReadFindsTheRoot(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the mount table is Linux's")
	}
	mounts, err := Read()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(mounts, func(m Mount) bool { return m.Point == "/" && m.Options != "" }) {
		t.Errorf("no mount at / with options among %d mounts", len(mounts))
	}
}

func TestUnderListsOnlyMountsBelow(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the mount table is Linux's")
	}
	below, err := Under("/")
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(below, "/") {
		t.Errorf("Under(/) lists / itself: %v", below)
	}
	all, err := Read()
	if err != nil {
		t.Fatal(err)
	}
	others := 0
	for _, m := range all {
		if m.Point != "/" {
			others++
		}
	}
	if len(below) != others {
		t.Errorf("Under(/) lists %d mounts, the table has %d below /", len(below), others)
	}
	for _, p := range below {
		if len(p) < 2 || p[0] != '/' {
			t.Errorf("Under(/) lists %q", p)
		}
	}
}

func TestUnderADirectory(t *testing.T) {
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root on Linux")
	}
	dir := t.TempDir()
	sub := filepath.Join(dir, "a b") // escaped in the table
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", sub, "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(sub, 0)
	if got, err := Under(dir); err != nil || !slices.Equal(got, []string{sub}) {
		t.Errorf("Under(%s) = %v, %v; want [%s]", dir, got, err, sub)
	}
	if got, err := Under(sub); err != nil || len(got) != 0 {
		t.Errorf("Under(%s) = %v, %v; want nothing: the mount is at it, not below", sub, got, err)
	}
	if got, err := Under(dir + "/a"); err != nil || len(got) != 0 {
		t.Errorf("Under(%s/a) = %v, %v; want nothing", dir, got, err)
	}
}

func TestContaining(t *testing.T) {
	mounts := []Mount{
		{Point: "/", Root: "/"},
		{Point: "/var/lib", Root: "/a"},
		{Point: "/var", Root: "/b"},
		{Point: "/var/lib", Root: "/c", Propagation: "master:3 shared:7"},
		{Point: "/var/library", Root: "/d"},
	}
	tests := []struct {
		path, wantRoot string
		shared         bool
	}{
		{"/", "/", false},
		{"/etc", "/", false},
		{"/var/log", "/b", false},
		// The deepest point, the last mounted at it.
		{"/var/lib", "/c", true},
		{"/var/lib/kubelet", "/c", true},
		{"/var/libx", "/b", false},
	}
	for _, tt := range tests {
		m, ok := Containing(mounts, tt.path)
		if !ok || m.Root != tt.wantRoot || m.Shared() != tt.shared {
			t.Errorf("Containing(%s) = %+v, %v; want the mount of root %s, shared %v", tt.path, m, ok, tt.wantRoot, tt.shared)
		}
	}
	if m, ok := Containing(mounts[1:2], "/etc"); ok {
		t.Errorf("Containing(/etc) found %+v in a table without /", m)
	}
}
