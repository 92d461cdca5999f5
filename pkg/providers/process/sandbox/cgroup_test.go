package sandbox

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

// These tests run the cgroup code against a fake cgroupfs in a temporary
// directory, laid out like a cgroup v1 host (one directory per hierarchy,
// cpu and cpuacct mounted together) or a cgroup v2 host (one unified
// hierarchy). A fake cgroupfs does not create interface files on mkdir as
// the kernel does: the tests create the ones the kernel would.

// fakeCgroupfs points the package at root as the cgroup mount point and at
// self as the content of /proc/self/cgroup, until the test ends.
func fakeCgroupfs(t *testing.T, root, self string) {
	t.Helper()
	procFile := filepath.Join(t.TempDir(), "cgroup")
	writeTestFile(t, procFile, self)
	oldRoot, oldProc := cgroupRoot, procSelfCgroup
	cgroupRoot, procSelfCgroup = root, procFile
	t.Cleanup(func() { cgroupRoot, procSelfCgroup = oldRoot, oldProc })
}

// fakeV1 lays out v1 hierarchies memory, cpu,cpuacct (with the cpu and
// cpuacct symlinks) and pids under a new root, each with the files of a
// mounted hierarchy's root, and returns the root (symlinks resolved, as
// cgroupParents resolves them).
func fakeV1(t *testing.T) string {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"memory", "cpu,cpuacct", "pids", "devices"} {
		kernelFiles(t, filepath.Join(root, h), "cgroup.procs", "tasks")
	}
	for _, link := range []string{"cpu", "cpuacct"} {
		if err := os.Symlink("cpu,cpuacct", filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// fakeV2 lays out the root of a unified hierarchy.
func fakeV2(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	kernelFiles(t, root, "cgroup.controllers", "cgroup.subtree_control", "cgroup.procs")
	writeTestFile(t, filepath.Join(root, "cgroup.controllers"), "cpuset cpu io memory pids")
	return root
}

// kernelFiles creates dir and, empty, the interface files that the kernel
// would show in it.
func kernelFiles(t *testing.T, dir string, files ...string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		writeTestFile(t, filepath.Join(dir, f), "")
	}
}

func writeTestFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// readTestFile is a file's content, or "<none>" when it does not exist.
func readTestFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return "<none>"
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

func TestOwnCgroup(t *testing.T) {
	self := "9:name=systemd:/init.scope\n4:memory:/agent/mem\n2:cpu,cpuacct:/agent/cpu\n1:pids:/\n0::/agent.slice/nodelet.service\n"
	fakeCgroupfs(t, t.TempDir(), self)
	for controller, want := range map[string]string{
		"memory":  "/agent/mem",
		"cpu":     "/agent/cpu",
		"cpuacct": "/agent/cpu",
		"pids":    "/",
		"blkio":   "/", // not listed
		"":        "/agent.slice/nodelet.service",
	} {
		if got := ownCgroup(controller); got != want {
			t.Errorf("ownCgroup(%q) = %q, want %q", controller, got, want)
		}
	}
	procSelfCgroup = filepath.Join(t.TempDir(), "missing")
	if got := ownCgroup("memory"); got != "/" {
		t.Errorf("ownCgroup without /proc/self/cgroup = %q, want /", got)
	}
}

func TestCgroupParentsV1(t *testing.T) {
	root := fakeV1(t)
	fakeCgroupfs(t, root, "4:memory:/agent\n2:cpu,cpuacct:/\n1:pids:/\n0::/\n")
	dirs, v2, err := cgroupParents("nodelet")
	if err != nil || v2 {
		t.Fatalf("cgroupParents = %v, v2 %v, %v; want v1 parents", dirs, v2, err)
	}
	// cpu and cpuacct are one hierarchy: one directory for both; devices
	// is not a controller pods get a cgroup in.
	want := []string{filepath.Join(root, "memory/nodelet"), filepath.Join(root, "cpu,cpuacct/nodelet"), filepath.Join(root, "pids/nodelet")}
	if !reflect.DeepEqual(dirs, want) {
		t.Fatalf("cgroupParents = %v, want %v", dirs, want)
	}
	for _, d := range want {
		if !isDir(d) {
			t.Errorf("%s was not created", d)
		}
	}
	if isDir(filepath.Join(root, "devices/nodelet")) {
		t.Errorf("a cgroup was made in the devices hierarchy")
	}
}

func TestCgroupParentsV1FallsBackToOwnCgroup(t *testing.T) {
	root := fakeV1(t)
	fakeCgroupfs(t, root, "4:memory:/agent\n2:cpu,cpuacct:/\n1:pids:/\n")
	// Where the hierarchy root is not writable, the parent goes under our
	// own cgroup. (A file in the way stands for a read-only root: root
	// ignores permissions.)
	writeTestFile(t, filepath.Join(root, "memory/nodelet"), "")
	// A hierarchy that is not mounted (no cgroup.procs) is skipped.
	if err := os.Remove(filepath.Join(root, "pids/cgroup.procs")); err != nil {
		t.Fatal(err)
	}
	dirs, _, err := cgroupParents("nodelet")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(root, "memory/agent/nodelet"), filepath.Join(root, "cpu,cpuacct/nodelet")}
	if !reflect.DeepEqual(dirs, want) {
		t.Errorf("cgroupParents = %v, want %v", dirs, want)
	}
}

