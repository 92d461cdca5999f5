package cri

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodelet/nodelet/pkg/lifecycle"
	"github.com/nodelet/nodelet/pkg/provider"
)

var _ provider.StatsProvider = (*Provider)(nil)

// PodStats asks the runtime for the stats of the node's pod sandboxes and
// keeps those of each pod's current sandbox and of its running containers.
func (p *Provider) PodStats(ctx context.Context) ([]statsv1alpha1.PodStats, error) {
	rs, _, err := p.runtime.conn.services(ctx)
	if err != nil {
		return nil, err
	}
	list, err := rs.ListPodSandboxStats(ctx, &runtimeapi.PodSandboxStatsFilter{LabelSelector: nodeSelector(p.opts.NodeName)})
	if err != nil {
		return nil, fmt.Errorf("list pod sandbox stats: %w", err)
	}
	out := make([]statsv1alpha1.PodStats, 0, len(list))
	for _, s := range list {
		sb := p.runtime.sandbox(types.UID(s.GetAttributes().GetMetadata().GetUid()))
		if sb == nil || sb.id != s.GetAttributes().GetId() {
			continue // an old sandbox of the pod, or one not listed yet
		}
		ps := sb.podStats(s)
		if pod, err := p.GetPod(ctx, ps.PodRef.Namespace, ps.PodRef.Name); err == nil && string(pod.UID) == ps.PodRef.UID {
			// The pod's ephemeral storage: its emptyDirs on the node's
			// disk and its containers' writable layers.
			volumes, ephemeral := p.PodStorage(pod, p.opts.Clock.Now())
			for _, c := range ps.Containers {
				if c.Rootfs != nil && c.Rootfs.UsedBytes != nil {
					*ephemeral.UsedBytes += *c.Rootfs.UsedBytes
				}
			}
			ps.VolumeStats, ps.EphemeralStorage = volumes, &ephemeral
		}
		out = append(out, ps)
	}
	return out, nil
}

// sandbox returns the current sandbox of a pod, or nil.
func (r *criRuntime) sandbox(uid types.UID) *criSandbox {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sandboxes[uid]
}

// podStats turns the runtime's stats of the sandbox into the summary's,
// keeping the containers the snapshot has as running.
func (s *criSandbox) podStats(st *runtimeapi.PodSandboxStats) statsv1alpha1.PodStats {
	md := st.GetAttributes().GetMetadata()
	linux := st.GetLinux()
	ps := statsv1alpha1.PodStats{
		PodRef:    statsv1alpha1.PodReference{Name: md.GetName(), Namespace: md.GetNamespace(), UID: md.GetUid()},
		StartTime: metav1.NewTime(s.created),
		CPU:       criCPU(linux.GetCpu()),
		Memory:    criMemory(linux.GetMemory()),
	}
	if n := linux.GetProcess().GetProcessCount(); n != nil {
		ps.ProcessStats = &statsv1alpha1.ProcessStats{ProcessCount: &n.Value}
	}
	for _, c := range linux.GetContainers() {
		name := c.GetAttributes().GetMetadata().GetName()
		latest := s.latest(name)
		if latest == nil || latest.id != c.GetAttributes().GetId() || latest.status.State != lifecycle.StateRunning {
			continue
		}
		cs := statsv1alpha1.ContainerStats{
			Name:      name,
			StartTime: metav1.NewTime(latest.status.StartedAt),
			CPU:       criCPU(c.GetCpu()),
			Memory:    criMemory(c.GetMemory()),
		}
		if l := c.GetWritableLayer(); l != nil {
			cs.Rootfs = criFilesystem(l)
		}
		ps.Containers = append(ps.Containers, cs)
	}
	slices.SortFunc(ps.Containers, func(a, b statsv1alpha1.ContainerStats) int { return strings.Compare(a.Name, b.Name) })
	return ps
}

func criCPU(c *runtimeapi.CpuUsage) *statsv1alpha1.CPUStats {
	if c == nil {
		return nil
	}
	out := &statsv1alpha1.CPUStats{Time: metav1.NewTime(time.Unix(0, c.Timestamp))}
	if v := c.GetUsageCoreNanoSeconds(); v != nil {
		out.UsageCoreNanoSeconds = &v.Value
	}
	if v := c.GetUsageNanoCores(); v != nil {
		out.UsageNanoCores = &v.Value
	}
	return out
}

func criMemory(m *runtimeapi.MemoryUsage) *statsv1alpha1.MemoryStats {
	if m == nil {
		return nil
	}
	out := &statsv1alpha1.MemoryStats{Time: metav1.NewTime(time.Unix(0, m.Timestamp))}
	for dst, src := range map[**uint64]*runtimeapi.UInt64Value{
		&out.WorkingSetBytes: m.WorkingSetBytes, &out.AvailableBytes: m.AvailableBytes, &out.UsageBytes: m.UsageBytes,
		&out.RSSBytes: m.RssBytes, &out.PageFaults: m.PageFaults, &out.MajorPageFaults: m.MajorPageFaults,
	} {
		if src != nil {
			v := src.Value
			*dst = &v
		}
	}
	return out
}

func criFilesystem(f *runtimeapi.FilesystemUsage) *statsv1alpha1.FsStats {
	out := &statsv1alpha1.FsStats{Time: metav1.NewTime(time.Unix(0, f.Timestamp))}
	if v := f.GetUsedBytes(); v != nil {
		out.UsedBytes = &v.Value
	}
	if v := f.GetInodesUsed(); v != nil {
		out.InodesUsed = &v.Value
	}
	return out
}

var _ provider.ContainerCgroupsProvider = (*Provider)(nil)

// ContainerCgroups lists the running containers of the node's pods and
// each pod's sandbox ("POD"), in the cgroups the runtime made for them
// below the pod's (<pod cgroup>/<container ID>, containerd's cgroupfs
// layout), with what each wrote to its writable layer.
func (p *Provider) ContainerCgroups(ctx context.Context) ([]provider.ContainerCgroup, error) {
	pods, err := p.GetPods(ctx)
	if err != nil {
		return nil, err
	}
	written := map[string]*uint64{}
	if rs, _, err := p.runtime.conn.services(ctx); err == nil {
		if list, err := rs.ListContainerStats(ctx, &runtimeapi.ContainerStatsFilter{LabelSelector: nodeSelector(p.opts.NodeName)}); err == nil {
			for _, s := range list {
				if v := s.GetWritableLayer().GetUsedBytes(); v != nil {
					written[s.GetAttributes().GetId()] = &v.Value
				}
			}
		}
	}
	var out []provider.ContainerCgroup
	for _, pod := range pods {
		sb := p.runtime.sandbox(pod.UID)
		if sb == nil {
			continue
		}
		podCg := cgroupParent(pod)
		out = append(out, provider.ContainerCgroup{Namespace: pod.Namespace, Pod: pod.Name, Container: "POD",
			ID: sb.id, Cgroup: podCg + "/" + sb.id, StartTime: sb.created})
		containers := append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...)
		for _, c := range containers {
			latest := sb.latest(c.Name)
			if latest == nil || latest.status.State != lifecycle.StateRunning {
				continue
			}
			out = append(out, provider.ContainerCgroup{Namespace: pod.Namespace, Pod: pod.Name, Container: c.Name,
				ID: latest.id, Image: c.Image, Cgroup: podCg + "/" + latest.id, StartTime: latest.status.StartedAt,
				WritableLayerBytes: written[latest.id]})
		}
	}
	return out, nil
}
