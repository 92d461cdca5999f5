package stats

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2/ktesting"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	testingclock "k8s.io/utils/clock/testing"
)

// fixture is a fake procfs and cgroup root in a temporary directory.
type fixture struct {
	t          *testing.T
	proc, cgrp string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	dir := t.TempDir()
	f := &fixture{t: t, proc: filepath.Join(dir, "proc"), cgrp: filepath.Join(dir, "cgroup")}
	if err := os.MkdirAll(f.cgrp, 0o755); err != nil {
		t.Fatal(err)
	}
	f.write(f.proc, "stat", procStat(1000, 50, 300))
	f.write(f.proc, "meminfo", `MemTotal:        8000000 kB
MemFree:         2000000 kB
MemAvailable:    5000000 kB
AnonPages:       1500000 kB
Inactive(file):  1000000 kB
SwapTotal:       1000000 kB
SwapFree:         900000 kB
`)
	f.write(f.proc, "vmstat", "nr_free_pages 500000\npgfault 777\npgmajfault 7\n")
	f.write(f.proc, "loadavg", "0.52 0.58 0.59 3/1234 98765\n")
	f.write(f.proc, "sys/kernel/pid_max", "4194304\n")
	f.write(f.proc, "sys/kernel/threads-max", "126000\n")
	f.write(f.proc, "net/dev", `Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:  5000      50    0    0    0     0          0         0     5000      50    0    0    0     0       0          0
  ens3: 123456    1000    2    0    0     0          0         0   654321    900    3    0    0     0       0          0
  eth1:   1000      10    0    0    0     0          0         0     2000     20    0    0    0     0       0          0
vethab12:  999       9    0    0    0     0          0         0      999      9    0    0    0     0       0          0
`)
	f.write(f.proc, "net/route", `Iface	Destination	Gateway 	Flags	RefCnt	Use	Metric	Mask		MTU	Window	IRTT
eth1	0000A8C0	00000000	0001	0	0	0	00FFFFFF	0	0	0
ens3	00000000	010200C0	0003	0	0	0	00000000	0	0	0
`)
	return f
}

