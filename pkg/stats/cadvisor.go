package stats

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/provider"
)

// CadvisorOptions configure CadvisorHandler. Zero values take defaults.
type CadvisorOptions struct {
	// CgroupRoot is where the cgroup hierarchies are mounted (default
	// /sys/fs/cgroup): cgroup v2's, or cgroup v1's one per controller.
	CgroupRoot string
	// ProcRoot is the proc filesystem (default /proc).
	ProcRoot string
	Clock    clock.PassiveClock
}

// CadvisorHandler serves the containers' metrics as the kubelet's
// /metrics/cadvisor does, in cAdvisor's names and labels (container, id,
// image, name, namespace, pod): CPU, memory, block I/O, processes, file
// descriptors, limits and start times, read from each container's cgroup
// and its processes. list names the containers.
func CadvisorHandler(list func(ctx context.Context) ([]provider.ContainerCgroup, error), opts CadvisorOptions) http.Handler {
	if opts.CgroupRoot == "" {
		opts.CgroupRoot = "/sys/fs/cgroup"
	}
	if opts.ProcRoot == "" {
		opts.ProcRoot = "/proc"
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reg := prometheus.NewRegistry()
		reg.MustRegister(&cadvisorCollector{ctx: r.Context(), list: list, opts: opts})
		promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}).ServeHTTP(w, r)
	})
}

var cadvisorLabels = []string{"container", "id", "image", "name", "namespace", "pod"}

// cadvisorMetric is one metric: its description and whether it counts.
type cadvisorMetric struct {
	desc    *prometheus.Desc
	counter bool
}

func metric(name, help string, counter bool, extra ...string) cadvisorMetric {
	return cadvisorMetric{desc: prometheus.NewDesc(name, help, append(append([]string{}, cadvisorLabels...), extra...), nil), counter: counter}
}