func TestCgroupParentsNone(t *testing.T) {
	fakeCgroupfs(t, t.TempDir(), "0::/\n")
	if dirs, _, err := cgroupParents("nodelet"); err == nil {
		t.Errorf("cgroupParents without any hierarchy = %v, want an error", dirs)
	}
}

func TestCgroupParentsV2(t *testing.T) {
	root := fakeV2(t)
	fakeCgroupfs(t, root, "0::/agent.slice/nodelet.service\n")
	dirs, v2, err := cgroupParents("nodelet")
	if err != nil || !v2 {
		t.Fatalf("cgroupParents = %v, v2 %v, %v; want the v2 parent", dirs, v2, err)
	}
	parent := filepath.Join(root, "nodelet")
	if want := []string{parent}; !reflect.DeepEqual(dirs, want) {
		t.Fatalf("cgroupParents = %v, want %v", dirs, want)
	}
	// The controllers reach the pods' cgroups: enabled at the root and in
	// the parent (each controller written alone, so that one missing does
	// not stop the others; the fake keeps the last write).
	for _, d := range []string{root, parent} {
		if got := readTestFile(t, filepath.Join(d, "cgroup.subtree_control")); !strings.HasPrefix(got, "+") {
			t.Errorf("%s/cgroup.subtree_control = %q, want controllers enabled", d, got)
		}
	}

	// Root not writable: under our own cgroup.
	root = fakeV2(t)
	fakeCgroupfs(t, root, "0::/agent.slice/nodelet.service\n")
	writeTestFile(t, filepath.Join(root, "nodelet"), "")
	dirs, _, err = cgroupParents("nodelet")
	if want := []string{filepath.Join(root, "agent.slice/nodelet.service/nodelet")}; err != nil || !reflect.DeepEqual(dirs, want) {
		t.Errorf("cgroupParents with the root not writable = %v, %v; want %v", dirs, err, want)
	}
}

func TestMakeCgroupsV1(t *testing.T) {
	root := t.TempDir()
	pod := []string{filepath.Join(root, "memory/nodelet/podU"), filepath.Join(root, "cpu/nodelet/podU")}
	if err := makeCgroups(pod, false); err != nil {
		t.Fatal(err)
	}
	for _, d := range pod {
		if !isDir(d) {
			t.Errorf("%s not created", d)
		}
		if got := readTestFile(t, filepath.Join(d, "cgroup.subtree_control")); got != "<none>" {
			t.Errorf("v1 cgroup %s got a cgroup.subtree_control %q", d, got)
		}
	}
	// Making them again (a container's restart) is no error.
	if err := makeCgroups(pod, false); err != nil {
		t.Errorf("makeCgroups of existing cgroups: %v", err)
	}
}

