package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/config"
	"github.com/nodelet/nodelet/test/crienv"
)

// The cri benchmark: the real kubelet and nodelet's cri provider, one after
// the other, each as the only agent on one private containerd, each running
// the same Deployment placed by the real scheduler on its node. Both share
// one control plane, one containerd and one registry; the image is pulled
// before either runs, so no pull is measured.

// criImage is the image of the Deployment's containers, also containerd's
// sandbox image: one pull serves both.
const criImage = crienv.DefaultSandboxImage

// criOptions are the cri benchmark's own options.
type criOptions struct {
	pods      int
	idle      time.Duration
	agents    []string // "kubelet", "kubelet-matched", "nodelet", in the order they run
	imagesDir string   // the OCI layout bin/images serves
	settle    time.Duration
}

// criResult is what one agent scored.
type criResult struct {
	Agent string `json:"agent"`
	// Setting is the agent's API client limit (the rest of the kubelet's
	// configuration is in its file, beside its log).
	Setting agentSetting `json:"setting"`
	Node    string       `json:"node"`
	Pods    int          `json:"pods"`
	// The agent's command line (the kubelet's configuration file is
	// beside its log).
	Args []string `json:"args"`
	// From the agent's start until its Node is Ready without taints.
	NodeReadySeconds float64 `json:"nodeReadySeconds"`
	// Each pod from the moment a watch first sees it to Running and Ready,
	// and the two parts of that: the scheduler's and the agent's.
	PodRunningP50     float64 `json:"podCreateToRunningP50Seconds"`
	PodRunningP99     float64 `json:"podCreateToRunningP99Seconds"`
	PodBoundP50       float64 `json:"podCreateToBoundP50Seconds"`
	PodBoundP99       float64 `json:"podCreateToBoundP99Seconds"`
	BoundToRunningP50 float64 `json:"podBoundToRunningP50Seconds"`
	BoundToRunningP99 float64 `json:"podBoundToRunningP99Seconds"`
	// From the Deployment's creation until every pod is Running.
	DeploymentToAllRunning float64 `json:"deploymentCreateToAllRunningSeconds"`
	// CPU seconds from the Deployment's creation until every pod was
	// Running: the agent, the runtime (containerd, its shims and their
	// runc calls) and the whole machine (control plane included).
	StartAgentCPUSeconds   float64 `json:"startAgentCPUSeconds"`
	StartRuntimeCPUSeconds float64 `json:"startRuntimeCPUSeconds"`
	StartMachineCPUSeconds float64 `json:"startMachineCPUSeconds"`
	// The apiserver's requests by kind ("PATCH pods/status"), per pod,
	// from the Deployment's creation until every pod was Running.
	StartRequestsPerPod map[string]float64 `json:"startRequestsPerPod"`
	// The pods running idle: the agent's and the runtime's CPU, the
	// agent's memory at the end.
	IdleSeconds      float64 `json:"idleSeconds"`
	IdleAgentCores   float64 `json:"idleAgentCores"`
	IdleRuntimeCores float64 `json:"idleRuntimeCores"`
	IdleAgentRSSMiB  float64 `json:"idleAgentRSSMiB"`
	// From the Deployment's deletion (foreground) until the API has no pod
	// left, and until the runtime has no sandbox left (-1: not within three
	// minutes).
	DeleteToGone         float64 `json:"deploymentDeleteToAllGoneSeconds"`
	DeleteToRuntimeEmpty float64 `json:"deploymentDeleteToRuntimeEmptySeconds"`
	// The agent's CPU seconds and peak RSS from its start until all pods
	// were gone from the API.
	AgentCPUSeconds float64 `json:"agentCPUSeconds"`
	AgentPeakRSSMiB float64 `json:"agentPeakRSSMiB"`
	// What the agent left once stopped, which the benchmark removed:
	// sandboxes and containers in the runtime, pod cgroups.
	LeftSandboxes  int `json:"leftSandboxes"`
	LeftContainers int `json:"leftContainers"`
	LeftPodCgroups int `json:"leftPodCgroups"`
}