var cadvisorMetrics = struct {
	cpuUsage, cpuUser, cpuSystem                               cadvisorMetric
	cpuPeriod, cpuShares, cpuQuota                             cadvisorMetric
	memUsage, memMaxUsage, memWorkingSet, memCache, memRSS     cadvisorMetric
	memMappedFile, memSwap, memFailcnt, memFailures, oomEvents cadvisorMetric
	memLimit, memReservation, memSwapLimit                     cadvisorMetric
	blkioUsage, fsReadsBytes, fsWritesBytes, fsReads, fsWrites cadvisorMetric
	fsUsage, fsLimit, fsInodesFree, fsInodes                   cadvisorMetric
	fsReadsMerged, fsSectorReads, fsReadSeconds                cadvisorMetric
	fsWritesMerged, fsSectorWrites, fsWriteSeconds             cadvisorMetric
	fsIOCurrent, fsIOTime, fsIOTimeWeighted                    cadvisorMetric
	netRxBytes, netRxPackets, netRxDropped, netRxErrors        cadvisorMetric
	netTxBytes, netTxPackets, netTxDropped, netTxErrors        cadvisorMetric
	processes, threads, threadsMax, fds, sockets, ulimitsSoft  cadvisorMetric
	lastSeen, startTime                                        cadvisorMetric
}{
	cpuUsage:       metric("container_cpu_usage_seconds_total", "Cumulative cpu time consumed in seconds.", true, "cpu"),
	cpuUser:        metric("container_cpu_user_seconds_total", "Cumulative user cpu time consumed in seconds.", true),
	cpuSystem:      metric("container_cpu_system_seconds_total", "Cumulative system cpu time consumed in seconds.", true),
	cpuPeriod:      metric("container_spec_cpu_period", "CPU period of the container.", false),
	cpuShares:      metric("container_spec_cpu_shares", "CPU share of the container.", false),
	cpuQuota:       metric("container_spec_cpu_quota", "CPU quota of the container.", false),
	memUsage:       metric("container_memory_usage_bytes", "Current memory usage in bytes, including all memory regardless of when it was accessed", false),
	memMaxUsage:    metric("container_memory_max_usage_bytes", "Maximum memory usage recorded in bytes", false),
	memWorkingSet:  metric("container_memory_working_set_bytes", "Current working set in bytes.", false),
	memCache:       metric("container_memory_cache", "Number of bytes of page cache memory.", false),
	memRSS:         metric("container_memory_rss", "Size of RSS in bytes.", false),
	memMappedFile:  metric("container_memory_mapped_file", "Size of memory mapped files in bytes.", false),
	memSwap:        metric("container_memory_swap", "Container swap usage in bytes.", false),
	memFailcnt:     metric("container_memory_failcnt", "Number of memory usage hits limits", true),
	memFailures:    metric("container_memory_failures_total", "Cumulative count of memory allocation failures.", true, "failure_type", "scope"),
	oomEvents:      metric("container_oom_events_total", "Count of out of memory events observed for the container", true),
	memLimit:       metric("container_spec_memory_limit_bytes", "Memory limit for the container.", false),
	memReservation: metric("container_spec_memory_reservation_limit_bytes", "Memory reservation limit for the container.", false),
	memSwapLimit:   metric("container_spec_memory_swap_limit_bytes", "Memory swap limit for the container.", false),
	blkioUsage:     metric("container_blkio_device_usage_total", "Blkio Device bytes usage", true, "device", "major", "minor", "operation"),
	fsReadsBytes:   metric("container_fs_reads_bytes_total", "Cumulative count of bytes read", true, "device"),
	fsWritesBytes:  metric("container_fs_writes_bytes_total", "Cumulative count of bytes written", true, "device"),
	fsReads:        metric("container_fs_reads_total", "Cumulative count of reads completed", true, "device"),
	fsWrites:       metric("container_fs_writes_total", "Cumulative count of writes completed", true, "device"),
	fsUsage:        metric("container_fs_usage_bytes", "Number of bytes that are consumed by the container on this filesystem.", false, "device"),
	// The device's own figures (statfs and /proc/diskstats), which
	// cAdvisor reports for the root container.
	fsLimit:          metric("container_fs_limit_bytes", "Size of the filesystem on the device, in bytes.", false, "device"),
	fsInodesFree:     metric("container_fs_inodes_free", "Inodes left free on the filesystem.", false, "device"),
	fsInodes:         metric("container_fs_inodes_total", "Inodes the filesystem has.", false, "device"),
	fsReadsMerged:    metric("container_fs_reads_merged_total", "Reads the device merged with adjacent ones.", true, "device"),
	fsSectorReads:    metric("container_fs_sector_reads_total", "Sectors the device completed reading.", true, "device"),
	fsReadSeconds:    metric("container_fs_read_seconds_total", "Seconds the device spent reading.", true, "device"),
	fsWritesMerged:   metric("container_fs_writes_merged_total", "Writes the device merged with adjacent ones.", true, "device"),
	fsSectorWrites:   metric("container_fs_sector_writes_total", "Sectors the device completed writing.", true, "device"),
	fsWriteSeconds:   metric("container_fs_write_seconds_total", "Seconds the device spent writing.", true, "device"),
	fsIOCurrent:      metric("container_fs_io_current", "I/Os in progress on the device.", false, "device"),
	fsIOTime:         metric("container_fs_io_time_seconds_total", "Seconds the device spent doing I/O.", true, "device"),
	fsIOTimeWeighted: metric("container_fs_io_time_weighted_seconds_total", "Seconds the device spent doing I/O, weighted by the I/Os in progress.", true, "device"),
	// A pod's network, reported for its sandbox (container "POD").
	netRxBytes:   metric("container_network_receive_bytes_total", "Bytes received on the interface.", true, "interface"),
	netRxPackets: metric("container_network_receive_packets_total", "Packets received on the interface.", true, "interface"),
	netRxDropped: metric("container_network_receive_packets_dropped_total", "Received packets the interface dropped.", true, "interface"),
	netRxErrors:  metric("container_network_receive_errors_total", "Errors receiving on the interface.", true, "interface"),
	netTxBytes:   metric("container_network_transmit_bytes_total", "Bytes sent on the interface.", true, "interface"),
	netTxPackets: metric("container_network_transmit_packets_total", "Packets sent on the interface.", true, "interface"),
	netTxDropped: metric("container_network_transmit_packets_dropped_total", "Packets to send the interface dropped.", true, "interface"),
	netTxErrors:  metric("container_network_transmit_errors_total", "Errors sending on the interface.", true, "interface"),
	processes:    metric("container_processes", "Number of processes running inside the container.", false),
	threads:      metric("container_threads", "Number of threads running inside the container", false),
	threadsMax:   metric("container_threads_max", "Maximum number of threads allowed inside the container, infinity if value is zero", false),
	fds:          metric("container_file_descriptors", "Number of open file descriptors for the container.", false),
	sockets:      metric("container_sockets", "Number of open sockets for the container.", false),
	ulimitsSoft:  metric("container_ulimits_soft", "Soft ulimit values for the container root process. Unlimited if -1, except priority and nice", false, "ulimit"),
	lastSeen:     metric("container_last_seen", "Last time a container was seen by the exporter", false),
	startTime:    metric("container_start_time_seconds", "Start time of the container since unix epoch in seconds.", false),
}

