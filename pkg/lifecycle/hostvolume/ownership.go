package hostvolume

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
)

// fsGroup is the pod's securityContext.fsGroup, if set.
func fsGroup(pod *corev1.Pod) *int64 {
	if sc := pod.Spec.SecurityContext; sc != nil {
		return sc.FSGroup
	}
	return nil
}

// SetOwnership gives the volume at dir to the pod's fsGroup as the
// kubelet does (setOwnership), for the volumes of other packages: a CSI
// volume whose driver leaves fsGroup to the node.
func SetOwnership(dir string, pod *corev1.Pod, readOnly bool) error {
	return setOwnership(dir, fsGroup(pod), readOnly)
}

// setOwnership gives a volume to the pod's fsGroup, as the kubelet does:
// every file and directory is group-owned by it and group-readable (and
// group-writable unless readOnly); directories also get the set-group-ID
// bit, so what the pod creates there stays in the group, and the search
// bit. Symbolic links are given the group but not a mode, which would
// change their target's.
func setOwnership(dir string, gid *int64, readOnly bool) error {
	if gid == nil {
		return nil
	}
	mask := os.FileMode(0o660)
	if readOnly {
		mask = 0o440
	}
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := os.Lchown(path, -1, int(*gid)); err != nil {
			return fmt.Errorf("fsGroup %d: %w", *gid, err)
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		m := mask
		if d.IsDir() {
			m |= os.ModeSetgid | 0o110
		}
		if err := os.Chmod(path, info.Mode()|m); err != nil {
			return fmt.Errorf("fsGroup %d: %w", *gid, err)
		}
		return nil
	})
}