// measureCRI starts the registry, a control plane and one containerd, pulls
// the image, and runs each agent in turn.
func measureCRI(ctx context.Context, o options, co criOptions) ([]criResult, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("the cri benchmark runs containerd and the kubelet: it needs root")
	}
	bin, err := filepath.Abs(o.bin)
	if err != nil {
		return nil, err
	}
	o.bin = bin
	cp, err := startControlPlane(ctx, o.bin, o.keep)
	if err != nil {
		return nil, err
	}
	defer cp.stop()
	reg, err := startRegistry(filepath.Join(o.bin, "images"), co.imagesDir, cp.dir)
	if err != nil {
		return nil, err
	}
	defer reg.stop()
	env, err := crienv.Start(ctx, crienv.Options{BinDir: o.bin, Mirror: "http://" + reg.addr})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := env.Stop(); err != nil {
			logf("cri: %v", err)
		}
	}()
	logf("cri: containerd %s (snapshotter %s), registry %s", env.Endpoint(), env.Snapshotter(), reg.addr)
	if err := prePull(ctx, env, criImage); err != nil {
		return nil, err
	}
	var results []criResult
	for _, agent := range co.agents {
		r, err := measureCRIAgent(ctx, o, co, cp, env, agent)
		if err != nil {
			return results, fmt.Errorf("%s: %w", agent, err)
		}
		results = append(results, r)
	}
	return results, nil
}

// prePull pulls the image into containerd, so that neither agent's run
// includes a pull.
func prePull(ctx context.Context, env *crienv.Env, image string) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if _, err := env.ImageClient().PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: image}}); err != nil {
		return fmt.Errorf("pre-pull %s: %w", image, err)
	}
	logf("cri: pre-pulled %s in %.1fs", image, time.Since(start).Seconds())
	return nil
}

