package process

import (
	"context"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodelet/nodelet/pkg/provider"
	"github.com/nodelet/nodelet/pkg/providers/process/sandbox"
)

var _ provider.StatsProvider = (*Provider)(nil)

// PodStats samples the cgroups of every pod that has a sandbox and of its
// running containers. A pod without cgroups (a host without writable
// cgroups) is left out: there is nothing true to say about it.
func (p *Provider) PodStats(ctx context.Context) ([]statsv1alpha1.PodStats, error) {
	sandboxes, err := p.sandboxes.Sandboxes(ctx)
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	out := make([]statsv1alpha1.PodStats, 0, len(sandboxes))
	for _, sb := range sandboxes {
		u, err := sb.Usage()
		if err != nil {
			continue
		}
		spec := sb.Spec()
		ps := statsv1alpha1.PodStats{
			PodRef: statsv1alpha1.PodReference{Name: spec.Name, Namespace: spec.Namespace, UID: string(spec.UID)},
			CPU:    cpuStats(u.Pod),
			Memory: memoryStats(u.Pod),
		}
		if pod, err := p.GetPod(ctx, spec.Namespace, spec.Name); err == nil && pod.UID == spec.UID {
			if pod.Status.StartTime != nil {
				ps.StartTime = *pod.Status.StartTime
			}
			volumes, ephemeral := p.PodStorage(pod, u.Pod.At)
			ps.VolumeStats, ps.EphemeralStorage = volumes, &ephemeral
		}
		for name, cu := range u.Containers {
			cs := statsv1alpha1.ContainerStats{Name: name, CPU: cpuStats(cu), Memory: memoryStats(cu)}
			if st, ok := sb.Container(name); ok {
				cs.StartTime = metav1.NewTime(st.StartedAt)
			}
			ps.Containers = append(ps.Containers, cs)
		}
		slices.SortFunc(ps.Containers, func(a, b statsv1alpha1.ContainerStats) int { return strings.Compare(a.Name, b.Name) })
		out = append(out, ps)
	}
	return out, nil
}

func cpuStats(u sandbox.Usage) *statsv1alpha1.CPUStats {
	if !u.CPU {
		return nil
	}
	total := u.CPUUsageNanoSeconds
	return &statsv1alpha1.CPUStats{Time: metav1.NewTime(u.At), UsageNanoCores: u.CPUNanoCores, UsageCoreNanoSeconds: &total}
}

func memoryStats(u sandbox.Usage) *statsv1alpha1.MemoryStats {
	if !u.Memory {
		return nil
	}
	usage, ws, rss, faults, major := u.MemoryUsage, u.MemoryWorkingSet, u.MemoryRSS, u.PageFaults, u.MajorPageFaults
	return &statsv1alpha1.MemoryStats{
		Time: metav1.NewTime(u.At), UsageBytes: &usage, WorkingSetBytes: &ws, RSSBytes: &rss,
		PageFaults: &faults, MajorPageFaults: &major,
	}
}