// On v2 a cgroup with controllers enabled in its cgroup.subtree_control
// cannot take processes (the no-internal-process rule: joining it fails
// with EBUSY). Containers' processes join the container's cgroup, so the
// controllers must be enabled in the pod's cgroup and never in the
// container's.
func TestMakeCgroupsV2EnablesControllersInTheParentOnly(t *testing.T) {
	root := fakeV2(t)
	fakeCgroupfs(t, root, "0::/\n")
	parents, _, err := cgroupParents("nodelet")
	if err != nil {
		t.Fatal(err)
	}
	pod := filepath.Join(parents[0], "podU")
	if err := makeCgroups([]string{pod}, true); err != nil {
		t.Fatal(err)
	}
	if !isDir(pod) {
		t.Fatalf("%s not created", pod)
	}
	if got := readTestFile(t, filepath.Join(pod, "cgroup.subtree_control")); got != "<none>" {
		t.Errorf("the pod's cgroup.subtree_control was written (%q) before it has children", got)
	}
	container := filepath.Join(pod, "main")
	if err := makeCgroups([]string{container}, true); err != nil {
		t.Fatal(err)
	}
	if got := readTestFile(t, filepath.Join(pod, "cgroup.subtree_control")); !strings.HasPrefix(got, "+") {
		t.Errorf("pod cgroup.subtree_control = %q, want controllers enabled for its containers", got)
	}
	if got := readTestFile(t, filepath.Join(container, "cgroup.subtree_control")); got != "<none>" {
		t.Errorf("container cgroup.subtree_control = %q: its processes could not join it", got)
	}
}

