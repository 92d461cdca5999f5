package stats

import (
	"slices"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	testingclock "k8s.io/utils/clock/testing"
)

func TestReadPSI(t *testing.T) {
	for _, tc := range []struct {
		name, content string
		want          *statsv1alpha1.PSIStats
		wantErr       bool
	}{{
		name: "some and full",
		content: "some avg10=1.50 avg60=0.25 avg300=0.00 total=7332\n" +
			"full avg10=0.00 avg60=0.10 avg300=2.00 total=12\n",
		want: &statsv1alpha1.PSIStats{
			Some: statsv1alpha1.PSIData{Avg10: 1.5, Avg60: 0.25, Total: 7332000},
			Full: statsv1alpha1.PSIData{Avg60: 0.1, Avg300: 2, Total: 12000},
		},
	}, {
		name:    "a kernel without a full line for the CPU",
		content: "some avg10=0.00 avg60=0.00 avg300=0.00 total=5\n",
		want:    &statsv1alpha1.PSIStats{Some: statsv1alpha1.PSIData{Total: 5000}},
	}, {
		name:    "no some line",
		content: "full avg10=0.00 avg60=0.00 avg300=0.00 total=5\n",
		wantErr: true,
	}, {
		name:    "a malformed figure",
		content: "some avg10=x avg60=0.00 avg300=0.00 total=5\n",
		wantErr: true,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.write(f.proc, "pressure/cpu", tc.content)
			got, err := ReadPSI(f.proc + "/pressure/cpu")
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if !tc.wantErr && *got != *tc.want {
				t.Errorf("got %+v, want %+v", *got, *tc.want)
			}
		})
	}
}

