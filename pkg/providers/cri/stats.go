package cri

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodelet/nodelet/pkg/lifecycle"
	"github.com/nodelet/nodelet/pkg/provider"
	"github.com/nodelet/nodelet/pkg/stats"
)

var _ provider.StatsProvider = (*Provider)(nil)

// hostStats is where the provider reads the figures of its pods that
// the runtime's stats leave out (containerd reports no PSI on a hybrid
// cgroup v1 host, no pod network, no filesystem capacities), and the CPU
// rates it measures itself.
type hostStats struct {
	cgroups  stats.CgroupFS
	procRoot string
	rates    *stats.CPURates // nil: the runtime's rates stand
}

// podRateInterval is the shortest interval the pods' and containers' CPU
// rates are measured over. Every client of the summary (the eviction
// manager every few seconds, metrics-server, /stats/summary) samples the
// same counters; a container that sleeps most of each second can show
// no CPU at all between two samples a second or two apart.
const podRateInterval = 10 * time.Second

func newHostStats(cgroupRoot, procRoot string) hostStats {
	return hostStats{cgroups: stats.CgroupFS{Root: cgroupRoot}, procRoot: procRoot,
		rates: &stats.CPURates{MinInterval: podRateInterval}}
}

// PodStats asks the runtime for the stats of the node's pod sandboxes and
// keeps those of each pod's current sandbox and of its running containers,
// completed from the host as the kubelet completes the runtime's: CPU
// rates, pressure stalls, the pod's network, the filesystems its
// containers' layers, logs and volumes are on.
func (p *Provider) PodStats(ctx context.Context) ([]statsv1alpha1.PodStats, error) {
	rs, is, err := p.runtime.conn.services(ctx)
	if err != nil {
		return nil, err
	}
	list, err := rs.ListPodSandboxStats(ctx, &runtimeapi.PodSandboxStatsFilter{LabelSelector: nodeSelector(p.opts.NodeName)})
	if err != nil {
		return nil, fmt.Errorf("list pod sandbox stats: %w", err)
	}
	now := metav1.NewTime(p.opts.Clock.Now())
	fs := p.filesystems(ctx, is, now)
	out := make([]statsv1alpha1.PodStats, 0, len(list))
	seen := map[string]bool{}
	for _, s := range list {
		sb := p.runtime.sandbox(types.UID(s.GetAttributes().GetMetadata().GetUid()))
		if sb == nil || sb.id != s.GetAttributes().GetId() {
			continue // an old sandbox of the pod, or one not listed yet
		}
		ps, ids := sb.podStats(s)
		if pod, err := p.GetPod(ctx, ps.PodRef.Namespace, ps.PodRef.Name); err == nil && string(pod.UID) == ps.PodRef.UID {
			p.completeFromHost(&ps, ids, sb, cgroupParent(pod), fs, now)
			// The pod's ephemeral storage: its emptyDirs on the node's
			// disk and its containers' writable layers and logs.
			volumes, ephemeral := p.PodStorage(pod, now.Time)
			for _, c := range ps.Containers {
				for _, f := range []*statsv1alpha1.FsStats{c.Rootfs, c.Logs} {
					if f != nil && f.UsedBytes != nil {
						*ephemeral.UsedBytes += *f.UsedBytes
					}
					if f != nil && f.InodesUsed != nil {
						*ephemeral.InodesUsed += *f.InodesUsed
					}
				}
			}
			withCapacity(&ephemeral, fs.node)
			ps.VolumeStats, ps.EphemeralStorage = volumes, &ephemeral
		}
		seen[sb.id] = true
		for _, id := range ids {
			seen[id] = true
		}
		out = append(out, ps)
	}
	if r := p.hostStats.rates; r != nil {
		r.Forget(func(key string) bool { return seen[key] })
	}
	return out, nil
}