// The values are the kubelet's: shares = millicores*1024/1000 within
// [2, 262144] (2 without a request), CFS quota = millicores*100 µs per
// 100 ms period and at least 1 ms, v2 weight = 1 + (shares-2)*9999/262142,
// the memory limit in bytes with swap off.
func TestSetResources(t *testing.T) {
	v1Memory := []string{"memory.limit_in_bytes", "memory.memsw.limit_in_bytes"}
	v1CPU := []string{"cpu.cfs_period_us", "cpu.cfs_quota_us", "cpu.shares"}
	v2Files := []string{"memory.max", "memory.swap.max", "cpu.max", "cpu.weight"}
	const untouched = "(kernel default)"
	for _, tc := range []struct {
		name string
		r    Resources
		v1   map[string]string
		v2   map[string]string
	}{{
		name: "limits and request",
		r:    Resources{MemoryLimitBytes: 64 << 20, CPULimitMillis: 500, CPURequestMillis: 250},
		v1: map[string]string{"memory.limit_in_bytes": "67108864", "memory.memsw.limit_in_bytes": "67108864",
			"cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": "50000", "cpu.shares": "256"},
		v2: map[string]string{"memory.max": "67108864", "memory.swap.max": "0", "cpu.max": "50000 100000", "cpu.weight": "10"},
	}, {
		name: "nothing set: least CPU share, no limits",
		r:    Resources{},
		v1: map[string]string{"memory.limit_in_bytes": untouched, "memory.memsw.limit_in_bytes": untouched,
			"cpu.cfs_period_us": untouched, "cpu.cfs_quota_us": untouched, "cpu.shares": "2"},
		v2: map[string]string{"memory.max": untouched, "memory.swap.max": untouched, "cpu.max": untouched, "cpu.weight": "1"},
	}, {
		name: "one CPU",
		r:    Resources{CPULimitMillis: 1000, CPURequestMillis: 1000},
		v1: map[string]string{"memory.limit_in_bytes": untouched, "memory.memsw.limit_in_bytes": untouched,
			"cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": "100000", "cpu.shares": "1024"},
		v2: map[string]string{"memory.max": untouched, "memory.swap.max": untouched, "cpu.max": "100000 100000", "cpu.weight": "39"},
	}, {
		name: "tiny CPU: minimum quota and shares",
		r:    Resources{CPULimitMillis: 1, CPURequestMillis: 1},
		v1: map[string]string{"memory.limit_in_bytes": untouched, "memory.memsw.limit_in_bytes": untouched,
			"cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": "1000", "cpu.shares": "2"},
		v2: map[string]string{"memory.max": untouched, "memory.swap.max": untouched, "cpu.max": "1000 100000", "cpu.weight": "1"},
	}, {
		name: "huge CPU: shares capped",
		r:    Resources{CPULimitMillis: 300000, CPURequestMillis: 300000},
		v1: map[string]string{"memory.limit_in_bytes": untouched, "memory.memsw.limit_in_bytes": untouched,
			"cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": "30000000", "cpu.shares": "262144"},
		v2: map[string]string{"memory.max": untouched, "memory.swap.max": untouched, "cpu.max": "30000000 100000", "cpu.weight": "10000"},
	}, {
		name: "100 CPUs",
		r:    Resources{CPURequestMillis: 100000},
		v1: map[string]string{"memory.limit_in_bytes": untouched, "memory.memsw.limit_in_bytes": untouched,
			"cpu.cfs_period_us": untouched, "cpu.cfs_quota_us": untouched, "cpu.shares": "102400"},
		v2: map[string]string{"memory.max": untouched, "memory.swap.max": untouched, "cpu.max": untouched, "cpu.weight": "3906"},
	}} {
		t.Run(tc.name+"/v1", func(t *testing.T) {
			root := t.TempDir()
			mem, cpu := filepath.Join(root, "memory/c"), filepath.Join(root, "cpu,cpuacct/c")
			kernelFiles(t, mem, v1Memory...)
			kernelFiles(t, cpu, v1CPU...)
			for _, f := range v1Memory {
				writeTestFile(t, filepath.Join(mem, f), untouched)
			}
			for _, f := range v1CPU {
				writeTestFile(t, filepath.Join(cpu, f), untouched)
			}
			if err := setResources([]string{mem, cpu}, false, tc.r); err != nil {
				t.Fatal(err)
			}
			for file, want := range tc.v1 {
				dir := cpu
				if strings.HasPrefix(file, "memory.") {
					dir = mem
				}
				if got := readTestFile(t, filepath.Join(dir, file)); got != want {
					t.Errorf("%s = %q, want %q", file, got, want)
				}
			}
			// Each file goes only where the kernel shows it.
			for _, f := range v1Memory {
				if got := readTestFile(t, filepath.Join(cpu, f)); got != "<none>" {
					t.Errorf("%s written in the cpu hierarchy: %q", f, got)
				}
			}
			for _, f := range v1CPU {
				if got := readTestFile(t, filepath.Join(mem, f)); got != "<none>" {
					t.Errorf("%s written in the memory hierarchy: %q", f, got)
				}
			}
		})
		t.Run(tc.name+"/v2", func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "nodelet/podU/c")
			kernelFiles(t, dir, v2Files...)
			for _, f := range v2Files {
				writeTestFile(t, filepath.Join(dir, f), untouched)
			}
			if err := setResources([]string{dir}, true, tc.r); err != nil {
				t.Fatal(err)
			}
			for file, want := range tc.v2 {
				if got := readTestFile(t, filepath.Join(dir, file)); got != want {
					t.Errorf("%s = %q, want %q", file, got, want)
				}
			}
		})
	}
}

