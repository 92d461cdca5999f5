package cri

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	criapitesting "k8s.io/cri-api/pkg/apis/testing"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/hostnode"
	"github.com/nodelet/nodelet/pkg/lifecycle"
	"github.com/nodelet/nodelet/pkg/lifecycle/env"
	"github.com/nodelet/nodelet/pkg/lifecycle/hostvolume"
)

// PodStats keeps the pod's current sandbox and its running containers:
// not an old sandbox of the pod, not an exited container.
func TestPodStats(t *testing.T) {
	rs := criapitesting.NewFakeRuntimeService()
	cpu := func(total, rate uint64) *runtimeapi.CpuUsage {
		return &runtimeapi.CpuUsage{Timestamp: 5, UsageCoreNanoSeconds: &runtimeapi.UInt64Value{Value: total}, UsageNanoCores: &runtimeapi.UInt64Value{Value: rate}}
	}
	mem := func(ws uint64) *runtimeapi.MemoryUsage {
		return &runtimeapi.MemoryUsage{Timestamp: 5, WorkingSetBytes: &runtimeapi.UInt64Value{Value: ws}}
	}
	md := &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "ns", Uid: "u1"}
	rs.SetFakeSandboxes([]*criapitesting.FakePodSandbox{
		{PodSandboxStatus: runtimeapi.PodSandboxStatus{Id: "old", Metadata: md, Labels: nodeSelector("n1")}},
		{PodSandboxStatus: runtimeapi.PodSandboxStatus{Id: "sb1", Metadata: md, Labels: nodeSelector("n1")}},
		{PodSandboxStatus: runtimeapi.PodSandboxStatus{Id: "elsewhere", Metadata: md, Labels: nodeSelector("n2")}},
	})
	rs.SetFakePodSandboxStats([]*runtimeapi.PodSandboxStats{
		{Attributes: &runtimeapi.PodSandboxAttributes{Id: "old", Metadata: md}, Linux: &runtimeapi.LinuxPodSandboxStats{Cpu: cpu(1, 1)}},
		{Attributes: &runtimeapi.PodSandboxAttributes{Id: "elsewhere", Metadata: md}, Linux: &runtimeapi.LinuxPodSandboxStats{Cpu: cpu(1, 1)}},
		{Attributes: &runtimeapi.PodSandboxAttributes{Id: "sb1", Metadata: md}, Linux: &runtimeapi.LinuxPodSandboxStats{
			Cpu: cpu(300, 20), Memory: mem(4096),
			Containers: []*runtimeapi.ContainerStats{
				{Attributes: &runtimeapi.ContainerAttributes{Id: "c1", Metadata: &runtimeapi.ContainerMetadata{Name: "app"}}, Cpu: cpu(200, 10), Memory: mem(1024)},
				{Attributes: &runtimeapi.ContainerAttributes{Id: "c0", Metadata: &runtimeapi.ContainerMetadata{Name: "init"}}, Cpu: cpu(100, 0), Memory: mem(0)},
			},
		}},
	})
	rt := &criRuntime{conn: &connection{runtime: rs}, sandboxes: map[types.UID]*criSandbox{}}
	started := time.Unix(100, 0)
	sb := &criSandbox{rt: rt, uid: "u1", id: "sb1", created: time.Unix(90, 0), containers: map[string][]*criContainer{
		"app":  {{id: "c1", status: lifecycle.ContainerStatus{Name: "app", State: lifecycle.StateRunning, StartedAt: started}}},
		"init": {{id: "c0", status: lifecycle.ContainerStatus{Name: "init", State: lifecycle.StateExited}}},
	}}
	rt.sandboxes["u1"] = sb
	client := fake.NewClientset()
	m, err := lifecycle.New(lifecycle.Parts{
		Runtime: rt, Volumes: hostvolume.NewManager(client, hostvolume.Options{RootDir: t.TempDir()}),
		Env: env.NewGetter(client), Recorder: record.NewFakeRecorder(10),
	}, lifecycle.Options{NodeName: "n1", Address: "192.0.2.1", RootDir: t.TempDir(),
		Allocatable: func() corev1.ResourceList { return corev1.ResourceList{} }})
	if err != nil {
		t.Fatal(err)
	}
	p := &Provider{Manager: m, opts: Options{Options: hostnode.Options{NodeName: "n1"}, Clock: clock.RealClock{}}, runtime: rt}

	got, err := p.PodStats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("%d pods, want the current sandbox's only: %+v", len(got), got)
	}
	ps := got[0]
	if ps.PodRef.Name != "web" || ps.PodRef.UID != "u1" || !ps.StartTime.Time.Equal(time.Unix(90, 0)) {
		t.Errorf("pod %+v started %v", ps.PodRef, ps.StartTime)
	}
	if *ps.CPU.UsageNanoCores != 20 || *ps.Memory.WorkingSetBytes != 4096 {
		t.Errorf("pod cpu %d memory %d, want 20 and 4096", *ps.CPU.UsageNanoCores, *ps.Memory.WorkingSetBytes)
	}
	if len(ps.Containers) != 1 || ps.Containers[0].Name != "app" || !ps.Containers[0].StartTime.Time.Equal(started) ||
		*ps.Containers[0].CPU.UsageCoreNanoSeconds != 200 {
		t.Errorf("containers %+v, want app only, started at %v", ps.Containers, started)
	}
}

