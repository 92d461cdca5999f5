package cri

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodelet/nodelet/pkg/mountinfo"
)

func TestBoundOntoItself(t *testing.T) {
	root := mountinfo.Mount{Point: "/", Root: "/", Major: 8, Minor: 1}
	disk := mountinfo.Mount{Point: "/var/lib/kubelet", Root: "/", Major: 8, Minor: 2}
	tests := []struct {
		name   string
		mounts []mountinfo.Mount
		want   bool
	}{
		{"not a mount point", []mountinfo.Mount{root}, false},
		{"bound onto itself", []mountinfo.Mount{root, {Point: "/var/lib/kubelet", Root: "/var/lib/kubelet", Major: 8, Minor: 1}}, true},
		{"another directory bound there", []mountinfo.Mount{root, {Point: "/var/lib/kubelet", Root: "/srv/kubelet", Major: 8, Minor: 1}}, false},
		{"a disk of its own", []mountinfo.Mount{root, disk}, false},
		{"a disk bound onto itself", []mountinfo.Mount{root, disk, {Point: "/var/lib/kubelet", Root: "/", Major: 8, Minor: 2}}, true},
		{"the same directory of another device", []mountinfo.Mount{root, {Point: "/var/lib/kubelet", Root: "/var/lib/kubelet", Major: 8, Minor: 3}}, false},
		{"below a mount of its own", []mountinfo.Mount{root, {Point: "/var", Root: "/", Major: 8, Minor: 4},
			{Point: "/var/lib/kubelet", Root: "/lib/kubelet", Major: 8, Minor: 4}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := boundOntoItself(tt.mounts, "/var/lib/kubelet"); got != tt.want {
				t.Errorf("boundOntoItself = %v, want %v", got, tt.want)
			}
		})
	}
}

// privateMount mounts a private tmpfs at a new directory, so that what the
// test mounts below it neither depends on nor propagates to the host's
// mounts.
func privateMount(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	if err := unix.Mount("", dir, "", unix.MS_PRIVATE, ""); err != nil {
		t.Fatal(err)
	}
	return dir
}

func mountAt(t *testing.T, dir string) (mountinfo.Mount, bool) {
	t.Helper()
	mounts, err := mountinfo.Read()
	if err != nil {
		t.Fatal(err)
	}
	m, ok := mountinfo.Containing(mounts, dir)
	return m, ok && m.Point == dir
}

func TestShareRootDirMakesItsMountsPropagate(t *testing.T) {
	base := privateMount(t)
	root, peer := filepath.Join(base, "root"), filepath.Join(base, "peer")
	for _, d := range []string{root, peer} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := shareRootDir(root); err != nil {
		t.Fatal(err)
	}
	if m, ok := mountAt(t, root); !ok || !m.Shared() {
		t.Fatalf("after shareRootDir, the mount at %s is %+v (a mount point: %v), want a shared one", root, m, ok)
	}
	// A binding of the root directory made its slave sees what is mounted
	// below it, as a container's mount with HostToContainer propagation
	// does (a slave: its unmounts stay its own).
	if err := unix.Mount(root, peer, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(peer, unix.MNT_DETACH) })
	if err := unix.Mount("", peer, "", unix.MS_SLAVE, ""); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(root, "pods")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", sub, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	if _, ok := mountAt(t, filepath.Join(peer, "pods")); !ok {
		t.Errorf("a mount below %s did not propagate to its slave %s", root, peer)
	}
	if err := unix.Unmount(peer, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}

	// Again: nothing more is mounted.
	before, _ := mountinfo.Read()
	if err := shareRootDir(root); err != nil {
		t.Fatal(err)
	}
	if after, _ := mountinfo.Read(); len(after) != len(before) {
		t.Errorf("shareRootDir of a shared root directory mounted %d more", len(after)-len(before))
	}

	// The binding stays while something is mounted below it, and goes
	// once nothing is.
	if err := unshareRootDir(root); err != nil {
		t.Fatal(err)
	}
	if _, ok := mountAt(t, root); !ok {
		t.Fatalf("unshareRootDir unmounted %s with %s mounted below it", root, sub)
	}
	if err := unix.Unmount(sub, 0); err != nil {
		t.Fatal(err)
	}
	if err := unshareRootDir(root); err != nil {
		t.Fatal(err)
	}
	if m, ok := mountAt(t, root); ok {
		t.Errorf("after unshareRootDir, %s is still a mount point: %+v", root, m)
	}
	if err := os.Remove(sub); err != nil {
		t.Errorf("the root directory's content is not the directory's after the binding went: %v", err)
	}
}

func TestUnshareRootDirLeavesAFileSystemOfItsOwn(t *testing.T) {
	root := filepath.Join(privateMount(t), "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", root, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(root, unix.MNT_DETACH) })
	if err := shareRootDir(root); err != nil {
		t.Fatal(err)
	}
	if err := unshareRootDir(root); err != nil {
		t.Fatal(err)
	}
	m, ok := mountAt(t, root)
	if !ok || m.Root != "/" {
		t.Fatalf("unshareRootDir unmounted the root directory's own file system: %+v (a mount point: %v)", m, ok)
	}
	if !m.Shared() {
		t.Errorf("shareRootDir did not make the root directory's own file system shared: %+v", m)
	}
}

// An agent's other loops may still hold a file open in the root directory
// when the provider stops: the binding goes all the same (it was left
// busy, and the next test's removal of the directory failed).
func TestUnshareRootDirWhileAFileIsOpenInIt(t *testing.T) {
	root := filepath.Join(privateMount(t), "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := shareRootDir(root); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(root, unix.MNT_DETACH) })
	if _, ok := mountAt(t, root); !ok {
		t.Fatalf("shareRootDir did not bind %s onto itself", root)
	}
	f, err := os.Create(filepath.Join(root, "checkpoint"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unshareRootDir(root); err != nil {
		t.Fatal(err)
	}
	if m, ok := mountAt(t, root); ok {
		t.Fatalf("after unshareRootDir with a file open, %s is still a mount point: %+v", root, m)
	}
	if _, err := f.WriteString("kept"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(root, "checkpoint")); err != nil || string(got) != "kept" {
		t.Errorf("what was written through the open file after the binding went: %q, %v", got, err)
	}
}