// measureCRIAgent runs one agent on its own node until its Deployment has
// come and gone, stops it, and leaves the runtime empty for the next.
func measureCRIAgent(ctx context.Context, o options, co criOptions, cp *controlPlane, env *crienv.Env, agent string) (r criResult, err error) {
	node := "bench-" + agent
	r = criResult{Agent: agent, Node: node, Pods: co.pods}
	dir := filepath.Join(cp.dir, agent)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return r, err
	}
	cl, err := newCluster(cp.kubeconfig)
	if err != nil {
		return r, err
	}
	defer cl.stop()
	seen, uids := watchFirstSeen(cl)

	host, err := newHostState()
	if err != nil {
		return r, err
	}
	if r.Setting, err = criAgentSetting(agent); err != nil {
		return r, err
	}
	var args []string
	if agent == "nodelet" {
		args, err = nodeletCRIArgs(o, cp, env, dir, node)
	} else {
		args, err = kubeletArgs(o, cp, env, dir, node, r.Setting)
	}
	if err != nil {
		return r, err
	}

	r.Args = args
	logf("%s: starting on %s (%s)", agent, env.Endpoint(), r.Setting.Summary)
	start := time.Now()
	proc, err := startAgent(cp.dir, agent, args)
	if err != nil {
		return r, err
	}
	pid := proc.cmd.Process.Pid
	stopped := false
	defer func() {
		if !stopped {
			proc.stop()
		}
		// Whatever happened, the next agent starts on an empty runtime
		// and a host as it was.
		sbs, ctrs, cleanErr := cleanRuntime(env)
		cl.mu.Lock()
		ours := maps.Clone(uids)
		cl.mu.Unlock()
		cgroups, cgErr := host.restore(agent, dir, ours)
		r.LeftSandboxes, r.LeftContainers, r.LeftPodCgroups = sbs, ctrs, cgroups
		if sbs+ctrs+cgroups > 0 {
			logf("%s: left %d sandboxes, %d containers, %d pod cgroups (removed)", agent, sbs, ctrs, cgroups)
		}
		if delErr := cl.client.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{}); delErr != nil && !apierrors.IsNotFound(delErr) {
			cleanErr = errors.Join(cleanErr, fmt.Errorf("delete node: %w", delErr))
		}
		err = errors.Join(err, cleanErr, cgErr)
	}()
	if err := waitNodeSchedulable(ctx, cl, node, 3*time.Minute, proc); err != nil {
		return r, err
	}
	r.NodeReadySeconds = time.Since(start).Seconds()
	logf("%s: node %s Ready in %.1fs; settling %s", agent, node, r.NodeReadySeconds, co.settle)
	time.Sleep(co.settle)

	requests0, err := cl.requestsByKind(ctx)
	if err != nil {
		return r, err
	}
	machine0, agent0, runtime0 := machineCPU(), procCPU(pid), runtimeCPU(env.Dir())
	created := time.Now()
	if _, err := cl.client.AppsV1().Deployments(benchNamespace).Create(ctx, criDeployment(node, co.pods), metav1.CreateOptions{}); err != nil {
		return r, fmt.Errorf("create deployment: %w", err)
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		cl.mu.Lock()
		n := len(cl.running)
		cl.mu.Unlock()
		if n >= co.pods {
			break
		}
		if time.Now().After(deadline) {
			return r, fmt.Errorf("%d of %d pods Running after 5 minutes (log %s)", n, co.pods, proc.logPath)
		}
		if !proc.alive() {
			return r, fmt.Errorf("exited (log %s)", proc.logPath)
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.StartMachineCPUSeconds = round2(machineCPU() - machine0)
	r.StartAgentCPUSeconds = round2(procCPU(pid) - agent0)
	r.StartRuntimeCPUSeconds = round2(runtimeCPU(env.Dir()).since(runtime0))
	requests, err := cl.requestsByKind(ctx)
	if err != nil {
		return r, err
	}
	r.StartRequestsPerPod = map[string]float64{}
	for kind, n := range requests {
		if per := (n - requests0[kind]) / float64(co.pods); per >= 0.1 {
			r.StartRequestsPerPod[kind] = math.Round(per*10) / 10
		}
	}
	r.PodRunningP50, r.PodRunningP99, r.PodBoundP50, r.PodBoundP99, r.BoundToRunningP50, r.BoundToRunningP99, r.DeploymentToAllRunning = latencies(cl, seen, created)
	logf("%s: %d pods Running: p50 %.3fs p99 %.3fs (created→bound p50 %.3fs p99 %.3fs; bound→Running p50 %.3fs p99 %.3fs); all Running %.2fs after the Deployment",
		agent, co.pods, r.PodRunningP50, r.PodRunningP99, r.PodBoundP50, r.PodBoundP99, r.BoundToRunningP50, r.BoundToRunningP99, r.DeploymentToAllRunning)
	logf("%s: CPU until all Running: agent %.2fs, runtime %.2fs, machine %.2fs", agent, r.StartAgentCPUSeconds, r.StartRuntimeCPUSeconds, r.StartMachineCPUSeconds)
	logf("%s: API requests a pod until all Running: %v", agent, r.StartRequestsPerPod)

	agent0, runtime0 = procCPU(pid), runtimeCPU(env.Dir())
	time.Sleep(co.idle)
	r.IdleSeconds = co.idle.Seconds()
	r.IdleAgentCores = round2((procCPU(pid)-agent0)/co.idle.Seconds()*10) / 10
	r.IdleRuntimeCores = round2(runtimeCPU(env.Dir()).since(runtime0)/co.idle.Seconds()*10) / 10
	r.IdleAgentRSSMiB = procRSS(pid)
	logf("%s: idle %s: agent %.3f cores, RSS %.0f MiB; runtime %.3f cores", agent, co.idle, r.IdleAgentCores, r.IdleAgentRSSMiB, r.IdleRuntimeCores)

	deleted := time.Now()
	if err := cl.client.AppsV1().Deployments(benchNamespace).Delete(ctx, "idle", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)}); err != nil {
		return r, fmt.Errorf("delete deployment: %w", err)
	}
	for len(cl.podInformer().GetStore().List()) > 0 {
		if time.Since(deleted) > 5*time.Minute {
			return r, fmt.Errorf("pods left 5 minutes after the deletion (log %s)", proc.logPath)
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.DeleteToGone = time.Since(deleted).Seconds()
	r.AgentCPUSeconds, r.AgentPeakRSSMiB = proc.usage()
	r.AgentCPUSeconds = round2(r.AgentCPUSeconds)
	logf("%s: all pods gone %.2fs after the deletion; agent %.1f CPU s, peak RSS %.0f MiB", agent, r.DeleteToGone, r.AgentCPUSeconds, r.AgentPeakRSSMiB)

	// The kubelet removes the sandboxes of deleted pods in its garbage
	// collection (every minute); give either agent up to three.
	r.DeleteToRuntimeEmpty = -1
	for time.Since(deleted) < 3*time.Minute {
		n, err := sandboxCount(ctx, env)
		if err != nil {
			return r, err
		}
		if n == 0 {
			r.DeleteToRuntimeEmpty = time.Since(deleted).Seconds()
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	logf("%s: runtime empty %.2fs after the deletion", agent, r.DeleteToRuntimeEmpty)

	proc.stop()
	stopped = true
	return r, nil
}

// round2 rounds CPU figures, which /proc gives in hundredths of a second,
// to hundredths.
func round2(x float64) float64 { return math.Round(x*100) / 100 }

// watchFirstSeen records when the watch first sees each pod (creation
// timestamps have whole seconds only), and the pods' UIDs, under cl.mu.
func watchFirstSeen(cl *cluster) (seen map[string]time.Time, uids map[string]bool) {
	seen, uids = map[string]time.Time{}, map[string]bool{}
	_, _ = cl.podInformer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		p := obj.(*corev1.Pod)
		cl.mu.Lock()
		if _, ok := seen[p.Name]; !ok {
			seen[p.Name] = time.Now()
		}
		uids[string(p.UID)] = true
		cl.mu.Unlock()
	}})
	return seen, uids
}