// cadvisorCollector collects the metrics of the listed containers once.
type cadvisorCollector struct {
	ctx  context.Context
	list func(ctx context.Context) ([]provider.ContainerCgroup, error)
	opts CadvisorOptions
}

func (c *cadvisorCollector) Describe(ch chan<- *prometheus.Desc) {
	prometheus.DescribeByCollect(c, ch)
}

func (c *cadvisorCollector) Collect(ch chan<- prometheus.Metric) {
	containers, err := c.list(c.ctx)
	if err != nil {
		klog.FromContext(c.ctx).Error(err, "Unable to list the containers for /metrics/cadvisor")
		return
	}
	now := c.opts.Clock.Now()
	disks, err := readDiskstats(filepath.Join(c.opts.ProcRoot, "diskstats"))
	if err != nil {
		klog.FromContext(c.ctx).V(4).Info("Leaving the block devices' figures out of /metrics/cadvisor", "err", err)
	}
	c.collectRoot(ch, disks, now)
	for _, ct := range containers {
		c.collect(ch, ct, disks, now)
	}
}

// collectRoot reports the root container ("/") as cAdvisor does for the
// kubelet: for each filesystem on a block device, its size and inodes
// (statfs of where it is mounted) and the device's I/O (/proc/diskstats).
// These are the device's figures, not any one container's: cAdvisor
// reports them for containerd's containers nowhere else.
func (c *cadvisorCollector) collectRoot(ch chan<- prometheus.Metric, disks map[string]diskStats, now time.Time) {
	filesystems, err := blockFilesystems(filepath.Join(c.opts.ProcRoot, "self", "mountinfo"))
	if err != nil {
		klog.FromContext(c.ctx).V(4).Info("Leaving the filesystems out of /metrics/cadvisor", "err", err)
		return
	}
	emit := c.emitter(ch, []string{"", "/", "", "", "", ""}, now)
	cm := &cadvisorMetrics
	for _, fs := range filesystems {
		if st, err := statfs(fs.mountpoint, metav1.NewTime(now)); err == nil {
			emit(cm.fsLimit, float64(*st.CapacityBytes), fs.device)
			emit(cm.fsUsage, float64(*st.UsedBytes), fs.device)
			emit(cm.fsInodes, float64(*st.Inodes), fs.device)
			emit(cm.fsInodesFree, float64(*st.InodesFree), fs.device)
		}
		d, ok := disks[fs.majorMinor]
		if !ok {
			continue
		}
		emit(cm.fsReads, float64(d.reads), fs.device)
		emit(cm.fsReadsMerged, float64(d.readsMerged), fs.device)
		emit(cm.fsSectorReads, float64(d.sectorsRead), fs.device)
		emit(cm.fsReadSeconds, float64(d.readMillis)/1e3, fs.device)
		emit(cm.fsWrites, float64(d.writes), fs.device)
		emit(cm.fsWritesMerged, float64(d.writesMerged), fs.device)
		emit(cm.fsSectorWrites, float64(d.sectorsWritten), fs.device)
		emit(cm.fsWriteSeconds, float64(d.writeMillis)/1e3, fs.device)
		emit(cm.fsIOCurrent, float64(d.inProgress), fs.device)
		emit(cm.fsIOTime, float64(d.ioMillis)/1e3, fs.device)
		emit(cm.fsIOTimeWeighted, float64(d.weightedIOMillis)/1e3, fs.device)
	}
}

