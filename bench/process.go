package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// processResult is what the process provider scored: pods of a Deployment
// placed by the real scheduler, from creation to Running and Ready, and the
// agent's cost while they run idle.
type processResult struct {
	Agent         string  `json:"agent"`
	Pods          int     `json:"pods"`
	PodRunningP50 float64 `json:"podCreateToRunningP50Seconds"`
	PodRunningP99 float64 `json:"podCreateToRunningP99Seconds"`
	// The two parts of that: the scheduler's, and the agent's.
	PodBoundP50       float64 `json:"podCreateToBoundP50Seconds"`
	PodBoundP99       float64 `json:"podCreateToBoundP99Seconds"`
	BoundToRunningP50 float64 `json:"podBoundToRunningP50Seconds"`
	BoundToRunningP99 float64 `json:"podBoundToRunningP99Seconds"`
	// CPU seconds the whole machine (control plane, agent, sandboxes,
	// containers) and the agent alone used from the Deployment's creation
	// until every pod was Running.
	StartMachineCPUSeconds float64 `json:"startMachineCPUSeconds"`
	StartAgentCPUSeconds   float64 `json:"startAgentCPUSeconds"`
	IdleSeconds            float64 `json:"idleSeconds"`
	IdleAgentCores         float64 `json:"idleAgentCores"`
	IdleAgentRSSMiB        float64 `json:"idleAgentRSSMiB"`
	AgentPeakRSSMiB        float64 `json:"agentPeakRSSMiB"`
	LastDeleteToGone       float64 `json:"lastDeleteToAllGoneSeconds"`
	SupervisorsRSSMiB      float64 `json:"sandboxesAndShimsRSSMiB"`
	// StartCPUByCommand is the CPU seconds each command used until all
	// pods were Running.
	StartCPUByCommand map[string]float64 `json:"startCPUSecondsByCommand"`
	// StartRequestsPerPod is the apiserver's requests by kind, per pod,
	// until all pods were Running.
	StartRequestsPerPod map[string]float64 `json:"startRequestsPerPod"`
}

