package cri

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/pkg/mountinfo"
)

// A pod cgroup that still holds a container the runtime lost (killed while
// it started it) is emptied and removed with what is below it: the pod's
// deletion once stayed stuck on "device or resource busy".
func TestRemoveCgroupTreeKillsWhatTheRuntimeLost(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("creating cgroups needs root")
	}
	hierarchies, err := mountinfo.CgroupHierarchies()
	if err != nil || len(hierarchies) == 0 {
		t.Skipf("no cgroup hierarchy: %v", err)
	}
	var h string
	for _, c := range hierarchies {
		if _, err := os.Stat(filepath.Join(c, "cgroup.procs")); err == nil {
			h = c
			break
		}
	}
	if h == "" {
		t.Skip("no writable cgroup hierarchy")
	}
	pod := filepath.Join(h, "nodelet-test-"+strconv.Itoa(os.Getpid()), "pod")
	lost := filepath.Join(pod, "lost-container")
	if err := os.MkdirAll(lost, 0o755); err != nil {
		t.Skipf("cannot create a cgroup: %v", err)
	}
	defer os.Remove(filepath.Dir(pod))
	sleep := exec.Command("sleep", "600")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- sleep.Wait() }()
	defer sleep.Process.Kill()
	if err := os.WriteFile(filepath.Join(lost, "cgroup.procs"), []byte(strconv.Itoa(sleep.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(pod); err == nil {
		t.Fatal("a cgroup with a process below it was removed by rmdir alone; the test proves nothing")
	}
	if err := removeCgroupTree(pod); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(pod); !os.IsNotExist(err) {
		t.Errorf("pod cgroup still there: %v", err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Error("the process of the lost container still runs")
	}
}

// The pods' cgroups are named as the kubelet names them (cgroupfs driver,
// cgroupRoot "/"): tools and the node e2e suite look for kubepods.
func TestPodCgroupsAreTheKubelets(t *testing.T) {
	for qos, want := range map[corev1.PodQOSClass]string{
		corev1.PodQOSGuaranteed: "/kubepods/poduid-1",
		corev1.PodQOSBurstable:  "/kubepods/burstable/poduid-1",
		corev1.PodQOSBestEffort: "/kubepods/besteffort/poduid-1",
	} {
		if got := podCgroup(qos, "uid-1"); got != want {
			t.Errorf("%s pod cgroup %q, want %q", qos, got, want)
		}
	}
}

// A QoS cgroup made in a cpuset hierarchy takes its parent's CPUs and
// memory nodes, without which no process could join it.
func TestEnsureCgroupInACpusetHierarchy(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("creating cgroups needs root")
	}
	hierarchies, err := mountinfo.CgroupHierarchies()
	if err != nil {
		t.Skip(err)
	}
	var root string
	for _, h := range hierarchies {
		if _, err := os.Stat(filepath.Join(h, "cpuset.cpus")); err == nil {
			if _, err := os.Stat(filepath.Join(h, "cgroup.controllers")); err != nil {
				root = h // a cgroup v1 cpuset hierarchy
			}
		}
	}
	if root == "" {
		t.Skip("no cgroup v1 cpuset hierarchy")
	}
	dir := "/nodelet-test-qos-" + strconv.Itoa(os.Getpid())
	if err := ensureCgroup(root, dir); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(filepath.Join(root, dir))
	for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
		parent, _ := os.ReadFile(filepath.Join(root, f))
		own, _ := os.ReadFile(filepath.Join(root, dir, f))
		if string(own) != string(parent) {
			t.Errorf("%s = %q, want the parent's %q", f, own, parent)
		}
	}
	if err := ensureCgroup(root, dir); err != nil {
		t.Errorf("a second ensure: %v", err)
	}
}

// The pod's own cgroup is limited as the kubelet limits it: shares from
// the requests, a quota and a memory limit only when every container has
// one, the overhead added, the least shares for BestEffort pods.
func TestPodCgroupLimits(t *testing.T) {
	node := testNode()
	container := func(req, lim corev1.ResourceList) corev1.Container {
		return corev1.Container{Name: "c", Resources: corev1.ResourceRequirements{Requests: req, Limits: lim}}
	}
	guaranteed := container(rl("cpu", "100m", "memory", "100Mi"), rl("cpu", "100m", "memory", "100Mi"))
	for _, tc := range []struct {
		name string
		spec corev1.PodSpec
		want podCgroupLimits
	}{
		{"guaranteed with overhead", corev1.PodSpec{Containers: []corev1.Container{guaranteed},
			Overhead: rl("cpu", "200m", "memory", "140Mi")},
			podCgroupLimits{CPUShares: 307, CPUPeriod: 100000, CPUQuota: 30000, MemoryLimit: 240 << 20}},
		{"burstable, one container without limits", corev1.PodSpec{Containers: []corev1.Container{guaranteed,
			container(rl("cpu", "100m"), nil)}},
			podCgroupLimits{CPUShares: 204, CPUPeriod: 100000}},
		{"besteffort", corev1.PodSpec{Containers: []corev1.Container{container(nil, nil)}},
			podCgroupLimits{CPUShares: 2, CPUPeriod: 100000}},
	} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "uid-1"}, Spec: tc.spec}
		if got := podLimitsOf(pod, node); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}

	// Written in cgroup v1's cpu and memory hierarchies, below kubepods.
	root := t.TempDir()
	for _, d := range []string{"cpu", "memory"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "uid-1"}, Spec: corev1.PodSpec{Containers: []corev1.Container{guaranteed},
		Overhead: rl("cpu", "200m", "memory", "140Mi")}}
	if err := ensurePodCgroup(pod, node, root); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{
		"cpu/kubepods/poduid-1/cpu.cfs_quota_us":         "30000",
		"cpu/kubepods/poduid-1/cpu.shares":               "307",
		"memory/kubepods/poduid-1/memory.limit_in_bytes": "251658240",
	} {
		if got, _ := os.ReadFile(filepath.Join(root, file)); string(got) != want {
			t.Errorf("%s = %q, want %q", file, got, want)
		}
	}
}

// The pods' cgroup is limited to the node's allocatable memory, in the
// memory hierarchy of cgroup v1 or in cgroup v2's.
func TestLimitPodsMemory(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		v2         bool
		limit      int64
		want       string // "" for no write
	}{
		{name: "cgroup v1", file: "memory/kubepods/memory.limit_in_bytes", limit: 1 << 30, want: "1073741824"},
		{name: "cgroup v2", file: "kubepods/memory.max", v2: true, limit: 1 << 30, want: "1073741824"},
		{name: "no allocatable memory known", file: "memory/kubepods/memory.limit_in_bytes", limit: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if tc.v2 {
				if err := os.WriteFile(filepath.Join(root, "cgroup.controllers"), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.MkdirAll(filepath.Dir(filepath.Join(root, tc.file)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := LimitPodsMemory(root, tc.limit); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(filepath.Join(root, tc.file))
			if tc.want == "" {
				if err == nil {
					t.Errorf("wrote %q, want nothing", got)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Errorf("%s = %q (%v), want %q", tc.file, got, err, tc.want)
			}
		})
	}
}