// completeFromHost adds what containerd leaves out on a hybrid cgroup v1
// host: CPU rates measured between calls, PSI from the unified hierarchy,
// the sandbox's network, the containers' log usage and the filesystems.
func TestPodStatsCompletedFromHost(t *testing.T) {
	dir := t.TempDir()
	write := func(path, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, path)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, path), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const podCg = "/kubepods/besteffort/podu1"
	pressure := "some avg10=0.00 avg60=0.00 avg300=0.00 total=10\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=1\n"
	write("cgroup/unified/cgroup.procs", "")
	for _, cg := range []string{podCg, podCg + "/c1"} {
		for _, r := range []string{"cpu", "memory", "io"} {
			write("cgroup/unified"+cg+"/"+r+".pressure", pressure)
		}
	}
	write("cgroup/unified"+podCg+"/sb1/cgroup.procs", "77\n")
	write("proc/77/net/dev", `Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:  5000      50    0    0    0     0          0         0     5000      50    0    0    0     0       0          0
  eth0:   1234      10    1    0    0     0          0         0      567      7    2    0    0     0       0          0
`)
	write("logs/app/0.log", "hello\n")

	p := &Provider{hostStats: newHostStats(filepath.Join(dir, "cgroup"), filepath.Join(dir, "proc"))}
	sb := &criSandbox{id: "sb1", logDir: filepath.Join(dir, "logs")}
	// The container's cgroup is that of its instance the pod runs, not of
	// the one it restarted from.
	ids := map[string]string{"app": "c1"}
	capacity, avail, inodes, free := uint64(1<<30), uint64(1<<29), uint64(1e6), uint64(5e5)
	image := &statsv1alpha1.FsStats{CapacityBytes: &capacity, AvailableBytes: &avail, Inodes: &inodes, InodesFree: &free}
	now := metav1.NewTime(time.Unix(1000, 0))
	sample := func(at time.Time, podUsage, ctrUsage uint64) statsv1alpha1.PodStats {
		written := uint64(4096)
		ps := statsv1alpha1.PodStats{
			CPU:    &statsv1alpha1.CPUStats{Time: metav1.NewTime(at), UsageCoreNanoSeconds: &podUsage},
			Memory: &statsv1alpha1.MemoryStats{Time: metav1.NewTime(at)},
			Containers: []statsv1alpha1.ContainerStats{{
				Name:   "app",
				CPU:    &statsv1alpha1.CPUStats{Time: metav1.NewTime(at), UsageCoreNanoSeconds: &ctrUsage, UsageNanoCores: new(uint64)},
				Memory: &statsv1alpha1.MemoryStats{Time: metav1.NewTime(at)},
				Rootfs: &statsv1alpha1.FsStats{UsedBytes: &written},
			}},
		}
		p.completeFromHost(&ps, ids, sb, podCg, podFilesystems{image: image, logs: image}, now)
		return ps
	}
	first := sample(time.Unix(1000, 0), 1e9, 5e8)
	if first.CPU.UsageNanoCores != nil {
		t.Errorf("pod rate %d on the first sample, want none", *first.CPU.UsageNanoCores)
	}
	if got := first.Containers[0].CPU.UsageNanoCores; got == nil || *got != 0 {
		t.Errorf("container rate %v on the first sample, want the runtime's", got)
	}
	// Another client's sample 2 s later, when the container happened to
	// use no CPU: too soon to measure over, and not kept.
	if soon := sample(time.Unix(1002, 0), 1e9, 5e8); soon.CPU.UsageNanoCores != nil {
		t.Errorf("pod rate %d 2 s after the first sample, want none yet", *soon.CPU.UsageNanoCores)
	}
	ps := sample(time.Unix(1010, 0), 2e9, 6e8)
	c := ps.Containers[0]
	if ps.CPU.UsageNanoCores == nil || *ps.CPU.UsageNanoCores != 1e8 || c.CPU.UsageNanoCores == nil || *c.CPU.UsageNanoCores != 1e7 {
		t.Errorf("rates pod %v container %v, want 1e8 and 1e7 (1 s and 0.1 s over 10 s)", ps.CPU.UsageNanoCores, c.CPU.UsageNanoCores)
	}
	if ps.CPU.PSI == nil || ps.Memory.PSI == nil || ps.IO == nil || c.CPU.PSI == nil || c.Memory.PSI == nil || c.IO == nil {
		t.Errorf("PSI pod %v %v %v container %v %v %v, want all from the unified hierarchy", ps.CPU.PSI, ps.Memory.PSI, ps.IO, c.CPU.PSI, c.Memory.PSI, c.IO)
	} else if ps.CPU.PSI.Some.Total != 10000 {
		t.Errorf("pod CPU some total %d, want 10 µs in ns", ps.CPU.PSI.Some.Total)
	}
	if ps.Network == nil || ps.Network.InterfaceStats.Name != "eth0" || *ps.Network.InterfaceStats.RxBytes != 1234 || len(ps.Network.Interfaces) != 1 {
		t.Errorf("network %+v, want the sandbox's eth0 without lo", ps.Network)
	}
	if c.Rootfs.CapacityBytes == nil || *c.Rootfs.CapacityBytes != capacity || *c.Rootfs.UsedBytes != 4096 {
		t.Errorf("rootfs %+v, want the runtime's usage on the image filesystem", c.Rootfs)
	}
	if c.Logs == nil || c.Logs.UsedBytes == nil || *c.Logs.UsedBytes == 0 || *c.Logs.InodesUsed != 2 || *c.Logs.InodesFree != free {
		t.Errorf("logs %+v, want the container's log directory (itself and one file)", c.Logs)
	}
}