// measureProcess runs one process-provider node and a Deployment of m
// replicas on it.
func measureProcess(ctx context.Context, o options, m int, idle time.Duration) (processResult, error) {
	r := processResult{Agent: "nodelet-" + o.deployProvider, Pods: m}
	cp, err := startControlPlane(ctx, o.bin, o.keep)
	if err != nil {
		return r, err
	}
	defer cp.stop()
	cl, err := newCluster(cp.kubeconfig)
	if err != nil {
		return r, err
	}
	defer cl.stop()
	// A pod counts as created when the watch first sees it: creation
	// timestamps have whole seconds only.
	seen := map[string]time.Time{}
	inf := cl.podInformer()
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		p := obj.(*corev1.Pod)
		cl.mu.Lock()
		if _, ok := seen[p.Name]; !ok {
			seen[p.Name] = time.Now()
		}
		cl.mu.Unlock()
	}})

	rootDir := filepath.Join(cp.dir, "nodelet")
	args := []string{filepath.Join(o.bin, "nodelet"), "--kubeconfig", cp.kubeconfig, "--node-name", "bench-process",
		"--provider", o.deployProvider, "--root-dir", rootDir, "--port", "10251",
		"--client-ca-file", filepath.Join(cp.dir, "pki", "ca.crt"), fmt.Sprintf("-v=%d", o.agentV)}
	proc, err := startAgent(cp.dir, "nodelet-process", args)
	if err != nil {
		return r, err
	}
	defer proc.stop()
	if err := cl.waitNodesReady(ctx, 1, 2*time.Minute); err != nil {
		return r, fmt.Errorf("process node: %w (log %s)", err, proc.logPath)
	}

	deploy := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "idle", Namespace: benchNamespace},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(m)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "idle"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "idle"}},
				Spec: corev1.PodSpec{
					NodeSelector:                  map[string]string{"kubernetes.io/hostname": "bench-process"},
					TerminationGracePeriodSeconds: ptr.To(int64(5)),
					AutomountServiceAccountToken:  ptr.To(false),
					Containers:                    []corev1.Container{{Name: "app", Image: "bench:1", Command: []string{"sleep", "3600"}}},
				},
			},
		},
	}
	machine0, agent0, byCommand0 := machineCPU(), procCPU(proc.cmd.Process.Pid), cpuByProcess()
	requests0, err := cl.requestsByKind(ctx)
	if err != nil {
		return r, err
	}
	logf("process: creating a Deployment of %d replicas", m)
	if _, err := cl.client.AppsV1().Deployments(benchNamespace).Create(ctx, deploy, metav1.CreateOptions{}); err != nil {
		return r, fmt.Errorf("create deployment: %w", err)
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		cl.mu.Lock()
		n := len(cl.running)
		cl.mu.Unlock()
		if n >= m {
			break
		}
		if time.Now().After(deadline) {
			return r, fmt.Errorf("%d of %d pods Running after 5 minutes (log %s)", n, m, proc.logPath)
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.StartMachineCPUSeconds = machineCPU() - machine0
	r.StartAgentCPUSeconds = procCPU(proc.cmd.Process.Pid) - agent0
	r.StartCPUByCommand = cpuByCommand(byCommand0, cpuByProcess())
	requests, err := cl.requestsByKind(ctx)
	if err != nil {
		return r, err
	}
	r.StartRequestsPerPod = map[string]float64{}
	for kind, n := range requests {
		if per := (n - requests0[kind]) / float64(m); per >= 0.1 {
			r.StartRequestsPerPod[kind] = math.Round(per*10) / 10
		}
	}
	cl.mu.Lock()
	var lat, toBound, boundToRunning []time.Duration
	for name, t := range cl.running {
		lat = append(lat, max(t.Sub(seen[name]), 0))
		toBound = append(toBound, max(cl.bound[name].Sub(seen[name]), 0))
		boundToRunning = append(boundToRunning, max(t.Sub(cl.bound[name]), 0))
	}
	cl.mu.Unlock()
	s := sortedSeconds(lat)
	r.PodRunningP50, r.PodRunningP99 = percentile(s, 0.5), percentile(s, 0.99)
	s = sortedSeconds(toBound)
	r.PodBoundP50, r.PodBoundP99 = percentile(s, 0.5), percentile(s, 0.99)
	s = sortedSeconds(boundToRunning)
	r.BoundToRunningP50, r.BoundToRunningP99 = percentile(s, 0.5), percentile(s, 0.99)
	logf("process: %d pods Running: p50 %.3fs p99 %.3fs (created→bound p50 %.3fs p99 %.3fs; bound→Running p50 %.3fs p99 %.3fs)",
		m, r.PodRunningP50, r.PodRunningP99, r.PodBoundP50, r.PodBoundP99, r.BoundToRunningP50, r.BoundToRunningP99)
	logf("process: CPU until all Running: machine %.2fs (%.0f ms a pod), agent %.2fs; by command: %v", r.StartMachineCPUSeconds,
		1000*r.StartMachineCPUSeconds/float64(m), r.StartAgentCPUSeconds, r.StartCPUByCommand)
	logf("process: API requests a pod until all Running: %v", r.StartRequestsPerPod)

	cpu0 := procCPU(proc.cmd.Process.Pid)
	time.Sleep(idle)
	r.IdleSeconds = idle.Seconds()
	r.IdleAgentCores = (procCPU(proc.cmd.Process.Pid) - cpu0) / idle.Seconds()
	r.IdleAgentRSSMiB = procRSS(proc.cmd.Process.Pid)
	r.AgentPeakRSSMiB = procPeakRSS(proc.cmd.Process.Pid)
	r.SupervisorsRSSMiB = supervisorsRSS(rootDir)
	logf("process: idle %s: agent %.3f cores, RSS %.0f MiB; sandboxes and shims %.0f MiB", idle, r.IdleAgentCores, r.IdleAgentRSSMiB, r.SupervisorsRSSMiB)

	start := time.Now()
	if err := cl.client.AppsV1().Deployments(benchNamespace).Delete(ctx, "idle", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)}); err != nil {
		return r, fmt.Errorf("delete deployment: %w", err)
	}
	for len(inf.GetStore().List()) > 0 {
		if time.Since(start) > 5*time.Minute {
			return r, fmt.Errorf("pods left 5 minutes after the deletion")
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.LastDeleteToGone = time.Since(start).Seconds()
	return r, nil
}

// processCPU is what one process has used: its own CPU and its waited-for
// children's, in seconds.
type processCPU struct {
	comm string
	cpu  float64
}

// cpuByProcess reads every process's CPU use.
func cpuByProcess() map[int]processCPU {
	out := map[int]processCPU{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, self, children := procStat(pid)
		if comm != "" {
			out[pid] = processCPU{comm, self + children}
		}
	}
	return out
}

// cpuByCommand sums, by command name, the CPU seconds processes used between
// two readings (processes that came and went unwaited-for are missed).
func cpuByCommand(before, after map[int]processCPU) map[string]float64 {
	out := map[string]float64{}
	for pid, a := range after {
		used := a.cpu
		if b, ok := before[pid]; ok && b.comm == a.comm {
			used -= b.cpu
		}
		out[a.comm] += used
	}
	for comm, used := range out {
		if used < 0.01 {
			delete(out, comm)
		} else {
			out[comm] = math.Round(used*100) / 100
		}
	}
	return out
}

// machineCPU is the CPU seconds every core of the machine has been busy.
func machineCPU() float64 {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return math.NaN()
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal ...
	busy := 0.0
	for _, i := range []int{1, 2, 3, 6, 7} { // user nice system irq softirq
		var x float64
		if i < len(f) {
			fmt.Sscan(f[i], &x)
		}
		busy += x
	}
	return busy / 100 // USER_HZ
}

// procRSS is a process's resident memory now, in MiB.
func procRSS(pid int) float64 { return procStatusKB(pid, "VmRSS") / 1024 }

// supervisorsRSS sums the resident memory of the sandboxes and shims whose
// command line names rootDir.
func supervisorsRSS(rootDir string) float64 {
	entries, _ := os.ReadDir("/proc")
	total := 0.0
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if strings.Contains(string(cmdline), rootDir) && strings.Contains(string(cmdline), "runtime-") {
			total += procRSS(pid)
		}
	}
	return total
}