// emitter sends one container's samples, stamped with now.
func (c *cadvisorCollector) emitter(ch chan<- prometheus.Metric, labels []string, now time.Time) func(cadvisorMetric, float64, ...string) {
	return func(m cadvisorMetric, v float64, extra ...string) {
		t := prometheus.GaugeValue
		if m.counter {
			t = prometheus.CounterValue
		}
		metric, err := prometheus.NewConstMetric(m.desc, t, v, append(append([]string{}, labels...), extra...)...)
		if err == nil {
			ch <- prometheus.NewMetricWithTimestamp(now, metric)
		}
	}
}

// unlimited is where a cgroup v1 limit means none (the kernel rounds
// PAGE_COUNTER_MAX to pages); cAdvisor reports no limit as 0.
const unlimited = uint64(1) << 62

func (c *cadvisorCollector) collect(ch chan<- prometheus.Metric, ct provider.ContainerCgroup, disks map[string]diskStats, now time.Time) {
	emit := c.emitter(ch, []string{ct.Container, ct.Cgroup, ct.Image, ct.ID, ct.Namespace, ct.Pod}, now)
	cm := &cadvisorMetrics
	emit(cm.lastSeen, float64(now.Unix()))
	if !ct.StartTime.IsZero() {
		emit(cm.startTime, float64(ct.StartTime.Unix()))
	}
	if ct.WritableLayerBytes != nil {
		emit(cm.fsUsage, float64(*ct.WritableLayerBytes), "")
	}
	g := c.cgroup(ct.Cgroup)
	var io map[string]blockIO
	if g.v2 {
		io = c.collectV2(emit, g)
	} else {
		io = c.collectV1(emit, g)
	}
	if io != nil && ct.FsDevice != "" {
		// The cgroup counts no I/O to a device until it has done some: the
		// device its filesystem is on has done none, rather than no figure.
		if _, ok := io[ct.FsDevice]; !ok {
			io[ct.FsDevice] = blockIO{}
		}
	}
	for dev, b := range io {
		device := "/dev/block/" + dev
		if d, ok := disks[dev]; ok {
			device = "/dev/" + d.name
		}
		major, minor, _ := strings.Cut(dev, ":")
		emit(cm.blkioUsage, float64(b.readBytes), device, major, minor, "Read")
		emit(cm.blkioUsage, float64(b.writeBytes), device, major, minor, "Write")
		emit(cm.fsReadsBytes, float64(b.readBytes), device)
		emit(cm.fsWritesBytes, float64(b.writeBytes), device)
		emit(cm.fsReads, float64(b.reads), device)
		emit(cm.fsWrites, float64(b.writes), device)
	}
	pids := c.collectProcesses(emit, g)
	if ct.Container == provider.SandboxContainer && len(pids) > 0 {
		c.collectNetwork(emit, pids[0])
	}
}

// blockIO is what a cgroup did to one block device.
type blockIO struct {
	readBytes, writeBytes, reads, writes uint64
}

