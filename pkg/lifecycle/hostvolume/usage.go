package hostvolume

import (
	"path/filepath"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/stats"
)

// VolumeUsage is what one emptyDir volume of a pod takes on the node's
// filesystem.
type VolumeUsage struct {
	Name        string
	Bytes       uint64 // allocated blocks, as du counts them
	Inodes      uint64
	MemoryBased bool // medium Memory: on tmpfs, not the node's disk
	// Fs is the filesystem the volume is on (the node's disk, or its own
	// tmpfs), nil when it cannot be read.
	Fs *FsCapacity
}

// FsCapacity is the size of a filesystem and what is left of it.
type FsCapacity struct {
	CapacityBytes, AvailableBytes, Inodes, InodesFree uint64
}

// fsCapacity reads the filesystem that holds dir.
func fsCapacity(dir string) *FsCapacity {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return nil
	}
	// Block counts are in fragment units; older kernels leave it zero.
	unit := uint64(st.Frsize)
	if unit == 0 {
		unit = uint64(st.Bsize)
	}
	return &FsCapacity{CapacityBytes: st.Blocks * unit, AvailableBytes: st.Bavail * unit, Inodes: st.Files, InodesFree: st.Ffree}
}

// Usage walks the pod's emptyDir volumes, as the kubelet measures them for
// ephemeral storage. A volume not set up yet counts nothing.
func (m *Manager) Usage(pod *corev1.Pod) []VolumeUsage {
	root, err := m.volumesDir(pod)
	if err != nil {
		return nil
	}
	var out []VolumeUsage
	for _, v := range pod.Spec.Volumes {
		if v.EmptyDir == nil {
			continue
		}
		u := VolumeUsage{Name: v.Name, MemoryBased: v.EmptyDir.Medium == corev1.StorageMediumMemory}
		dir := filepath.Join(root, pluginEmptyDir, v.Name)
		u.Bytes, u.Inodes = stats.DirUsage(dir)
		u.Fs = fsCapacity(dir)
		out = append(out, u)
	}
	return out
}