// podFilesystems are the filesystems the pods' storage is on, each nil
// where it cannot be read.
type podFilesystems struct {
	node  *statsv1alpha1.FsStats // the agent's root dir: volumes, ephemeral storage
	image *statsv1alpha1.FsStats // the runtime's image filesystem: writable layers
	logs  *statsv1alpha1.FsStats // the pods' log directory
}

func (p *Provider) filesystems(ctx context.Context, is internalapi.ImageManagerService, now metav1.Time) podFilesystems {
	var fs podFilesystems
	if p.opts.RootDir != "" {
		fs.node, _ = stats.Statfs(p.opts.RootDir, now)
	}
	fs.logs, _ = stats.Statfs(p.runtime.node.PodLogsDir, now)
	if mp := imageFsMountpoint(ctx, is); mp != "" {
		fs.image, _ = stats.Statfs(mp, now)
	}
	if fs.image == nil {
		fs.image = fs.node
	}
	return fs
}

var _ provider.ImageFsStatsProvider = (*Provider)(nil)

// ImageFsStats reports the runtime's image filesystem as the kubelet
// does: the runtime's own usage of it, on the size of the filesystem its
// mountpoint is on; the containers' writable layers on the one the runtime
// names for them, else on the image filesystem.
func (p *Provider) ImageFsStats(ctx context.Context) (imageFs, containerFs *statsv1alpha1.FsStats, err error) {
	_, is, err := p.runtime.conn.services(ctx)
	if err != nil {
		return nil, nil, err
	}
	info, err := is.ImageFsInfo(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("image filesystem info: %w", err)
	}
	if len(info.GetImageFilesystems()) == 0 {
		return nil, nil, errors.New("the runtime reports no image filesystem")
	}
	if imageFs, err = runtimeFs(info.GetImageFilesystems()[0]); err != nil {
		return nil, nil, err
	}
	containerFs = imageFs
	if cfs := info.GetContainerFilesystems(); len(cfs) > 0 {
		if containerFs, err = runtimeFs(cfs[0]); err != nil {
			return nil, nil, err
		}
	}
	return imageFs, containerFs, nil
}

// runtimeFs is what the runtime uses of a filesystem, with its size.
func runtimeFs(u *runtimeapi.FilesystemUsage) (*statsv1alpha1.FsStats, error) {
	fs, err := stats.Statfs(u.GetFsId().GetMountpoint(), metav1.NewTime(time.Unix(0, u.GetTimestamp())))
	if err != nil {
		return nil, err
	}
	fs.UsedBytes, fs.InodesUsed = nil, nil
	if v := u.GetUsedBytes(); v != nil {
		fs.UsedBytes = &v.Value
	}
	if v := u.GetInodesUsed(); v != nil {
		fs.InodesUsed = &v.Value
	}
	return fs, nil
}

// imageFsMountpoint asks the runtime where it keeps images ("" when it
// does not say).
func imageFsMountpoint(ctx context.Context, is internalapi.ImageManagerService) string {
	if is == nil {
		return ""
	}
	info, err := is.ImageFsInfo(ctx)
	if err != nil || len(info.GetImageFilesystems()) == 0 {
		return ""
	}
	return info.GetImageFilesystems()[0].GetFsId().GetMountpoint()
}

// withCapacity gives a usage the capacity figures of the filesystem it is
// on, as the kubelet reports each volume, layer and log.
func withCapacity(f *statsv1alpha1.FsStats, on *statsv1alpha1.FsStats) {
	if f == nil || on == nil {
		return
	}
	f.CapacityBytes, f.AvailableBytes, f.Inodes, f.InodesFree = on.CapacityBytes, on.AvailableBytes, on.Inodes, on.InodesFree
}