func TestProcessCgroups(t *testing.T) {
	for _, tc := range []struct {
		name, content string
		want          CgroupPaths
		wantErr       bool
	}{{
		name:    "cgroup v1 in hybrid mode",
		content: "9:name=systemd:/a\n4:memory:/m/x\n2:cpu,cpuacct:/c\n0::/u/x\n",
		want:    CgroupPaths{CPU: "/c", Memory: "/m/x", Unified: "/u/x"},
	}, {
		name:    "cgroup v2",
		content: "0::/system.slice/nodelet.service\n",
		want:    Named("/system.slice/nodelet.service"),
	}, {
		name:    "no memory controller",
		content: "2:cpuacct:/c\n",
		wantErr: true,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.write(f.proc, "self/cgroup", tc.content)
			got, err := ProcessCgroups(f.proc + "/self/cgroup")
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// v1Cgroup writes a cgroup v1 cgroup at path in the cpuacct and memory
// hierarchies of the fixture, with its PSI in the hybrid unified one.
func (f *fixture) v1Cgroup(path string, cpuNanos uint64, limit string, psi bool) {
	f.write(f.cgrp, "cpuacct"+path+"/cpuacct.usage", u(cpuNanos)+"\n")
	f.write(f.cgrp, "memory"+path+"/memory.usage_in_bytes", "5000000\n")
	f.write(f.cgrp, "memory"+path+"/memory.limit_in_bytes", limit+"\n")
	f.write(f.cgrp, "memory"+path+"/memory.stat", "cache 1\nrss 2\npgfault 4000\npgmajfault 4\ntotal_rss 3000000\ntotal_inactive_file 1000000\ntotal_pgfault 2213850\ntotal_pgmajfault 40\n")
	f.write(f.cgrp, "unified/cgroup.procs", "")
	if psi {
		for _, r := range []string{"cpu", "memory", "io"} {
			f.write(f.cgrp, "unified"+path+"/"+r+".pressure", "some avg10=0.00 avg60=0.00 avg300=0.00 total=10\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=1\n")
		}
	}
}

func TestHostSystemContainers(t *testing.T) {
	f := newFixture(t)
	f.write(f.proc, "pressure/cpu", "some avg10=0.00 avg60=0.00 avg300=0.00 total=10\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
	f.write(f.proc, "pressure/memory", "some avg10=0.00 avg60=0.00 avg300=0.00 total=10\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
	f.write(f.proc, "pressure/io", "some avg10=0.00 avg60=0.00 avg300=0.00 total=10\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
	f.v1Cgroup("/kubepods", 2e9, "8000000", true)
	f.v1Cgroup("/run/agent", 1e9, "9223372036854771712", true)
	f.v1Cgroup("/run/runtime", 1e9, "9223372036854771712", false)
	f.write(f.proc, "42/cgroup", "4:memory:/run/agent\n2:cpuacct:/run/agent\n0::/run/agent\n")
	f.write(f.proc, "43/cgroup", "4:memory:/m\n2:cpuacct:/\n0::/\n")
	f.write(f.proc, "44/cgroup", "4:memory:/\n2:cpuacct:/\n0::/\n")
	agentStart := time.Unix(1700000100, 0)
	clk := testingclock.NewFakePassiveClock(time.Unix(1700001000, 0))
	h := NewHost(HostOptions{ProcRoot: f.proc, CgroupRoot: f.cgrp, RootDir: t.TempDir(), Clock: clk, SystemContainers: []SystemContainer{
		{Name: statsv1alpha1.SystemContainerKubelet, PID: 42, StartTime: agentStart},
		{Name: statsv1alpha1.SystemContainerRuntime, Cgroup: "/run/runtime"},
		{Name: statsv1alpha1.SystemContainerPods, Cgroup: "/kubepods"},
		{Name: "split", PID: 43},
		{Name: "root", PID: 44},
		{Name: "missing", Cgroup: "/nowhere"},
	}})
	_, ctx := ktesting.NewTestContext(t)
	if _, err := h.NodeStats(ctx, "n"); err != nil {
		t.Fatal(err)
	}
	f.v1Cgroup("/kubepods", 3e9, "8000000", true)
	clk.SetTime(clk.Now().Add(10 * time.Second))
	node, err := h.NodeStats(ctx, "n")
	if err != nil {
		t.Fatal(err)
	}
	if node.CPU.PSI == nil || node.Memory.PSI == nil || node.IO == nil || node.IO.PSI == nil {
		t.Errorf("node PSI: cpu %v, memory %v, io %v; want all", node.CPU.PSI, node.Memory.PSI, node.IO)
	}
	got := map[string]statsv1alpha1.ContainerStats{}
	for _, c := range node.SystemContainers {
		got[c.Name] = c
	}
	if len(got) != 3 {
		t.Fatalf("system containers %v; want kubelet, runtime, pods (a process split between cgroups, one in the root and a missing cgroup left out)", keys(got))
	}
	kubelet, runtime, pods := got[statsv1alpha1.SystemContainerKubelet], got[statsv1alpha1.SystemContainerRuntime], got[statsv1alpha1.SystemContainerPods]
	if !kubelet.StartTime.Time.Equal(agentStart) {
		t.Errorf("kubelet start %v, want the agent's %v", kubelet.StartTime, agentStart)
	}
	for name, c := range got {
		if deref(t, name+" usage", c.CPU.UsageCoreNanoSeconds) == 0 || deref(t, name+" working set", c.Memory.WorkingSetBytes) != 4000000 ||
			deref(t, name+" rss", c.Memory.RSSBytes) != 3000000 || deref(t, name+" page faults", c.Memory.PageFaults) != 4000 {
			t.Errorf("%s: cpu %+v memory %+v", name, c.CPU, c.Memory)
		}
	}
	if kubelet.Memory.AvailableBytes != nil {
		t.Errorf("kubelet available %d, want none without a limit", *kubelet.Memory.AvailableBytes)
	}
	if deref(t, "pods available", pods.Memory.AvailableBytes) != 4000000 {
		t.Errorf("pods available %d, want limit - working set", *pods.Memory.AvailableBytes)
	}
	if deref(t, "pods rate", pods.CPU.UsageNanoCores) != 1e8 {
		t.Errorf("pods rate %d, want 1s over 10s", *pods.CPU.UsageNanoCores)
	}
	if kubelet.CPU.PSI == nil || kubelet.Memory.PSI == nil || kubelet.IO == nil {
		t.Errorf("kubelet PSI: %v %v %v, want read from the unified hierarchy", kubelet.CPU.PSI, kubelet.Memory.PSI, kubelet.IO)
	}
	if runtime.CPU.PSI != nil || runtime.Memory.PSI != nil || runtime.IO != nil {
		t.Errorf("runtime PSI %v %v %v, want none where the unified hierarchy has no such cgroup", runtime.CPU.PSI, runtime.Memory.PSI, runtime.IO)
	}
}

func keys(m map[string]statsv1alpha1.ContainerStats) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// A cgroup's processes come from the unified hierarchy where the runtime
// placed it there, else from cgroup v1's cpu hierarchy.
func TestCgroupProcs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  []int
	}{
		{name: "hybrid", files: map[string]string{"unified/cgroup.procs": "", "unified/pod/sb/cgroup.procs": "7\n", "cpu/pod/sb/cgroup.procs": "8\n"}, want: []int{7}},
		{name: "hybrid, not placed in the unified hierarchy", files: map[string]string{"unified/cgroup.procs": "", "cpu/pod/sb/cgroup.procs": "8\n9\n"}, want: []int{8, 9}},
		{name: "cgroup v2", files: map[string]string{"cgroup.controllers": "cpu\n", "pod/sb/cgroup.procs": "5\n"}, want: []int{5}},
		{name: "gone", files: map[string]string{"unified/cgroup.procs": ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			writeFiles(t, root, tc.files)
			got, err := CgroupFS{Root: root}.Procs("/pod/sb")
			if (err != nil) != (tc.want == nil) {
				t.Fatalf("err = %v, want one %v", err, tc.want == nil)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("procs %v, want %v", got, tc.want)
			}
		})
	}
}

// Rates are per key, measured over at least a second, and forgotten for
// keys that are gone.
func TestCPURates(t *testing.T) {
	var r CPURates
	t0 := time.Unix(1000, 0)
	if _, ok := r.Rate("a", t0, 1e9); ok {
		t.Error("a rate from one sample")
	}
	r.Rate("b", t0, 5)
	if got, ok := r.Rate("a", t0.Add(2*time.Second), 2e9); !ok || got != 5e8 {
		t.Errorf("rate %d %v, want 5e8", got, ok)
	}
	if got, ok := r.Rate("a", t0.Add(2*time.Second+time.Millisecond), 3e9); !ok || got != 5e8 {
		t.Errorf("rate a millisecond later %d %v, want the last measured", got, ok)
	}
	r.Forget(func(k string) bool { return k == "a" })
	if _, ok := r.Rate("b", t0.Add(10*time.Second), 10); ok {
		t.Error("a rate for a forgotten key")
	}
}

// A longer MinInterval keeps the sample a rate is measured from until it
// has passed: a sample sooner gives the last rate and is not kept.
func TestCPURatesMinInterval(t *testing.T) {
	r := CPURates{MinInterval: 10 * time.Second}
	t0 := time.Unix(1000, 0)
	r.Rate("a", t0, 0)
	if _, ok := r.Rate("a", t0.Add(2*time.Second), 0); ok {
		t.Error("a rate over 2 s")
	}
	if got, ok := r.Rate("a", t0.Add(10*time.Second), 1e9); !ok || got != 1e8 {
		t.Errorf("rate %d %v, want 1e8 over the 10 s since the first sample", got, ok)
	}
}
