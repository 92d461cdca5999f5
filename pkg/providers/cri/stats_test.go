package cri

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	criapitesting "k8s.io/cri-api/pkg/apis/testing"
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