// completeFromHost adds to a pod's stats what the host tells and the
// runtime did not: the CPU rates measured between this call and the last
// (a runtime's own rate is over an interval of its choosing, and
// containerd's is 0 when another client asked last), the pressure stalls
// of the pod's and containers' cgroups, the sandbox's network, and the
// filesystems of the containers' layers and logs.
// ids are the runtime IDs of the containers in ps, by name.
func (p *Provider) completeFromHost(ps *statsv1alpha1.PodStats, ids map[string]string, sb *criSandbox, podCgroup string, fs podFilesystems, now metav1.Time) {
	h := &p.hostStats
	h.addCPURate(sb.id, ps.CPU)
	h.addPressure(podCgroup, ps.CPU, ps.Memory, &ps.IO, now)
	if ps.Network == nil {
		if pids, err := h.cgroups.Procs(podCgroup + "/" + sb.id); err == nil && len(pids) > 0 {
			ps.Network, _ = stats.ProcessNetwork(h.procRoot, pids[0], now)
		}
	}
	for i := range ps.Containers {
		c := &ps.Containers[i]
		id := ids[c.Name]
		h.addCPURate(id, c.CPU)
		h.addPressure(podCgroup+"/"+id, c.CPU, c.Memory, &c.IO, now)
		withCapacity(c.Rootfs, fs.image)
		if sb.logDir != "" {
			used, inodes := stats.DirUsage(filepath.Join(sb.logDir, c.Name))
			logs := &statsv1alpha1.FsStats{Time: now, UsedBytes: &used, InodesUsed: &inodes}
			withCapacity(logs, fs.logs)
			c.Logs = logs
		}
	}
}

// addCPURate sets the rate measured since the previous call where the
// runtime gave the cumulative usage.
func (h *hostStats) addCPURate(id string, cpu *statsv1alpha1.CPUStats) {
	if cpu == nil || cpu.UsageCoreNanoSeconds == nil || id == "" || h.rates == nil {
		return
	}
	if rate, ok := h.rates.Rate(id, cpu.Time.Time, *cpu.UsageCoreNanoSeconds); ok {
		cpu.UsageNanoCores = &rate
	}
}

// addPressure sets the pressure stalls of the cgroup where the runtime
// gave none.
func (h *hostStats) addPressure(cgroup string, cpu *statsv1alpha1.CPUStats, memory *statsv1alpha1.MemoryStats, io **statsv1alpha1.IOStats, now metav1.Time) {
	cpuPSI, memPSI, ioPSI := h.cgroups.Pressure(cgroup)
	if cpu != nil && cpu.PSI == nil {
		cpu.PSI = cpuPSI
	}
	if memory != nil && memory.PSI == nil {
		memory.PSI = memPSI
	}
	if *io == nil && ioPSI != nil {
		*io = &statsv1alpha1.IOStats{Time: now, PSI: ioPSI}
	}
}

// sandbox returns the current sandbox of a pod, or nil.
func (r *criRuntime) sandbox(uid types.UID) *criSandbox {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sandboxes[uid]
}

// podStats turns the runtime's stats of the sandbox into the summary's,
// keeping the containers the snapshot has as running, and returns the
// runtime IDs of those it kept by name (the runtime lists a restarted
// container's earlier instances under the same name).
func (s *criSandbox) podStats(st *runtimeapi.PodSandboxStats) (statsv1alpha1.PodStats, map[string]string) {
	md := st.GetAttributes().GetMetadata()
	linux := st.GetLinux()
	ps := statsv1alpha1.PodStats{
		PodRef:    statsv1alpha1.PodReference{Name: md.GetName(), Namespace: md.GetNamespace(), UID: md.GetUid()},
		StartTime: metav1.NewTime(s.created),
		CPU:       criCPU(linux.GetCpu()),
		Memory:    criMemory(linux.GetMemory()),
		IO:        criIO(linux.GetIo()),
	}
	if n := linux.GetProcess().GetProcessCount(); n != nil {
		ps.ProcessStats = &statsv1alpha1.ProcessStats{ProcessCount: &n.Value}
	}
	ids := map[string]string{}
	for _, c := range linux.GetContainers() {
		name := c.GetAttributes().GetMetadata().GetName()
		latest := s.latest(name)
		if latest == nil || latest.id != c.GetAttributes().GetId() || latest.status.State != lifecycle.StateRunning {
			continue
		}
		ids[name] = latest.id
		cs := statsv1alpha1.ContainerStats{
			Name:      name,
			StartTime: metav1.NewTime(latest.status.StartedAt),
			CPU:       criCPU(c.GetCpu()),
			Memory:    criMemory(c.GetMemory()),
			IO:        criIO(c.GetIo()),
		}
		if l := c.GetWritableLayer(); l != nil {
			cs.Rootfs = criFilesystem(l)
		}
		ps.Containers = append(ps.Containers, cs)
	}
	slices.SortFunc(ps.Containers, func(a, b statsv1alpha1.ContainerStats) int { return strings.Compare(a.Name, b.Name) })
	return ps, ids
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
	out.PSI = criPSI(c.GetPsi())
	return out
}