// latencies reads the pods' times: created→Running, created→bound and
// bound→Running (p50, p99), and the Deployment's creation to the last pod
// Running.
func latencies(cl *cluster, seen map[string]time.Time, created time.Time) (p50, p99, b50, b99, r50, r99, all float64) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	var lat, toBound, boundToRunning []time.Duration
	var last time.Time
	for name, t := range cl.running {
		lat = append(lat, max(t.Sub(seen[name]), 0))
		toBound = append(toBound, max(cl.bound[name].Sub(seen[name]), 0))
		boundToRunning = append(boundToRunning, max(t.Sub(cl.bound[name]), 0))
		if t.After(last) {
			last = t
		}
	}
	s := sortedSeconds(lat)
	p50, p99 = percentile(s, 0.5), percentile(s, 0.99)
	s = sortedSeconds(toBound)
	b50, b99 = percentile(s, 0.5), percentile(s, 0.99)
	s = sortedSeconds(boundToRunning)
	r50, r99 = percentile(s, 0.5), percentile(s, 0.99)
	return p50, p99, b50, b99, r50, r99, last.Sub(created).Seconds()
}

// criDeployment is the workload: m pause containers on the node, placed by
// the scheduler through a nodeSelector.
func criDeployment(node string, m int) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "idle", Namespace: benchNamespace},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(m)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "idle"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "idle"}},
				Spec: corev1.PodSpec{
					NodeSelector:                  map[string]string{"kubernetes.io/hostname": node},
					TerminationGracePeriodSeconds: ptr.To(int64(5)),
					AutomountServiceAccountToken:  ptr.To(false),
					Containers:                    []corev1.Container{{Name: "app", Image: criImage}},
				},
			},
		},
	}
}

// waitNodeSchedulable waits until the node is Ready and carries none of
// the node lifecycle controller's taints, so that the scheduler places pods
// on it at once.
func waitNodeSchedulable(ctx context.Context, cl *cluster, name string, timeout time.Duration, proc *process) error {
	deadline := time.Now().Add(timeout)
	for {
		if n, err := cl.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); err == nil && schedulable(n) {
			return nil
		}
		if !proc.alive() {
			return fmt.Errorf("exited before its node was Ready (log %s)", proc.logPath)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %s not Ready and untainted after %s (log %s)", name, timeout, proc.logPath)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func schedulable(n *corev1.Node) bool {
	ready := false
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			ready = true
		}
	}
	for _, t := range n.Spec.Taints {
		if t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute {
			return false
		}
	}
	return ready && !n.Spec.Unschedulable
}

// criFields is what a results file of the cri benchmark holds beside its
// provenance.
func criFields(co criOptions, results []criResult) map[string]any {
	return map[string]any{
		"image": criImage,
		"note": fmt.Sprintf("one control plane and one containerd for every agent, which run one after the other; %s pulled into containerd before any runs; each pod timed from the watch's first sight to Running and Ready; %s settle after the node is Ready",
			criImage, co.settle),
		"results": results,
	}
}