// collectNetwork reports the interfaces of the network namespace process
// pid is in, less the loopback: a pod's, read through its sandbox.
func (c *cadvisorCollector) collectNetwork(emit func(cadvisorMetric, float64, ...string), pid string) {
	ifaces, err := readNetCounters(filepath.Join(c.opts.ProcRoot, pid, "net", "dev"))
	if err != nil {
		return
	}
	cm := &cadvisorMetrics
	for _, i := range ifaces {
		if i.name == "lo" {
			continue
		}
		emit(cm.netRxBytes, float64(i.rxBytes), i.name)
		emit(cm.netRxPackets, float64(i.rxPackets), i.name)
		emit(cm.netRxDropped, float64(i.rxDrops), i.name)
		emit(cm.netRxErrors, float64(i.rxErrors), i.name)
		emit(cm.netTxBytes, float64(i.txBytes), i.name)
		emit(cm.netTxPackets, float64(i.txPackets), i.name)
		emit(cm.netTxDropped, float64(i.txDrops), i.name)
		emit(cm.netTxErrors, float64(i.txErrors), i.name)
	}
}

// cgroupDirs are a container's cgroup directories: the one of cgroup v2,
// or one per cgroup v1 controller.
type cgroupDirs struct {
	v2                                bool
	unified, cpu, cpuacct, mem, blkio string
	pids                              string
}

func (c *cadvisorCollector) cgroup(path string) cgroupDirs {
	root := c.opts.CgroupRoot
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
		d := filepath.Join(root, path)
		return cgroupDirs{v2: true, unified: d, pids: d}
	}
	at := func(controller string) string { return filepath.Join(root, controller, path) }
	return cgroupDirs{cpu: at("cpu"), cpuacct: at("cpuacct"), mem: at("memory"), blkio: at("blkio"), pids: at("pids")}
}

// collectV1 reports a cgroup v1 container's CPU and memory, and returns
// its block I/O by device (nil when its blkio cgroup cannot be read).
func (c *cadvisorCollector) collectV1(emit func(cadvisorMetric, float64, ...string), g cgroupDirs) map[string]blockIO {
	cm := &cadvisorMetrics
	if v, err := readUint(filepath.Join(g.cpuacct, "cpuacct.usage")); err == nil {
		emit(cm.cpuUsage, float64(v)/1e9, "total")
	}
	if stat := keyValues(filepath.Join(g.cpuacct, "cpuacct.stat")); stat != nil {
		// USER_HZ is 100 on every architecture Linux exposes it on.
		emit(cm.cpuUser, float64(stat["user"])/100)
		emit(cm.cpuSystem, float64(stat["system"])/100)
	}
	if v, err := readUint(filepath.Join(g.cpu, "cpu.cfs_period_us")); err == nil {
		emit(cm.cpuPeriod, float64(v))
	}
	if v, err := readUint(filepath.Join(g.cpu, "cpu.shares")); err == nil {
		emit(cm.cpuShares, float64(v))
	}
	if v, ok := readInt(filepath.Join(g.cpu, "cpu.cfs_quota_us")); ok && v > 0 {
		emit(cm.cpuQuota, float64(v))
	}
	stat := keyValues(filepath.Join(g.mem, "memory.stat"))
	if usage, err := readUint(filepath.Join(g.mem, "memory.usage_in_bytes")); err == nil {
		emit(cm.memUsage, float64(usage))
		emit(cm.memWorkingSet, float64(sub(usage, stat["total_inactive_file"])))
	}
	if v, err := readUint(filepath.Join(g.mem, "memory.max_usage_in_bytes")); err == nil {
		emit(cm.memMaxUsage, float64(v))
	}
	if v, err := readUint(filepath.Join(g.mem, "memory.failcnt")); err == nil {
		emit(cm.memFailcnt, float64(v))
	}
	if stat != nil {
		emit(cm.memCache, float64(stat["total_cache"]))
		emit(cm.memRSS, float64(stat["total_rss"]))
		emit(cm.memMappedFile, float64(stat["total_mapped_file"]))
		emit(cm.memSwap, float64(stat["total_swap"]))
		emit(cm.memFailures, float64(stat["pgfault"]), "pgfault", "container")
		emit(cm.memFailures, float64(stat["pgmajfault"]), "pgmajfault", "container")
		emit(cm.memFailures, float64(stat["total_pgfault"]), "pgfault", "hierarchy")
		emit(cm.memFailures, float64(stat["total_pgmajfault"]), "pgmajfault", "hierarchy")
	}
	if oom := keyValues(filepath.Join(g.mem, "memory.oom_control")); oom != nil {
		emit(cm.oomEvents, float64(oom["oom_kill"]))
	}
	limit := func(file string) float64 {
		v, err := readUint(filepath.Join(g.mem, file))
		if err != nil || v >= unlimited {
			return 0
		}
		return float64(v)
	}
	emit(cm.memLimit, limit("memory.limit_in_bytes"))
	emit(cm.memReservation, limit("memory.soft_limit_in_bytes"))
	emit(cm.memSwapLimit, limit("memory.memsw.limit_in_bytes"))

	bytes, err := readBlkio(filepath.Join(g.blkio, "blkio.throttle.io_service_bytes_recursive"))
	if err != nil {
		return nil
	}
	ops, _ := readBlkio(filepath.Join(g.blkio, "blkio.throttle.io_serviced_recursive"))
	io := map[string]blockIO{}
	for dev, b := range bytes {
		io[dev] = blockIO{readBytes: b["Read"], writeBytes: b["Write"], reads: ops[dev]["Read"], writes: ops[dev]["Write"]}
	}
	return io
}