func (f *fixture) write(root, name, content string) {
	f.t.Helper()
	path := filepath.Join(root, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// procStat is a /proc/stat whose busy time is user+system+irq ticks.
func procStat(user, system, irq uint64) string {
	return "cpu  " + u(user) + " 0 " + u(system) + " 99999 88 " + u(irq) + " 0 0 0 0\n" +
		"cpu0 1 0 1 1 1 1 0 0 0 0\n" +
		"intr 12345\nctxt 999\nbtime 1700000000\nprocesses 4242\n"
}

func u(v uint64) string { return strconv.FormatUint(v, 10) }

func (f *fixture) host(clk *testingclock.FakePassiveClock) *Host {
	return NewHost(HostOptions{ProcRoot: f.proc, CgroupRoot: f.cgrp, RootDir: f.t.TempDir(), Clock: clk})
}

func deref[T any](t *testing.T, name string, p *T) T {
	t.Helper()
	if p == nil {
		t.Fatalf("%s is nil", name)
	}
	return *p
}

func TestHostCPURateFromProcStat(t *testing.T) {
	f := newFixture(t)
	clk := testingclock.NewFakePassiveClock(time.Unix(1700001000, 0))
	h := f.host(clk)
	_, ctx := ktesting.NewTestContext(t)

	first, err := h.NodeStats(ctx, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	// 1000+300+50 ticks of 10ms.
	if got := deref(t, "usageCoreNanoSeconds", first.CPU.UsageCoreNanoSeconds); got != 13_500_000_000 {
		t.Errorf("first usageCoreNanoSeconds = %d, want 13.5e9", got)
	}
	if first.CPU.UsageNanoCores != nil {
		t.Errorf("first sample has a rate %d, want none", *first.CPU.UsageNanoCores)
	}
	if !first.CPU.Time.Time.Equal(clk.Now()) {
		t.Errorf("cpu time = %v, want the clock's %v", first.CPU.Time, clk.Now())
	}

	// 200 more ticks (2 core-seconds) in 4 seconds: half a core.
	clk.SetTime(clk.Now().Add(4 * time.Second))
	f.write(f.proc, "stat", procStat(1150, 50, 350))
	second, err := h.NodeStats(ctx, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	if got := deref(t, "usageNanoCores", second.CPU.UsageNanoCores); got != 500_000_000 {
		t.Errorf("usageNanoCores = %d, want 5e8", got)
	}

	// A sample right after keeps the rate measured over a real interval.
	clk.SetTime(clk.Now().Add(10 * time.Millisecond))
	f.write(f.proc, "stat", procStat(1160, 50, 350))
	third, err := h.NodeStats(ctx, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	if got := deref(t, "usageNanoCores", third.CPU.UsageNanoCores); got != 500_000_000 {
		t.Errorf("usageNanoCores 10ms later = %d, want the last rate 5e8", got)
	}
	if got := *third.CPU.UsageCoreNanoSeconds; got != 15_600_000_000 {
		t.Errorf("usageCoreNanoSeconds 10ms later = %d, want the current 15.6e9", got)
	}

	// The next rate is measured from the second sample, not the third.
	clk.SetTime(clk.Now().Add(990 * time.Millisecond))
	f.write(f.proc, "stat", procStat(1350, 50, 350))
	fourth, err := h.NodeStats(ctx, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	if got := deref(t, "usageNanoCores", fourth.CPU.UsageNanoCores); got != 2_000_000_000 {
		t.Errorf("usageNanoCores = %d, want 2e9 (200 ticks in 1s)", got)
	}
	if want := time.Unix(1700000000, 0); !fourth.StartTime.Time.Equal(want) {
		t.Errorf("start time = %v, want the boot time %v", fourth.StartTime, want)
	}
	if fourth.NodeName != "node-a" {
		t.Errorf("node name = %q", fourth.NodeName)
	}
}

func TestHostCPUFromCgroupV2(t *testing.T) {
	f := newFixture(t)
	f.write(f.cgrp, "cpu.stat", "usage_usec 2000000\nuser_usec 1500000\nsystem_usec 500000\n")
	clk := testingclock.NewFakePassiveClock(time.Unix(1700001000, 0))
	h := f.host(clk)
	_, ctx := ktesting.NewTestContext(t)
	if _, err := h.NodeStats(ctx, "n"); err != nil {
		t.Fatal(err)
	}
	clk.SetTime(clk.Now().Add(2 * time.Second))
	f.write(f.cgrp, "cpu.stat", "usage_usec 5000000\n")
	s, err := h.NodeStats(ctx, "n")
	if err != nil {
		t.Fatal(err)
	}
	if got := *s.CPU.UsageCoreNanoSeconds; got != 5_000_000_000 {
		t.Errorf("usageCoreNanoSeconds = %d, want the root cgroup's 5e9", got)
	}
	if got := deref(t, "usageNanoCores", s.CPU.UsageNanoCores); got != 1_500_000_000 {
		t.Errorf("usageNanoCores = %d, want 1.5e9", got)
	}
}

func TestHostMemory(t *testing.T) {
	const gib = 1 << 30
	tests := []struct {
		name   string
		cgroup map[string]string
		want   statsv1alpha1.MemoryStats
		swap   statsv1alpha1.SwapStats
	}{{
		name: "procfs (cgroup v1)",
		// usage = 8000000−2000000 kB, working set less 1000000 kB inactive file
		want: statsv1alpha1.MemoryStats{
			UsageBytes: p(6000000 * 1024), WorkingSetBytes: p(5000000 * 1024), AvailableBytes: p(3000000 * 1024),
			RSSBytes: p(1500000 * 1024), PageFaults: p(777), MajorPageFaults: p(7),
		},
		swap: statsv1alpha1.SwapStats{SwapUsageBytes: p(100000 * 1024), SwapAvailableBytes: p(900000 * 1024)},
	}, {
		name:   "cgroup v2 root",
		cgroup: map[string]string{"memory.stat": "anon 2147483648\nfile 3221225472\nkernel 1000\ninactive_file 1073741824\nactive_file 2147483648\npgfault 1234\npgmajfault 12\n"},
		want: statsv1alpha1.MemoryStats{
			UsageBytes: p(5 * gib), WorkingSetBytes: p(4 * gib), AvailableBytes: p(8000000*1024 - 4*gib),
			RSSBytes: p(2 * gib), PageFaults: p(1234), MajorPageFaults: p(12),
		},
		swap: statsv1alpha1.SwapStats{SwapUsageBytes: p(100000 * 1024), SwapAvailableBytes: p(900000 * 1024)},
	}, {
		name: "cgroup v2 namespace root",
		cgroup: map[string]string{
			"memory.stat":         "anon 2147483648\nfile 3221225472\ninactive_file 1073741824\npgfault 5\npgmajfault 1\n",
			"memory.current":      "3221225472\n",
			"memory.swap.current": "4096\n",
		},
		want: statsv1alpha1.MemoryStats{
			UsageBytes: p(3 * gib), WorkingSetBytes: p(2 * gib), AvailableBytes: p(8000000*1024 - 2*gib),
			RSSBytes: p(2 * gib), PageFaults: p(5), MajorPageFaults: p(1),
		},
		swap: statsv1alpha1.SwapStats{SwapUsageBytes: p(4096)},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			for name, content := range tt.cgroup {
				f.write(f.cgrp, name, content)
			}
			clk := testingclock.NewFakePassiveClock(time.Unix(1700001000, 0))
			_, ctx := ktesting.NewTestContext(t)
			s, err := f.host(clk).NodeStats(ctx, "n")
			if err != nil {
				t.Fatal(err)
			}
			m := s.Memory
			for _, c := range []struct {
				name      string
				got, want *uint64
			}{
				{"usageBytes", m.UsageBytes, tt.want.UsageBytes},
				{"workingSetBytes", m.WorkingSetBytes, tt.want.WorkingSetBytes},
				{"availableBytes", m.AvailableBytes, tt.want.AvailableBytes},
				{"rssBytes", m.RSSBytes, tt.want.RSSBytes},
				{"pageFaults", m.PageFaults, tt.want.PageFaults},
				{"majorPageFaults", m.MajorPageFaults, tt.want.MajorPageFaults},
				{"swapUsageBytes", s.Swap.SwapUsageBytes, tt.swap.SwapUsageBytes},
				{"swapAvailableBytes", s.Swap.SwapAvailableBytes, tt.swap.SwapAvailableBytes},
			} {
				if !equalPtr(c.got, c.want) {
					t.Errorf("%s = %s, want %s", c.name, show(c.got), show(c.want))
				}
			}
			if !m.Time.Time.Equal(clk.Now()) || !s.Swap.Time.Time.Equal(clk.Now()) {
				t.Errorf("memory and swap times %v %v, want the clock's %v", m.Time, s.Swap.Time, clk.Now())
			}
		})
	}
}

func p(v uint64) *uint64 { return &v }

func equalPtr(a, b *uint64) bool { return a == nil && b == nil || a != nil && b != nil && *a == *b }

func show(v *uint64) string {
	if v == nil {
		return "nil"
	}
	return u(*v)
}

func TestHostFilesystems(t *testing.T) {
	f := newFixture(t)
	root, images := t.TempDir(), t.TempDir()
	_, ctx := ktesting.NewTestContext(t)

	h := NewHost(HostOptions{ProcRoot: f.proc, CgroupRoot: f.cgrp, RootDir: root})
	s, err := h.NodeStats(ctx, "n")
	if err != nil {
		t.Fatal(err)
	}
	if s.Runtime != nil {
		t.Errorf("runtime stats %+v without an image filesystem, want none", s.Runtime)
	}
	checkFs(t, "nodefs", root, s.Fs)

	h = NewHost(HostOptions{ProcRoot: f.proc, CgroupRoot: f.cgrp, RootDir: root, ImageFsDir: images})
	s, err = h.NodeStats(ctx, "n")
	if err != nil {
		t.Fatal(err)
	}
	if s.Runtime == nil || s.Runtime.ImageFs == nil || s.Runtime.ContainerFs != s.Runtime.ImageFs {
		t.Fatalf("runtime stats %+v, want the image filesystem as both imageFs and containerFs", s.Runtime)
	}
	checkFs(t, "imagefs", images, s.Runtime.ImageFs)

	h = NewHost(HostOptions{ProcRoot: f.proc, CgroupRoot: f.cgrp, RootDir: root, ImageFsDir: filepath.Join(root, "missing")})
	if _, err := h.NodeStats(ctx, "n"); err == nil {
		t.Error("NodeStats with a missing image filesystem dir succeeded")
	}
}

// checkFs compares fs with statfs of dir: the sizes are fixed, the free
// space may move (other tests write to the same filesystem).
func checkFs(t *testing.T, name, dir string, fs *statsv1alpha1.FsStats) {
	t.Helper()
	if fs == nil {
		t.Fatalf("%s: no stats", name)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	capacity := deref(t, name+" capacity", fs.CapacityBytes)
	if want := st.Blocks * uint64(st.Frsize); capacity != want || capacity == 0 {
		t.Errorf("%s capacity = %d, want %d", name, capacity, want)
	}
	if avail, used := deref(t, name+" available", fs.AvailableBytes), deref(t, name+" used", fs.UsedBytes); avail > capacity || used > capacity || used+avail > capacity {
		t.Errorf("%s available %d + used %d exceed capacity %d", name, avail, used, capacity)
	}
	if inodes := deref(t, name+" inodes", fs.Inodes); inodes != st.Files ||
		deref(t, name+" inodesFree", fs.InodesFree)+deref(t, name+" inodesUsed", fs.InodesUsed) != inodes {
		t.Errorf("%s inodes %d, free %d, used %d: want %d in all", name, inodes, *fs.InodesFree, *fs.InodesUsed, st.Files)
	}
}

func TestHostRlimitAndNetwork(t *testing.T) {
	f := newFixture(t)
	_, ctx := ktesting.NewTestContext(t)
	s, err := f.host(testingclock.NewFakePassiveClock(time.Unix(1700001000, 0))).NodeStats(ctx, "n")
	if err != nil {
		t.Fatal(err)
	}
	if s.Rlimit == nil || deref(t, "maxpid", s.Rlimit.MaxPID) != 126000 || deref(t, "curproc", s.Rlimit.NumOfRunningProcesses) != 1234 {
		t.Errorf("rlimit %+v, want maxpid 126000 (threads-max is lower than pid_max) and 1234 tasks", s.Rlimit)
	}
	n := s.Network
	if n == nil {
		t.Fatal("no network stats")
	}
	var names []string
	for _, i := range n.Interfaces {
		names = append(names, i.Name)
	}
	if len(names) != 2 || names[0] != "ens3" || names[1] != "eth1" {
		t.Errorf("interfaces %v, want ens3 and eth1 (no loopback, no veth)", names)
	}
	if n.Name != "ens3" || deref(t, "rxBytes", n.RxBytes) != 123456 || deref(t, "rxErrors", n.RxErrors) != 2 ||
		deref(t, "txBytes", n.TxBytes) != 654321 || deref(t, "txErrors", n.TxErrors) != 3 {
		t.Errorf("default interface %+v, want ens3 (the default route's) with its counters", n.InterfaceStats)
	}

	// Without network and limit files the rest is still reported.
	for _, name := range []string{"net/dev", "loadavg", "sys/kernel/pid_max", "sys/kernel/threads-max"} {
		if err := os.Remove(filepath.Join(f.proc, name)); err != nil {
			t.Fatal(err)
		}
	}
	s, err = f.host(testingclock.NewFakePassiveClock(time.Unix(1700001000, 0))).NodeStats(ctx, "n")
	if err != nil {
		t.Fatalf("NodeStats without network and limit files: %v", err)
	}
	if s.Network != nil || s.Rlimit.MaxPID != nil || s.Rlimit.NumOfRunningProcesses != nil {
		t.Errorf("network %+v, rlimit %+v: want them left out", s.Network, s.Rlimit)
	}
}

func TestHostRequiredFiles(t *testing.T) {
	for _, name := range []string{"stat", "meminfo"} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			if err := os.Remove(filepath.Join(f.proc, name)); err != nil {
				t.Fatal(err)
			}
			_, ctx := ktesting.NewTestContext(t)
			if _, err := f.host(testingclock.NewFakePassiveClock(time.Now())).NodeStats(ctx, "n"); err == nil {
				t.Errorf("NodeStats without /proc/%s succeeded", name)
			}
		})
	}
}

// TestHostOnThisMachine reads the real procfs and cgroup root: the fixtures
// must not drift from what the kernel writes.
func TestHostOnThisMachine(t *testing.T) {
	if _, err := os.Stat("/proc/stat"); err != nil {
		t.Skipf("no procfs: %v", err)
	}
	_, ctx := ktesting.NewTestContext(t)
	s, err := NewHost(HostOptions{RootDir: t.TempDir()}).NodeStats(ctx, "n")
	if err != nil {
		t.Fatal(err)
	}
	if *s.CPU.UsageCoreNanoSeconds == 0 || *s.Memory.WorkingSetBytes == 0 || *s.Memory.AvailableBytes == 0 || s.StartTime.IsZero() || s.Rlimit.MaxPID == nil {
		t.Errorf("host stats cpu %+v memory %+v start %v rlimit %+v: want non-zero figures", s.CPU, s.Memory, s.StartTime, s.Rlimit)
	}
}
