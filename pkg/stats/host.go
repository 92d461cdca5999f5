// Package stats owns the kubelet's usage figures of a node: the host's own
// (CPU, memory, swap, filesystems, process limits, network, read from procfs,
// the root cgroup and statfs), the summary that /stats/summary answers from
// them and the providers' pod figures, and the /metrics/resource exposition
// that metrics-server reads.
//
// It only reads the host and the figures it is handed; it never asks a
// runtime or the API server for anything, and never writes.
package stats

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/clock"
)

// HostOptions say where the host's figures are read. Zero values take the
// defaults given.
type HostOptions struct {
	// ProcRoot is where procfs is mounted (default /proc).
	ProcRoot string
	// CgroupRoot is where the cgroup v2 hierarchy is mounted (default
	// /sys/fs/cgroup). When it has memory.stat (cpu.stat), the node's memory
	// (CPU) figures are its root cgroup's, as the kubelet reports them;
	// otherwise (cgroup v1) they come from procfs.
	CgroupRoot string
	// RootDir is a directory on the node's filesystem (nodefs), normally the
	// agent's root dir (default /).
	RootDir string
	// ImageFsDir is a directory on the filesystem where the runtime keeps
	// images and container layers; empty reports no image filesystem.
	ImageFsDir string
	// Clock stamps the samples and times the CPU rate (default the real
	// clock).
	Clock clock.PassiveClock
	// SystemContainers are the node's system containers, reported with
	// the node (the kubelet's kubelet, runtime, pods and misc). One that
	// cannot be read is left out, as the kubelet leaves it.
	SystemContainers []SystemContainer
}

// SystemContainer is one of the node's system containers: a cgroup named
// by its path, or the cgroups a process runs in.
type SystemContainer struct {
	// Name is the summary's name for it (statsv1alpha1.SystemContainerKubelet, …).
	Name string
	// Cgroup is its path in every hierarchy; when empty, PID names the
	// process whose cgroups it is.
	Cgroup string
	PID    int
	// StartTime, when set, is reported instead of the cgroup's creation
	// (the agent's own start, as the kubelet reports its own).
	StartTime time.Time
}

// minRateInterval is the shortest interval the CPU rate is measured over:
// a sample taken sooner after the previous one (two scrapes at once) reports
// the rate measured last instead of a noisy one over a few milliseconds.
const minRateInterval = time.Second

// Host collects the figures of the machine the agent runs on. It is safe
// for concurrent use.
type Host struct {
	opts    HostOptions
	cgroups CgroupFS

	rates CPURates // of the node ("") and the system containers (by name)
}