func criIO(io *runtimeapi.IoUsage) *statsv1alpha1.IOStats {
	if io.GetPsi() == nil {
		return nil
	}
	return &statsv1alpha1.IOStats{Time: metav1.NewTime(time.Unix(0, io.Timestamp)), PSI: criPSI(io.GetPsi())}
}

// criPSI converts the runtime's pressure stalls (both in nanoseconds).
func criPSI(p *runtimeapi.PsiStats) *statsv1alpha1.PSIStats {
	if p == nil {
		return nil
	}
	data := func(d *runtimeapi.PsiData) statsv1alpha1.PSIData {
		return statsv1alpha1.PSIData{Total: d.GetTotal(), Avg10: d.GetAvg10(), Avg60: d.GetAvg60(), Avg300: d.GetAvg300()}
	}
	return &statsv1alpha1.PSIStats{Full: data(p.GetFull()), Some: data(p.GetSome())}
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
	out.PSI = criPSI(m.GetPsi())
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
// layout), with what each wrote to its writable layer and the device of
// the runtime's filesystem, where the layers are.
func (p *Provider) ContainerCgroups(ctx context.Context) ([]provider.ContainerCgroup, error) {
	pods, err := p.GetPods(ctx)
	if err != nil {
		return nil, err
	}
	written := map[string]*uint64{}
	var device string
	if rs, is, err := p.runtime.conn.services(ctx); err == nil {
		if list, err := rs.ListContainerStats(ctx, &runtimeapi.ContainerStatsFilter{LabelSelector: nodeSelector(p.opts.NodeName)}); err == nil {
			for _, s := range list {
				if v := s.GetWritableLayer().GetUsedBytes(); v != nil {
					written[s.GetAttributes().GetId()] = &v.Value
				}
			}
		}
		device = blockDevice(imageFsMountpoint(ctx, is))
	}
	var out []provider.ContainerCgroup
	for _, pod := range pods {
		sb := p.runtime.sandbox(pod.UID)
		if sb == nil {
			continue
		}
		podCg := cgroupParent(pod)
		out = append(out, provider.ContainerCgroup{Namespace: pod.Namespace, Pod: pod.Name, Container: provider.SandboxContainer,
			ID: sb.id, Cgroup: podCg + "/" + sb.id, StartTime: sb.created})
		containers := append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...)
		for _, c := range containers {
			latest := sb.latest(c.Name)
			if latest == nil || latest.status.State != lifecycle.StateRunning {
				continue
			}
			out = append(out, provider.ContainerCgroup{Namespace: pod.Namespace, Pod: pod.Name, Container: c.Name,
				ID: latest.id, Image: c.Image, Cgroup: podCg + "/" + latest.id, StartTime: latest.status.StartedAt,
				WritableLayerBytes: written[latest.id], FsDevice: device})
		}
	}
	return out, nil
}

// blockDevice is the "major:minor" of the device the filesystem holding
// dir is on, or "" (no dir, or a filesystem without a device).
func blockDevice(dir string) string {
	if dir == "" {
		return ""
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return ""
	}
	major, minor := unix.Major(st.Dev), unix.Minor(st.Dev)
	if major == 0 {
		return "" // an anonymous device: tmpfs, overlay
	}
	return fmt.Sprintf("%d:%d", major, minor)
}
