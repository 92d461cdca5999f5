package lifecycle

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// PodStorage is what a pod's emptyDir volumes take on the node, in the
// summary API's terms: each volume's usage with the size of the
// filesystem it is on, and the disk-backed ones' total, the pod's ephemeral storage before its containers' own layers
// and logs.
func (m *Manager) PodStorage(pod *corev1.Pod, now time.Time) (volumes []statsv1alpha1.VolumeStats, ephemeral statsv1alpha1.FsStats) {
	t := metav1.NewTime(now)
	var used, inodes uint64
	for _, u := range m.parts.Volumes.Usage(pod) {
		b, n := u.Bytes, u.Inodes
		fs := statsv1alpha1.FsStats{Time: t, UsedBytes: &b, InodesUsed: &n}
		if c := u.Fs; c != nil {
			fs.CapacityBytes, fs.AvailableBytes, fs.Inodes, fs.InodesFree = &c.CapacityBytes, &c.AvailableBytes, &c.Inodes, &c.InodesFree
		}
		volumes = append(volumes, statsv1alpha1.VolumeStats{Name: u.Name, FsStats: fs})
		if !u.MemoryBased {
			used += b
			inodes += n
		}
	}
	return volumes, statsv1alpha1.FsStats{Time: t, UsedBytes: &used, InodesUsed: &inodes}
}