// collectV2 reports a cgroup v2 container's CPU and memory, and returns
// its block I/O by device (nil when its io.stat cannot be read).
func (c *cadvisorCollector) collectV2(emit func(cadvisorMetric, float64, ...string), g cgroupDirs) map[string]blockIO {
	cm := &cadvisorMetrics
	if cpu := keyValues(filepath.Join(g.unified, "cpu.stat")); cpu != nil {
		emit(cm.cpuUsage, float64(cpu["usage_usec"])/1e6, "total")
		emit(cm.cpuUser, float64(cpu["user_usec"])/1e6)
		emit(cm.cpuSystem, float64(cpu["system_usec"])/1e6)
	}
	if data, err := os.ReadFile(filepath.Join(g.unified, "cpu.max")); err == nil {
		if f := strings.Fields(string(data)); len(f) == 2 {
			if period, err := strconv.ParseUint(f[1], 10, 64); err == nil {
				emit(cm.cpuPeriod, float64(period))
			}
			if quota, err := strconv.ParseUint(f[0], 10, 64); err == nil {
				emit(cm.cpuQuota, float64(quota))
			}
		}
	}
	if w, err := readUint(filepath.Join(g.unified, "cpu.weight")); err == nil {
		// The kubelet's conversion of shares to weight, inverted.
		emit(cm.cpuShares, float64(2+((w-1)*262142)/9999))
	}
	stat := keyValues(filepath.Join(g.unified, "memory.stat"))
	if usage, err := readUint(filepath.Join(g.unified, "memory.current")); err == nil {
		emit(cm.memUsage, float64(usage))
		emit(cm.memWorkingSet, float64(sub(usage, stat["inactive_file"])))
	}
	if v, err := readUint(filepath.Join(g.unified, "memory.peak")); err == nil {
		emit(cm.memMaxUsage, float64(v))
	}
	if stat != nil {
		emit(cm.memCache, float64(stat["file"]))
		emit(cm.memRSS, float64(stat["anon"]))
		emit(cm.memMappedFile, float64(stat["file_mapped"]))
		emit(cm.memFailures, float64(stat["pgfault"]), "pgfault", "container")
		emit(cm.memFailures, float64(stat["pgmajfault"]), "pgmajfault", "container")
	}
	if v, err := readUint(filepath.Join(g.unified, "memory.swap.current")); err == nil {
		emit(cm.memSwap, float64(v))
	}
	events := keyValues(filepath.Join(g.unified, "memory.events"))
	emit(cm.memFailcnt, float64(events["max"]))
	emit(cm.oomEvents, float64(events["oom_kill"]))
	limit := func(file string) float64 {
		v, err := readUint(filepath.Join(g.unified, file))
		if err != nil {
			return 0 // "max"
		}
		return float64(v)
	}
	emit(cm.memLimit, limit("memory.max"))
	emit(cm.memReservation, limit("memory.low"))
	emit(cm.memSwapLimit, limit("memory.swap.max"))
	data, err := os.ReadFile(filepath.Join(g.unified, "io.stat"))
	if err != nil {
		return nil
	}
	io := map[string]blockIO{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kv := map[string]uint64{}
		for _, p := range f[1:] {
			if k, v, ok := strings.Cut(p, "="); ok {
				kv[k], _ = strconv.ParseUint(v, 10, 64)
			}
		}
		io[f[0]] = blockIO{readBytes: kv["rbytes"], writeBytes: kv["wbytes"], reads: kv["rios"], writes: kv["wios"]}
	}
	return io
}