// The node's image filesystem is the runtime's usage on the filesystem of
// its mountpoint; the containers' layers are on it unless the runtime
// names another.
func TestImageFsStats(t *testing.T) {
	images, layers := t.TempDir(), t.TempDir()
	usage := func(dir string, used uint64) *runtimeapi.FilesystemUsage {
		return &runtimeapi.FilesystemUsage{Timestamp: 5, FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: dir},
			UsedBytes: &runtimeapi.UInt64Value{Value: used}, InodesUsed: &runtimeapi.UInt64Value{Value: 7}}
	}
	for _, tc := range []struct {
		name                      string
		image, container          []*runtimeapi.FilesystemUsage
		wantErr                   bool
		wantImageUsed, wantCtUsed uint64
	}{
		{name: "one filesystem", image: []*runtimeapi.FilesystemUsage{usage(images, 4096)}, wantImageUsed: 4096, wantCtUsed: 4096},
		{name: "split", image: []*runtimeapi.FilesystemUsage{usage(images, 4096)}, container: []*runtimeapi.FilesystemUsage{usage(layers, 8192)}, wantImageUsed: 4096, wantCtUsed: 8192},
		{name: "none", wantErr: true},
		{name: "a mountpoint that is not there", image: []*runtimeapi.FilesystemUsage{usage(filepath.Join(images, "gone"), 1)}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			is := criapitesting.NewFakeImageService()
			is.FakeFilesystemUsage, is.FakeContainerFilesystemUsage = tc.image, tc.container
			p := &Provider{runtime: &criRuntime{conn: &connection{runtime: criapitesting.NewFakeRuntimeService(), images: is}}}
			imageFs, containerFs, err := p.ImageFsStats(context.Background())
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if tc.wantErr {
				return
			}
			for name, fs := range map[string]*statsv1alpha1.FsStats{"image": imageFs, "container": containerFs} {
				if fs.CapacityBytes == nil || *fs.CapacityBytes == 0 || fs.AvailableBytes == nil || fs.Inodes == nil || fs.InodesFree == nil || *fs.InodesUsed != 7 {
					t.Errorf("%s filesystem %+v, want its size and the runtime's inodes", name, fs)
				}
			}
			if *imageFs.UsedBytes != tc.wantImageUsed || *containerFs.UsedBytes != tc.wantCtUsed {
				t.Errorf("used image %d container %d, want %d and %d", *imageFs.UsedBytes, *containerFs.UsedBytes, tc.wantImageUsed, tc.wantCtUsed)
			}
		})
	}
}

// A restarted container's earlier instance, which the runtime lists under
// the same name (here after the running one), is neither reported nor
// the one whose ID the host's figures are read by.
func TestPodStatsIDsOfRestartedContainers(t *testing.T) {
	md := &runtimeapi.ContainerMetadata{Name: "app"}
	sb := &criSandbox{id: "sb1", containers: map[string][]*criContainer{
		"app": {{id: "old", status: lifecycle.ContainerStatus{Name: "app", State: lifecycle.StateExited}},
			{id: "new", status: lifecycle.ContainerStatus{Name: "app", State: lifecycle.StateRunning}}},
	}}
	ps, ids := sb.podStats(&runtimeapi.PodSandboxStats{
		Attributes: &runtimeapi.PodSandboxAttributes{Id: "sb1", Metadata: &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "ns", Uid: "u1"}},
		Linux: &runtimeapi.LinuxPodSandboxStats{Containers: []*runtimeapi.ContainerStats{
			{Attributes: &runtimeapi.ContainerAttributes{Id: "new", Metadata: md}},
			{Attributes: &runtimeapi.ContainerAttributes{Id: "old", Metadata: md}},
		}},
	})
	if len(ps.Containers) != 1 || ids["app"] != "new" || len(ids) != 1 {
		t.Errorf("containers %+v ids %v, want app once, by its running instance's ID", ps.Containers, ids)
	}
}