func TestSetResourcesWithoutSwapAccounting(t *testing.T) {
	r := Resources{MemoryLimitBytes: 1 << 30}
	// v1 without swap accounting has no memsw files; v2 without swap no
	// memory.swap.max. The memory limit still holds.
	mem := filepath.Join(t.TempDir(), "memory/c")
	kernelFiles(t, mem, "memory.limit_in_bytes")
	if err := setResources([]string{mem}, false, r); err != nil {
		t.Fatal(err)
	}
	if got := readTestFile(t, filepath.Join(mem, "memory.limit_in_bytes")); got != "1073741824" {
		t.Errorf("memory.limit_in_bytes = %q", got)
	}
	if got := readTestFile(t, filepath.Join(mem, "memory.memsw.limit_in_bytes")); got != "<none>" {
		t.Errorf("memory.memsw.limit_in_bytes created: %q", got)
	}
	// A swap file that refuses the write is no error either.
	if err := os.Mkdir(filepath.Join(mem, "memory.memsw.limit_in_bytes"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := setResources([]string{mem}, false, r); err != nil {
		t.Errorf("setResources with a failing memsw file: %v", err)
	}

	v2 := filepath.Join(t.TempDir(), "c")
	kernelFiles(t, v2, "memory.max")
	if err := setResources([]string{v2}, true, r); err != nil {
		t.Fatal(err)
	}
	if got := readTestFile(t, filepath.Join(v2, "memory.max")); got != "1073741824" {
		t.Errorf("memory.max = %q", got)
	}
}

func TestSetResourcesError(t *testing.T) {
	// A limit that cannot be written is an error: the container would run
	// without it.
	dir := filepath.Join(t.TempDir(), "c")
	if err := os.MkdirAll(filepath.Join(dir, "memory.max"), 0o755); err != nil {
		t.Fatal(err)
	}
	err := setResources([]string{dir}, true, Resources{MemoryLimitBytes: 1 << 20})
	if err == nil || !strings.Contains(err.Error(), "memory.max") {
		t.Errorf("setResources with an unwritable memory.max: %v, want an error naming it", err)
	}
}

func TestOOMKills(t *testing.T) {
	root := t.TempDir()
	v2 := filepath.Join(root, "v2")
	kernelFiles(t, v2)
	writeTestFile(t, filepath.Join(v2, "memory.events"), "low 0\nhigh 0\nmax 14\noom 3\noom_kill 2\noom_group_kill 7\n")
	v1mem, v1cpu := filepath.Join(root, "memory"), filepath.Join(root, "cpu")
	kernelFiles(t, v1mem)
	kernelFiles(t, v1cpu, "cpu.shares")
	writeTestFile(t, filepath.Join(v1mem, "memory.oom_control"), "oom_kill_disable 0\nunder_oom 0\noom_kill 5\n")
	old := filepath.Join(root, "old-kernel")
	kernelFiles(t, old)
	writeTestFile(t, filepath.Join(old, "memory.oom_control"), "oom_kill_disable 0\nunder_oom 0\n")

	for _, tc := range []struct {
		name string
		dirs []string
		want uint64
	}{
		{"v2 memory.events", []string{v2}, 2},
		{"v1 memory.oom_control in the memory hierarchy", []string{v1cpu, v1mem}, 5},
		{"v1 kernel without an oom_kill count", []string{old}, 0},
		{"no memory controller", []string{v1cpu}, 0},
		{"gone", []string{filepath.Join(root, "gone")}, 0},
		{"none", nil, 0},
	} {
		if got := oomKills(tc.dirs); got != tc.want {
			t.Errorf("%s: oomKills = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestCgroupPIDs(t *testing.T) {
	root := t.TempDir()
	a, b, empty := filepath.Join(root, "a"), filepath.Join(root, "b"), filepath.Join(root, "empty")
	kernelFiles(t, a)
	kernelFiles(t, b)
	kernelFiles(t, empty, "cgroup.procs")
	writeTestFile(t, filepath.Join(a, "cgroup.procs"), "12\n345\n")
	writeTestFile(t, filepath.Join(b, "cgroup.procs"), "99\n")
	for _, tc := range []struct {
		name string
		dirs []string
		want []int
	}{
		{"first readable directory", []string{a, b}, []int{12, 345}},
		{"a cgroup that is gone is skipped", []string{filepath.Join(root, "gone"), b}, []int{99}},
		{"empty", []string{empty, a}, nil},
		{"none", nil, nil},
	} {
		if got := cgroupPIDs(tc.dirs); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: cgroupPIDs = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// Usage reads a v2 pod cgroup: the CPU rate between two samples, and the
// working set as usage less the inactive file cache.
func TestUsageFromCgroupV2(t *testing.T) {
	cg := t.TempDir()
	writeTestFile(t, filepath.Join(cg, "cpu.stat"), "usage_usec 1000000\nuser_usec 800000\n")
	writeTestFile(t, filepath.Join(cg, "memory.current"), "300000\n")
	writeTestFile(t, filepath.Join(cg, "memory.stat"), "anon 150000\nfile 120000\ninactive_file 100000\npgfault 7\npgmajfault 2\n")
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	s := &Sandbox{m: &Manager{opts: Options{Clock: clk}}, dir: t.TempDir(), rec: sandboxRecord{Cgroups: []string{cg}, CgroupV2: true}}

	first, err := s.Usage()
	if err != nil {
		t.Fatal(err)
	}
	want := Usage{At: clk.Now(), CPU: true, CPUUsageNanoSeconds: 1e9, Memory: true,
		MemoryUsage: 300000, MemoryWorkingSet: 200000, MemoryRSS: 150000, PageFaults: 7, MajorPageFaults: 2}
	if !reflect.DeepEqual(first.Pod, want) {
		t.Errorf("first sample %+v, want %+v", first.Pod, want)
	}
	clk.Step(2 * time.Second)
	writeTestFile(t, filepath.Join(cg, "cpu.stat"), "usage_usec 2000000\n")
	second, err := s.Usage()
	if err != nil {
		t.Fatal(err)
	}
	if second.Pod.CPUNanoCores == nil || *second.Pod.CPUNanoCores != 5e8 {
		t.Errorf("rate %v, want half a core (5e8)", second.Pod.CPUNanoCores)
	}
}

// TestRemoveCgroupParents checks that the pods' parent cgroups go with
// their supervisors' cgroup once no pod's cgroup is in them, that one
// still holding a pod's stays and is named, and that a later sandbox's
// parents are made again.
func TestRemoveCgroupParents(t *testing.T) {
	for _, tt := range []struct {
		name string
		root func(*testing.T) string
		self string
	}{
		{"v1", fakeV1, "4:memory:/\n3:cpu,cpuacct:/\n2:pids:/\n"},
		{"v2", fakeV2, "0::/\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			root := tt.root(t)
			fakeCgroupfs(t, root, tt.self)
			dirs, _, err := cgroupParents("nodelet-x")
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range dirs {
				// The fake keeps what the kernel would not: the files
				// enableControllers wrote.
				os.Remove(filepath.Join(d, "cgroup.subtree_control"))
				if err := os.Mkdir(filepath.Join(d, supervisorsCgroup), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			busy := filepath.Join(dirs[0], "podu1")
			if err := os.Mkdir(busy, 0o755); err != nil {
				t.Fatal(err)
			}
			err = RemoveCgroupParents("nodelet-x")
			if err == nil || !strings.Contains(err.Error(), dirs[0]) {
				t.Errorf("RemoveCgroupParents with a pod's cgroup left = %v, want an error naming %s", err, dirs[0])
			}
			if _, err := os.Stat(dirs[0]); err != nil {
				t.Errorf("the parent holding a pod's cgroup went: %v", err)
			}
			if err := os.Remove(busy); err != nil {
				t.Fatal(err)
			}
			if err := RemoveCgroupParents("nodelet-x"); err != nil {
				t.Fatalf("RemoveCgroupParents: %v", err)
			}
			for _, d := range dirs {
				if _, err := os.Stat(d); !os.IsNotExist(err) {
					t.Errorf("%s remains: %v", d, err)
				}
			}
			if err := RemoveCgroupParents("nodelet-x"); err != nil {
				t.Errorf("RemoveCgroupParents with nothing left = %v, want nil", err)
			}
			m, err := NewManager(Options{RootDir: t.TempDir(), CgroupName: "nodelet-x"})
			if err != nil {
				t.Fatal(err)
			}
			again, _, err := m.cgroups()
			if err != nil || !reflect.DeepEqual(again, dirs) {
				t.Errorf("parents made again = %v, %v; want %v", again, err, dirs)
			}
			for _, d := range again {
				if _, err := os.Stat(d); err != nil {
					t.Errorf("parent not made again: %v", err)
				}
			}
		})
	}
}