// printCRITable prints a column per agent and nodelet's ratio to each
// other agent, then what each ran with.
func printCRITable(w io.Writer, results []criResult) {
	var nodelet *criResult
	var others []criResult
	for i := range results {
		if results[i].Agent == "nodelet" {
			nodelet = &results[i]
		} else {
			others = append(others, results[i])
		}
	}
	if nodelet == nil {
		others = nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	header := "metric\t"
	for _, r := range results {
		header += r.Agent + "\t"
	}
	for _, r := range others {
		header += "nodelet/" + r.Agent + "\t"
	}
	fmt.Fprintln(tw, header)
	rows := []struct {
		name string
		get  func(criResult) float64
		f    string
	}{
		{"node Ready (s)", func(r criResult) float64 { return r.NodeReadySeconds }, "%.2f"},
		{"pod create→Running p50 (s)", func(r criResult) float64 { return r.PodRunningP50 }, "%.3f"},
		{"pod create→Running p99 (s)", func(r criResult) float64 { return r.PodRunningP99 }, "%.3f"},
		{"  bound→Running p50 (s)", func(r criResult) float64 { return r.BoundToRunningP50 }, "%.3f"},
		{"  bound→Running p99 (s)", func(r criResult) float64 { return r.BoundToRunningP99 }, "%.3f"},
		{"Deployment→all Running (s)", func(r criResult) float64 { return r.DeploymentToAllRunning }, "%.2f"},
		{"start: agent CPU (s)", func(r criResult) float64 { return r.StartAgentCPUSeconds }, "%.2f"},
		{"start: runtime CPU (s)", func(r criResult) float64 { return r.StartRuntimeCPUSeconds }, "%.2f"},
		{"start: machine CPU (s)", func(r criResult) float64 { return r.StartMachineCPUSeconds }, "%.2f"},
		{"idle: agent CPU (cores)", func(r criResult) float64 { return r.IdleAgentCores }, "%.3f"},
		{"idle: runtime CPU (cores)", func(r criResult) float64 { return r.IdleRuntimeCores }, "%.3f"},
		{"idle: agent RSS (MiB)", func(r criResult) float64 { return r.IdleAgentRSSMiB }, "%.0f"},
		{"delete→all gone (s)", func(r criResult) float64 { return r.DeleteToGone }, "%.2f"},
		{"delete→runtime empty (s)", func(r criResult) float64 { return r.DeleteToRuntimeEmpty }, "%.2f"},
		{"agent CPU, whole run (s)", func(r criResult) float64 { return r.AgentCPUSeconds }, "%.1f"},
		{"agent peak RSS (MiB)", func(r criResult) float64 { return r.AgentPeakRSSMiB }, "%.0f"},
	}
	for _, row := range rows {
		line := row.name + "\t"
		for _, r := range results {
			line += fmt.Sprintf(row.f, row.get(r)) + "\t"
		}
		for _, r := range others {
			if k, n := row.get(r), row.get(*nodelet); k > 0 && n >= 0 {
				line += fmt.Sprintf("%.2f", n/k)
			} else {
				line += "-"
			}
			line += "\t"
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
	fmt.Fprintln(w, "settings:")
	for _, r := range results {
		fmt.Fprintf(w, "  %s: %s\n", r.Agent, r.Setting.Summary)
	}
}

// The kubelet's API client limit by default (KubeletConfiguration
// kubeAPIQPS and kubeAPIBurst, v1beta1 defaults).
const (
	kubeletDefaultQPS   = 50
	kubeletDefaultBurst = 100
)

// criAgentSetting is the API client limit each agent of the cri benchmark
// runs with: the kubelet at its default, kubelet-matched at nodelet's
// default, nodelet at its default.
func criAgentSetting(agent string) (agentSetting, error) {
	c := config.Default()
	qps, burst := int(c.KubeAPIQPS), int(c.KubeAPIBurst)
	values := func(q, b int) map[string]int { return map[string]int{"kubeAPIQPS": q, "kubeAPIBurst": b} }
	switch agent {
	case "kubelet":
		return agentSetting{Summary: fmt.Sprintf("kubelet defaults: kubeAPIQPS %d / kubeAPIBurst %d", kubeletDefaultQPS, kubeletDefaultBurst),
			Values: values(kubeletDefaultQPS, kubeletDefaultBurst)}, nil
	case "kubelet-matched":
		return agentSetting{Summary: fmt.Sprintf("kubelet with kubeAPIQPS %d / kubeAPIBurst %d, nodelet's defaults (its other settings as the kubelet's run)", qps, burst),
			Values: values(qps, burst)}, nil
	case "nodelet":
		return agentSetting{Summary: fmt.Sprintf("nodelet defaults: kubeAPIQPS %d / kubeAPIBurst %d", qps, burst), Values: values(qps, burst)}, nil
	}
	return agentSetting{}, fmt.Errorf("unknown agent %q (kubelet, kubelet-matched or nodelet)", agent)
}