// collectProcesses counts the container's processes, threads, open files
// and sockets, and its first process's soft limit of open files; it
// returns the processes.
func (c *cadvisorCollector) collectProcesses(emit func(cadvisorMetric, float64, ...string), g cgroupDirs) []string {
	cm := &cadvisorMetrics
	dir := g.unified
	if !g.v2 {
		dir = g.pids
		if _, err := os.Stat(filepath.Join(dir, "cgroup.procs")); err != nil {
			dir = g.cpu // no pids hierarchy
		}
	}
	pids := readFields(filepath.Join(dir, "cgroup.procs"))
	var threads, fds, sockets int
	for _, pid := range pids {
		tasks, _ := os.ReadDir(filepath.Join(c.opts.ProcRoot, pid, "task"))
		threads += len(tasks)
		entries, _ := os.ReadDir(filepath.Join(c.opts.ProcRoot, pid, "fd"))
		fds += len(entries)
		for _, e := range entries {
			if target, err := os.Readlink(filepath.Join(c.opts.ProcRoot, pid, "fd", e.Name())); err == nil && strings.HasPrefix(target, "socket:") {
				sockets++
			}
		}
	}
	emit(cm.processes, float64(len(pids)))
	emit(cm.threads, float64(threads))
	emit(cm.fds, float64(fds))
	emit(cm.sockets, float64(sockets))
	threadsMax, _ := readUint(filepath.Join(dir, "pids.max")) // "max": 0, no limit
	emit(cm.threadsMax, float64(threadsMax))
	if len(pids) > 0 {
		if soft, ok := softOpenFiles(filepath.Join(c.opts.ProcRoot, pids[0], "limits")); ok {
			emit(cm.ulimitsSoft, float64(soft), "max_open_files")
		}
	}
	return pids
}

// softOpenFiles reads the soft limit of open files from a limits file.
func softOpenFiles(path string) (uint64, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "Max open files"); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				v, err := strconv.ParseUint(f[0], 10, 64)
				return v, err == nil
			}
		}
	}
	return 0, false
}

func readInt(path string) (int64, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	return v, err == nil
}

func readFields(path string) []string {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	return strings.Fields(string(data))
}

// keyValues is readKeyValues, nil when the file cannot be read.
func keyValues(path string) map[string]uint64 {
	m, err := readKeyValues(path)
	if err != nil {
		return nil
	}
	return m
}

// readBlkio reads a cgroup v1 blkio file: "major:minor Operation value"
// lines, by device and operation.
func readBlkio(path string) (map[string]map[string]uint64, error) {
	out := map[string]map[string]uint64{}
	data, err := os.ReadFile(path)
	if err != nil {
		return out, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || !strings.Contains(f[0], ":") {
			continue
		}
		v, err := strconv.ParseUint(f[2], 10, 64)
		if err != nil {
			continue
		}
		if out[f[0]] == nil {
			out[f[0]] = map[string]uint64{}
		}
		out[f[0]][f[1]] = v
	}
	return out, nil
}
