package cri

import (
	"errors"
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/nodelet/nodelet/pkg/mountinfo"
)

// shareRootDir makes the root directory a shared mount, recursively, as
// the kubelet makes its own at start. A container mount whose propagation
// is HostToContainer or Bidirectional needs its source on a shared mount,
// and containerd refuses the container otherwise ("… is mounted on / but it
// is not a shared mount"): a CSI node plugin's mount of the root directory,
// an emptyDir that a privileged container mounts a file system into. When
// the mount the directory lies on is not shared, the directory is bound
// onto itself first, so that only it is made shared, not the host's mount.
func shareRootDir(dir string) error {
	dir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return fmt.Errorf("share root directory: %w", err)
	}
	mounts, err := mountinfo.Read()
	if err != nil {
		return fmt.Errorf("share root directory %s: %w", dir, err)
	}
	on, ok := mountinfo.Containing(mounts, dir)
	if !ok {
		return fmt.Errorf("share root directory %s: no mount holds it", dir)
	}
	if on.Shared() {
		return nil
	}
	if on.Point != dir {
		if err := unix.Mount(dir, dir, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("share root directory: bind %s onto itself: %w", dir, err)
		}
	}
	if err := unix.Mount("", dir, "", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("share root directory: make %s shared: %w", dir, err)
	}
	return nil
}

// unshareRootDir undoes shareRootDir's binding of the root directory onto
// itself, by whichever agent made it (one killed before it could undo it
// too), so that an agent that stops and leaves no pod's volume behind
// leaves the directory as it found it. It unmounts nothing else: a mount
// at the directory that is not a binding of it onto itself (a disk of its
// own) stays, and so does the binding while anything is mounted below it,
// which pods still use.
func unshareRootDir(dir string) error {
	dir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return fmt.Errorf("unshare root directory: %w", err)
	}
	mounts, err := mountinfo.Read()
	if err != nil {
		return fmt.Errorf("unshare root directory %s: %w", dir, err)
	}
	if !boundOntoItself(mounts, dir) {
		return nil
	}
	if below, err := mountinfo.Under(dir); err != nil || len(below) > 0 {
		return err
	}
	err = unix.Unmount(dir, unix.UMOUNT_NOFOLLOW)
	if errors.Is(err, unix.EBUSY) {
		// A file the agent's other loops still hold open there (a
		// checkpoint being written, a socket not yet closed): the binding
		// leaves the directory now and goes once they close it. The same
		// file system lies beneath, so what they write still lands in it.
		// Checked again first, so that no mount made meanwhile below it is
		// taken along.
		if below, err := mountinfo.Under(dir); err != nil || len(below) > 0 {
			return err
		}
		err = unix.Unmount(dir, unix.UMOUNT_NOFOLLOW|unix.MNT_DETACH)
	}
	if err != nil {
		return fmt.Errorf("unshare root directory: unmount %s: %w", dir, err)
	}
	return nil
}

// boundOntoItself says whether the topmost mount at dir binds dir itself:
// the same file system as the mount beneath it, showing the directory
// that the mount beneath shows at dir.
func boundOntoItself(mounts []mountinfo.Mount, dir string) bool {
	top := -1
	for i, m := range mounts {
		if m.Point == dir {
			top = i
		}
	}
	if top < 0 {
		return false
	}
	beneath, ok := mountinfo.Containing(mounts[:top], dir)
	if !ok {
		return false
	}
	rel, err := filepath.Rel(beneath.Point, dir)
	if err != nil {
		return false
	}
	m := mounts[top]
	return m.Major == beneath.Major && m.Minor == beneath.Minor && m.Root == filepath.Join(beneath.Root, rel)
}