// NewHost returns a collector of the host's figures; it reads nothing yet.
func NewHost(opts HostOptions) *Host {
	if opts.ProcRoot == "" {
		opts.ProcRoot = "/proc"
	}
	if opts.CgroupRoot == "" {
		opts.CgroupRoot = "/sys/fs/cgroup"
	}
	if opts.RootDir == "" {
		opts.RootDir = "/"
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &Host{opts: opts, cgroups: CgroupFS{Root: opts.CgroupRoot}}
}

// NodeStats samples the host as the node named nodeName. CPU, memory and
// the filesystems are required; the process limits and network figures
// are left out when they cannot be read. UsageNanoCores is the rate since
// an earlier call, so the first call leaves it out.
func (h *Host) NodeStats(ctx context.Context, nodeName string) (statsv1alpha1.NodeStats, error) {
	logger := klog.FromContext(ctx)
	now := h.opts.Clock.Now()
	ts := metav1.NewTime(now)

	cpu, bootTime, err := h.cpuStats(now)
	if err != nil {
		return statsv1alpha1.NodeStats{}, err
	}
	memory, swap, err := h.memoryStats(ts)
	if err != nil {
		return statsv1alpha1.NodeStats{}, err
	}
	nodeFs, err := statfs(h.opts.RootDir, ts)
	if err != nil {
		return statsv1alpha1.NodeStats{}, fmt.Errorf("node filesystem: %w", err)
	}
	node := statsv1alpha1.NodeStats{
		NodeName:  nodeName,
		StartTime: metav1.NewTime(bootTime),
		CPU:       cpu,
		Memory:    memory,
		Swap:      swap,
		Fs:        nodeFs,
		Rlimit:    h.rlimitStats(ts),
	}
	if h.opts.ImageFsDir != "" {
		imageFs, err := statfs(h.opts.ImageFsDir, ts)
		if err != nil {
			return statsv1alpha1.NodeStats{}, fmt.Errorf("image filesystem: %w", err)
		}
		// Container layers live with the images unless the runtime says
		// otherwise, as the kubelet assumes for runtimes that do not split.
		node.Runtime = &statsv1alpha1.RuntimeStats{ImageFs: imageFs, ContainerFs: imageFs}
	}
	h.addPressure(&node, ts)
	node.SystemContainers = h.systemContainers(ctx, now)
	if network, err := h.networkStats(ts); err != nil {
		logger.V(4).Info("Leaving the node's network out of its stats", "err", err)
	} else {
		node.Network = network
	}
	return node, nil
}

// addPressure adds the machine's pressure stalls (/proc/pressure, what
// the kernel counts for every task) to the node's CPU and memory, and as
// its I/O; a kernel without PSI (or booted with psi=0) reports none.
func (h *Host) addPressure(node *statsv1alpha1.NodeStats, ts metav1.Time) {
	read := func(resource string) *statsv1alpha1.PSIStats {
		psi, err := ReadPSI(filepath.Join(h.opts.ProcRoot, "pressure", resource))
		if err != nil {
			return nil
		}
		return psi
	}
	node.CPU.PSI, node.Memory.PSI = read("cpu"), read("memory")
	if io := read("io"); io != nil {
		node.IO = &statsv1alpha1.IOStats{Time: ts, PSI: io}
	}
}

// systemContainers samples the configured system containers. One that
// cannot be read (not made yet, a process in the root cgroup, whose
// figures would be the node's) is logged and left out.
func (h *Host) systemContainers(ctx context.Context, now time.Time) []statsv1alpha1.ContainerStats {
	logger := klog.FromContext(ctx)
	var out []statsv1alpha1.ContainerStats
	for _, sc := range h.opts.SystemContainers {
		s, err := h.systemContainer(sc, now)
		if err != nil {
			logger.V(4).Info("Leaving a system container out of the node's stats", "container", sc.Name, "err", err)
			continue
		}
		out = append(out, s)
	}
	return out
}

var errRootCgroup = errors.New("in the root cgroup, whose figures are the node's")

func (h *Host) systemContainer(sc SystemContainer, now time.Time) (statsv1alpha1.ContainerStats, error) {
	paths := Named(sc.Cgroup)
	if sc.Cgroup == "" {
		var err error
		paths, err = ProcessCgroups(filepath.Join(h.opts.ProcRoot, strconv.Itoa(sc.PID), "cgroup"))
		if err != nil {
			return statsv1alpha1.ContainerStats{}, err
		}
		// As the kubelet finds its own: one cgroup that accounts both
		// CPU and memory, and not the root, which accounts everything.
		if paths.CPU != paths.Memory {
			return statsv1alpha1.ContainerStats{}, fmt.Errorf("CPU accounted in cgroup %s but memory in %s", paths.CPU, paths.Memory)
		}
	}
	if paths.CPU == "/" || paths.Memory == "/" {
		return statsv1alpha1.ContainerStats{}, errRootCgroup
	}
	ts := metav1.NewTime(now)
	s, err := h.cgroups.read(paths, ts)
	if err != nil {
		return statsv1alpha1.ContainerStats{}, err
	}
	start := s.created
	if !sc.StartTime.IsZero() {
		start = sc.StartTime
	}
	usage := s.cpuUsage
	cpu := &statsv1alpha1.CPUStats{Time: ts, UsageCoreNanoSeconds: &usage, PSI: s.cpuPSI}
	if rate, ok := h.rates.Rate(sc.Name, now, usage); ok {
		cpu.UsageNanoCores = &rate
	}
	return statsv1alpha1.ContainerStats{
		Name:      sc.Name,
		StartTime: metav1.NewTime(start),
		CPU:       cpu,
		Memory:    s.memory,
		IO:        s.io,
	}, nil
}

// cpuStats returns the CPU usage and the boot time. The usage is the root
// cgroup's when cgroup v2 reports it, else the busy time of /proc/stat.
func (h *Host) cpuStats(now time.Time) (*statsv1alpha1.CPUStats, time.Time, error) {
	procUsage, bootTime, err := readProcStat(filepath.Join(h.opts.ProcRoot, "stat"))
	if err != nil {
		return nil, time.Time{}, err
	}
	usage := procUsage
	cg, err := readKeyValues(filepath.Join(h.opts.CgroupRoot, "cpu.stat"))
	switch {
	case err == nil:
		if usec, ok := cg["usage_usec"]; ok {
			usage = usec * uint64(time.Microsecond)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return nil, time.Time{}, err
	}

	cpu := &statsv1alpha1.CPUStats{Time: metav1.NewTime(now), UsageCoreNanoSeconds: &usage}
	if rate, ok := h.rates.Rate("", now, usage); ok {
		cpu.UsageNanoCores = &rate
	}
	return cpu, bootTime, nil
}

// memoryStats returns the memory and swap figures. With cgroup v2 they are
// the root cgroup's, the way cadvisor computes them for the kubelet's root
// container (usage is anon + file where the root has no memory.current);
// otherwise they come from /proc/meminfo and /proc/vmstat. The working set
// is the usage less the inactive file cache, which the kernel can reclaim
// at once; the available memory is what the working set leaves of the
// machine's.
func (h *Host) memoryStats(ts metav1.Time) (*statsv1alpha1.MemoryStats, *statsv1alpha1.SwapStats, error) {
	meminfo, err := readKeyValues(filepath.Join(h.opts.ProcRoot, "meminfo"))
	if err != nil {
		return nil, nil, err
	}
	capacity, ok := meminfo["MemTotal"]
	if !ok {
		return nil, nil, fmt.Errorf("%s: no MemTotal", filepath.Join(h.opts.ProcRoot, "meminfo"))
	}
	memory := &statsv1alpha1.MemoryStats{Time: ts}
	swap := &statsv1alpha1.SwapStats{Time: ts}
	var usage, inactiveFile, rss uint64
	var swapUsage *uint64

	cg, err := readKeyValues(filepath.Join(h.opts.CgroupRoot, "memory.stat"))
	switch {
	case err == nil:
		usage = cg["anon"] + cg["file"]
		if current, err := readUint(filepath.Join(h.opts.CgroupRoot, "memory.current")); err == nil {
			// A cgroup namespace's root is not the host's root: it has its own count.
			usage = current
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, nil, err
		}
		if current, err := readUint(filepath.Join(h.opts.CgroupRoot, "memory.swap.current")); err == nil {
			swapUsage = &current
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, nil, err
		}
		inactiveFile, rss = cg["inactive_file"], cg["anon"]
		memory.PageFaults, memory.MajorPageFaults = optional(cg, "pgfault"), optional(cg, "pgmajfault")
	case errors.Is(err, fs.ErrNotExist):
		usage = sub(capacity, meminfo["MemFree"])
		inactiveFile, rss = meminfo["Inactive(file)"], meminfo["AnonPages"]
		if vmstat, err := readKeyValues(filepath.Join(h.opts.ProcRoot, "vmstat")); err == nil {
			memory.PageFaults, memory.MajorPageFaults = optional(vmstat, "pgfault"), optional(vmstat, "pgmajfault")
		}
	default:
		return nil, nil, err
	}

	workingSet := sub(usage, inactiveFile)
	available := sub(capacity, workingSet)
	memory.UsageBytes, memory.WorkingSetBytes, memory.RSSBytes, memory.AvailableBytes = &usage, &workingSet, &rss, &available

	if swapUsage == nil {
		used := sub(meminfo["SwapTotal"], meminfo["SwapFree"])
		free := meminfo["SwapFree"]
		swapUsage, swap.SwapAvailableBytes = &used, &free
	}
	swap.SwapUsageBytes = swapUsage
	return memory, swap, nil
}

// rlimitStats returns the system-wide task limit (the lower of pid_max and
// threads-max, both of which bound it) and the number of tasks; a figure
// that cannot be read is left out.
func (h *Host) rlimitStats(ts metav1.Time) *statsv1alpha1.RlimitStats {
	rlimit := &statsv1alpha1.RlimitStats{Time: ts}
	for _, name := range []string{"pid_max", "threads-max"} {
		limit, err := readUint(filepath.Join(h.opts.ProcRoot, "sys", "kernel", name))
		if err != nil {
			continue
		}
		if v := int64(limit); rlimit.MaxPID == nil || v < *rlimit.MaxPID {
			rlimit.MaxPID = &v
		}
	}
	if n, err := readTaskCount(filepath.Join(h.opts.ProcRoot, "loadavg")); err == nil {
		rlimit.NumOfRunningProcesses = &n
	}
	return rlimit
}

// networkStats returns the counters of the host's interfaces, less the
// loopback and the host ends of containers' and bridges' virtual links
// (which count the pods' traffic twice). The interface of the default
// route is the node's main one.
func (h *Host) networkStats(ts metav1.Time) (*statsv1alpha1.NetworkStats, error) {
	ifaces, err := readNetDev(filepath.Join(h.opts.ProcRoot, "net", "dev"))
	if err != nil {
		return nil, err
	}
	main, _ := readDefaultRouteInterface(filepath.Join(h.opts.ProcRoot, "net", "route"))
	network := &statsv1alpha1.NetworkStats{Time: ts}
	for _, iface := range ifaces {
		if ignoredInterface(iface.Name) {
			continue
		}
		if iface.Name == main || main == "" && iface.Name == "eth0" {
			network.InterfaceStats = iface
		}
		network.Interfaces = append(network.Interfaces, iface)
	}
	return network, nil
}

// statfs returns the figures of the filesystem that holds dir.
func statfs(dir string, ts metav1.Time) (*statsv1alpha1.FsStats, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return nil, fmt.Errorf("statfs %s: %w", dir, err)
	}
	// Block counts are in fragment units; older kernels leave it zero.
	unit := uint64(st.Frsize)
	if unit == 0 {
		unit = uint64(st.Bsize)
	}
	capacity, available, used := st.Blocks*unit, st.Bavail*unit, sub(st.Blocks, st.Bfree)*unit
	inodes, inodesFree := st.Files, st.Ffree
	inodesUsed := sub(inodes, inodesFree)
	return &statsv1alpha1.FsStats{
		Time:           ts,
		CapacityBytes:  &capacity,
		AvailableBytes: &available,
		UsedBytes:      &used,
		Inodes:         &inodes,
		InodesFree:     &inodesFree,
		InodesUsed:     &inodesUsed,
	}, nil
}

// sub is a − b, or 0 when b is larger (figures read at slightly different
// moments).
func sub(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}

func optional(m map[string]uint64, key string) *uint64 {
	v, ok := m[key]
	if !ok {
		return nil
	}
	return &v
}
