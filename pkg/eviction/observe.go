package eviction

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// observation is what one summary says of one signal.
type observation struct {
	available, capacity int64
	// time is when the figures were taken; zero when the stats do not say.
	time time.Time
}

type observations map[Signal]observation

// observe derives every signal the summary has figures for. Signals whose
// figures are missing are left out: their thresholds cannot be met.
func observe(s *statsv1alpha1.Summary) observations {
	obs := observations{}
	n := &s.Node
	// The kubelet counts the memory capacity as available plus working
	// set, so that a percentage threshold scales with what the pods and the
	// system can actually use.
	if m := n.Memory; m != nil && m.AvailableBytes != nil && m.WorkingSetBytes != nil {
		obs[SignalMemoryAvailable] = observation{int64(*m.AvailableBytes), int64(*m.AvailableBytes + *m.WorkingSetBytes), m.Time.Time}
	}
	observeFs(obs, n.Fs, SignalNodeFsAvailable, SignalNodeFsInodesFree)
	// Without a filesystem of its own, the runtime keeps its images on the
	// node's: imagefs is nodefs.
	imageFs := n.Fs
	if n.Runtime != nil && n.Runtime.ImageFs != nil {
		imageFs = n.Runtime.ImageFs
	}
	observeFs(obs, imageFs, SignalImageFsAvailable, SignalImageFsInodesFree)
	if r := n.Rlimit; r != nil && r.MaxPID != nil && r.NumOfRunningProcesses != nil {
		obs[SignalPIDAvailable] = observation{*r.MaxPID - *r.NumOfRunningProcesses, *r.MaxPID, r.Time.Time}
	}
	return obs
}

func observeFs(obs observations, fs *statsv1alpha1.FsStats, bytes, inodes Signal) {
	if fs == nil {
		return
	}
	if fs.AvailableBytes != nil && fs.CapacityBytes != nil {
		obs[bytes] = observation{int64(*fs.AvailableBytes), int64(*fs.CapacityBytes), fs.Time.Time}
	}
	if fs.InodesFree != nil && fs.Inodes != nil {
		obs[inodes] = observation{int64(*fs.InodesFree), int64(*fs.Inodes), fs.Time.Time}
	}
}

// quantity formats an amount of a signal's resource as the kubelet's
// messages do: bytes in binary units, counts in decimal ones.
func quantity(s Signal, n int64) *resource.Quantity {
	switch signalInfo[s].resource {
	case corev1.ResourceMemory, corev1.ResourceEphemeralStorage:
		return resource.NewQuantity(n, resource.BinarySI)
	}
	return resource.NewQuantity(n, resource.DecimalSI)
}

// podStatsByUID indexes a summary's pods.
func podStatsByUID(s *statsv1alpha1.Summary) map[string]*statsv1alpha1.PodStats {
	m := make(map[string]*statsv1alpha1.PodStats, len(s.Pods))
	for i := range s.Pods {
		m[s.Pods[i].PodRef.UID] = &s.Pods[i]
	}
	return m
}

// memoryUsage is the pod's working set, or its containers' together when
// the provider reports no pod figure.
func memoryUsage(ps *statsv1alpha1.PodStats) int64 {
	if m := ps.Memory; m != nil && m.WorkingSetBytes != nil {
		return int64(*m.WorkingSetBytes)
	}
	var sum int64
	for _, c := range ps.Containers {
		if m := c.Memory; m != nil && m.WorkingSetBytes != nil {
			sum += int64(*m.WorkingSetBytes)
		}
	}
	return sum
}

// diskUsage is the bytes (or, with inodes, the inodes) of the node's
// filesystems the pod uses: its ephemeral storage as the provider reports
// it, else its containers' writable layers and logs plus its local volumes.
func diskUsage(pod *corev1.Pod, ps *statsv1alpha1.PodStats, inodes bool) int64 {
	pick := func(fs *statsv1alpha1.FsStats) int64 {
		switch {
		case fs == nil:
			return 0
		case inodes && fs.InodesUsed != nil:
			return int64(*fs.InodesUsed)
		case !inodes && fs.UsedBytes != nil:
			return int64(*fs.UsedBytes)
		}
		return 0
	}
	if es := ps.EphemeralStorage; es != nil && (inodes && es.InodesUsed != nil || !inodes && es.UsedBytes != nil) {
		return pick(es)
	}
	var sum int64
	for _, c := range ps.Containers {
		sum += pick(c.Rootfs) + pick(c.Logs)
	}
	local := map[string]bool{}
	for _, v := range pod.Spec.Volumes {
		// The volumes the kubelet counts as the pod's local storage.
		if v.HostPath != nil || v.GitRepo != nil || v.ConfigMap != nil ||
			v.EmptyDir != nil && v.EmptyDir.Medium == corev1.StorageMediumDefault {
			local[v.Name] = true
		}
	}
	for _, v := range ps.VolumeStats {
		if local[v.Name] {
			sum += pick(&v.FsStats)
		}
	}
	return sum
}

// processCount is how many processes the pod runs.
func processCount(ps *statsv1alpha1.PodStats) int64 {
	if p := ps.ProcessStats; p != nil && p.ProcessCount != nil {
		return int64(*p.ProcessCount)
	}
	return 0
}
