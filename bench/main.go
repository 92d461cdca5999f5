// Command bench measures nodelet's sim provider against kwok on the local
// control plane: N nodes Ready, M pods to Running and back (with the
// agent's API requests per deleted pod), the agent's CPU and memory (and
// nodelet's heap profile once every pod runs), and a steady state's API
// writes and lease lapses. kwok runs at its defaults and tuned (its
// parallelism raised to nodelet's worker counts); nodelet registers its
// own nodes, or as nodelet-takeover manages the Nodes the bench creates
// for kwok, with the same kwok stages (make bench-kwok-stages). Each
// agent gets a fresh control plane; the figures are printed as a table
// with the ratios nodelet/kwok and written as JSON. Run it with `make
// bench`.
//
// With --process-pods it measures the process provider instead (make
// bench-process), with --cri-pods the cri provider against the real
// kubelet, at its default client limit and at nodelet's, on one private
// containerd (make bench-cri), and with --stats what serving the kubelet
// stats endpoints to metrics-server costs a sim agent (go run ./bench
// --stats). With --soak it keeps one sim agent's pods churning for a long
// time and judges whether its memory stays flat (make soak); with
// --scaling it fits what a node and a pod cost each agent (make
// bench-scaling).
//
// Every mode prints its provenance first (commit, clean tree or not,
// date, machine) and writes it at the top of its results file.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nodelet/nodelet/internal/proc"
)

type options struct {
	nodes, pods int
	steady      time.Duration
	agents      []string
	out         string
	bin         string
	// kwokVersion is the kwok an agent named plain "kwok" runs; gomodcache
	// holds the modules of every kwok version named, for their stages.
	kwokVersion string
	gomodcache  string
	// stages is the set of kwok's stages kwok and nodelet-takeover play
	// (the built-in nodelet agent plays its own lifecycle).
	stages stageSet
	keep   bool // keep the control plane's directory and the agents' logs
	agentV int  // the agents' log verbosity
	// heapProfile runs nodelet's kubelet API, to take its heap profile
	// once every pod is Running.
	heapProfile bool
	// cpuProfile also takes nodelet's CPU profiles over the first
	// cpuProfileMax of the pod burst and the middle of the steady window
	// (at most cpuProfileMax of it, where the first periodic status
	// reports fall), saved beside out.
	cpuProfile bool
	// deployProvider is the provider of the --process-pods node: "sim"
	// gives the control plane's own share of the start latency.
	deployProvider string
}

// result is what one agent scored.
type result struct {
	Agent string `json:"agent"`
	// Stages is the set of kwok's stages the agent played (kwok and
	// nodelet-takeover), empty for nodelet's built-in lifecycle.
	Stages string `json:"stages,omitempty"`
	// Setting is what the agent ran with: nodelet's workers and client
	// limit, kwok's parallelism (its defaults, or tuned).
	Setting             agentSetting `json:"setting"`
	Nodes               int          `json:"nodes"`
	Pods                int          `json:"pods"`
	NodesReadySeconds   float64      `json:"nodesReadySeconds"`
	PodRunningP50       float64      `json:"podCreateToRunningP50Seconds"`
	PodRunningP99       float64      `json:"podCreateToRunningP99Seconds"`
	LastCreateToRunning float64      `json:"lastCreateToAllRunningSeconds"`
	LastDeleteToGone    float64      `json:"lastDeleteToAllGoneSeconds"`
	// DeletePhase is from the bench's first delete to all pods gone.
	DeletePhase         float64 `json:"firstDeleteToAllGoneSeconds,omitempty"`
	AgentCPUSeconds     float64 `json:"agentCPUSeconds"`
	AgentPeakRSSMiB     float64 `json:"agentPeakRSSMiB"`
	WritesPerNodeMinute float64 `json:"steadyAPIWritesPerNodePerMinute"`
	LeaseLapses         int     `json:"steadyLeaseLapses"`
	SteadySeconds       float64 `json:"steadySeconds"`
	APIServerCPUSeconds float64 `json:"apiserverCPUSeconds"`
	APIServerCPUShare   float64 `json:"apiserverSteadyCPUShareOfOneCore"`

	// The pod phase, from the first create to all Running: who used the
	// CPU, and how fast and how long the apiserver took pod writes.
	PodPhaseSeconds        float64 `json:"podPhaseSeconds"`
	PodPhaseAPIServerCores float64 `json:"podPhaseAPIServerCores"`
	PodPhaseAgentCores     float64 `json:"podPhaseAgentCores"`
	PodPhaseWritesPerSec   float64 `json:"podPhasePodWritesPerSecond"`
	PodPhaseWriteLatencyMs float64 `json:"podPhasePodWriteMeanLatencyMs"`

	// The delete phase, per pod deleted: the agent's status writes and
	// final deletes (the bench's own graceful delete left out), and how
	// many of its deletes the API answered 404. The kubelet makes one
	// status write and one delete.
	DeleteStatusWritesPerPod float64 `json:"deletePhaseStatusWritesPerPod"`
	DeleteDeletesPerPod      float64 `json:"deletePhaseAgentDeletesPerPod"`
	DeleteNotFoundPerPod     float64 `json:"deletePhaseDeletes404PerPod"`

	// Requests is what the API server served in each phase, by kind
	// ("PATCH pods/status"): per pod created in "pods" (from the first
	// create to all Running) and per pod deleted in "delete", per node
	// per minute in "steady". The agent's requests and the cluster's
	// own: the bench's create and delete of each pod, the scheduler's
	// binding, the controllers' and the bench's reads.
	Requests map[string]map[string]float64 `json:"requestsByPhase,omitempty"`

	// HeapAtPodPeak is the agent's heap profile once every pod is
	// Running (--heap-profile: nodelet's kubelet API, kwok's server).
	HeapAtPodPeak *heapSummary `json:"heapAtPodPeak,omitempty"`
	// PodPhaseRuntime is the agent's Go runtime over the pod phase, from
	// its /metrics (--heap-profile).
	PodPhaseRuntime *podPhaseRuntime `json:"podPhaseRuntime,omitempty"`
	// Memory is the agent's resident memory split into anonymous and
	// file-backed, sampled from /proc/PID/smaps_rollup through the run:
	// the sample at the highest RSS and each part's own peak.
	Memory *memoryPeak `json:"memory,omitempty"`
}

// modes are the flags that choose a mode and its own options.
type modes struct {
	agents, scales string // the sim bench's
	kwokStages     string
	criAgents      string
	cri            criOptions
	stats          bool
	statsOpts      statsOptions
	soak           soakOptions
	scaling        scalingOptions
	processPods    int
	processIdle    time.Duration
}

func main() {
	var o options
	var m modes
	flag.IntVar(&o.nodes, "nodes", 5000, "nodes per agent")
	flag.IntVar(&o.pods, "pods", 10000, "pods created and deleted")
	flag.StringVar(&m.scales, "scales", "", "instead of --nodes and --pods: the scales to measure, each as nodes/pods, comma-separated (for example 1000/5000,5000/10000)")
	flag.DurationVar(&o.steady, "steady", 5*time.Minute, "steady-state measurement")
	flag.StringVar(&m.agents, "agents", "nodelet,kwok,kwok-tuned", "agents to measure, in order: nodelet (its own nodes, --nodes), nodelet-takeover (the bench's pre-created Nodes taken over by kwok's annotation selector, with the stages kwok plays), kwok (--kwok-version's) or kwok@VERSION (bin/kwok-VERSION, make bin/kwok-VERSION) at kwok's defaults, kwok-tuned or kwok@VERSION-tuned with its nodeLeaseParallelism, nodePlayStageParallelism and podPlayStageParallelism raised to nodelet's worker counts at each scale")
	flag.StringVar(&m.kwokStages, "kwok-stages", "fast", "the stages kwok and nodelet-takeover play, from the kwok module's kustomize/stage: fast (kwokctl's default: node/fast, node/heartbeat-with-lease, pod/fast) or general (pod/general in place of pod/fast); both, comma-separated, run every scale and agent with each in turn")
	flag.StringVar(&o.out, "out", "bench/results.json", "where to write the results")
	flag.StringVar(&o.bin, "bin", "bin", "directory holding controlplane, nodelet and kwok")
	flag.StringVar(&o.kwokVersion, "kwok-version", "v0.8.0", "the version of kwok an agent named kwok runs (bin/kwok-VERSION)")
	flag.StringVar(&o.gomodcache, "gomodcache", "", "the Go module cache (go env GOMODCACHE) that holds each kwok version's module, for its stages")
	flag.BoolVar(&o.keep, "keep", false, "keep the temporary directory with the control plane's and agents' logs")
	flag.IntVar(&o.agentV, "agent-v", 0, "the nodelet agents' log verbosity (-v)")
	flag.BoolVar(&o.heapProfile, "heap-profile", true, "run nodelet with its kubelet API and take its heap profile once every pod is Running: printed as the top functions and lines, saved beside --out")
	flag.BoolVar(&o.cpuProfile, "cpu-profile", false, "with --heap-profile: also take nodelet's CPU profiles over the first 50s of the pod burst and the middle of the steady window (at most 50s of it), saved beside --out (go tool pprof)")
	flag.IntVar(&m.processPods, "process-pods", 0, "instead: measure the process provider with a Deployment of this many replicas (needs root)")
	flag.StringVar(&o.deployProvider, "process-provider", "process", "with --process-pods: the node's provider (sim measures the control plane alone)")
	flag.DurationVar(&m.processIdle, "process-idle", time.Minute, "with --process-pods: how long the pods run idle while the agent is measured")
	flag.IntVar(&m.cri.pods, "cri-pods", 0, "instead: measure nodelet's cri provider against the real kubelet, each with a Deployment of this many replicas on one private containerd (needs root and make images)")
	flag.StringVar(&m.criAgents, "cri-agents", "kubelet,kubelet-matched,nodelet", "with --cri-pods: the agents, in the order they run: kubelet (its default client limit, kubeAPIQPS 50 / kubeAPIBurst 100), kubelet-matched (kubeAPIQPS and kubeAPIBurst at nodelet's), nodelet")
	flag.DurationVar(&m.cri.idle, "cri-idle", time.Minute, "with --cri-pods: how long the pods run idle while the agent is measured")
	flag.DurationVar(&m.cri.settle, "cri-settle", 10*time.Second, "with --cri-pods: how long the agent runs after its node is Ready before the Deployment is created")
	flag.StringVar(&m.cri.imagesDir, "images", ".local/images", "with --cri-pods: the OCI image layout (make images) that bin/images serves as the registry")
	flag.BoolVar(&m.stats, "stats", false, "instead: measure what serving /stats/summary and /metrics/resource to metrics-server costs one sim agent of --stats-nodes nodes, each on its own address (needs make bin/metrics-server)")
	flag.IntVar(&m.statsOpts.nodes, "stats-nodes", 5000, "with --stats: the agent's nodes")
	flag.IntVar(&m.statsOpts.pods, "stats-pods", 10000, "with --stats: pods spread over the nodes")
	flag.DurationVar(&m.statsOpts.window, "stats-window", 2*time.Minute, "with --stats: each CPU window, with metrics-server scraping and paused")
	flag.IntVar(&m.statsOpts.sample, "stats-sample", 200, "with --stats: random nodes whose endpoints are timed")
	flag.DurationVar(&m.statsOpts.resolution, "stats-resolution", 15*time.Second, "with --stats: how often metrics-server scrapes every node")
	flag.StringVar(&m.statsOpts.profile, "stats-profile", "", "with --stats: write the agent's CPU profile of the scraped window to this file (go tool pprof)")
	flag.DurationVar(&m.statsOpts.topTimeout, "stats-top-timeout", 5*time.Minute, "with --stats: how long metrics-server may take until kubectl top lists every node and pod")
	flag.DurationVar(&m.soak.duration, "soak", 0, "instead: a soak of this long: one sim agent of --nodes nodes and --pods pods Running, pods created and deleted at --churn, sampled every --soak-interval and judged (memory flat over the second half, 0 lease lapses, writes/node/min within the steady-state budget)")
	flag.Float64Var(&m.soak.churn, "churn", 10, "with --soak: pods created, and as many deleted, per second")
	flag.DurationVar(&m.soak.interval, "soak-interval", time.Minute, "with --soak: between samples")
	flag.StringVar(&m.soak.profileDir, "soak-profiles", "", "with --soak: write the agent's heap profiles at the start, the half-way mark and the end to this directory (go tool pprof)")
	flag.StringVar(&m.soak.note, "soak-note", "", "with --soak: a note written with the results (for example what else ran on the machine)")
	flag.BoolVar(&m.scaling.run, "scaling", false, "instead: the cost of a node and of a pod: each agent (--agents) at each of --scaling-scales on a fresh control plane, its RSS and CPU measured over --scaling-window with every pod Running, and per agent the floor and the slopes fitted by least squares (make bench-scaling)")
	flag.StringVar(&m.scaling.scales, "scaling-scales", "1000/2000,2500/5000,5000/10000,1000/10000", "with --scaling: the runs, nodes/pods; runs at one pods/nodes ratio give the floor and the cost per node with its pods, a run at another ratio separates a node's cost from a pod's")
	flag.DurationVar(&m.scaling.window, "scaling-window", 90*time.Second, "with --scaling: how long each run is measured once every pod is Running")
	flag.StringVar(&m.scaling.fitFile, "scaling-fit", "", "instead: fit and print again the runs of this results file of --scaling, without running anything")
	flag.Parse()

	prov := collectProvenance(time.Now())
	if m.scaling.fitFile != "" {
		if err := refitScaling(m.scaling.fitFile); err != nil {
			fmt.Fprintf(os.Stderr, "bench scaling: %v\n", err)
			os.Exit(1)
		}
		return
	}
	fmt.Println(prov.line())
	if err := runMode(o, m, prov); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

// runMode runs the mode the flags chose and writes its results, with prov,
// to o.out or the mode's own default file.
func runMode(o options, m modes, prov provenance) error {
	co, ko, sc := m.cri, m.soak, m.scaling
	outOr := func(def string) string {
		if flagSet("out") {
			return o.out
		}
		return def
	}
	switch {
	case ko.duration > 0:
		// An interrupted soak still stops its agent and control plane
		// and writes what it sampled.
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		r, err := measureSoak(ctx, o, ko)
		stop()
		if err != nil {
			return fmt.Errorf("soak: %w", err)
		}
		printSoakVerdict(r)
		fields := map[string]any{"results": []soakResult{r}}
		if ko.note != "" {
			fields["note"] = ko.note
		}
		return writeResults(outOr("bench/results-soak.json"), prov, fields)
	case m.stats:
		r, err := measureStats(context.Background(), o, m.statsOpts)
		if err != nil {
			return fmt.Errorf("stats: %w", err)
		}
		printJSON(map[string]any{"results": []statsResult{r}})
		return writeResults(outOr("bench/results-stats.json"), prov, map[string]any{"results": []statsResult{r}})
	case co.pods > 0:
		co.agents = strings.Split(m.criAgents, ",")
		for _, a := range co.agents {
			if _, err := criAgentSetting(a); err != nil {
				return fmt.Errorf("--cri-agents: %w", err)
			}
		}
		results, err := measureCRI(context.Background(), o, co)
		if err != nil {
			return fmt.Errorf("cri: %w", err)
		}
		printCRITable(os.Stdout, results)
		return writeResults(outOr("bench/results-cri.json"), prov, criFields(co, results))
	case m.processPods > 0:
		r, err := measureProcess(context.Background(), o, m.processPods, m.processIdle)
		if err != nil {
			return fmt.Errorf("process: %w", err)
		}
		printJSON(map[string]any{"results": []processResult{r}})
		def := "bench/results-process.json"
		if o.deployProvider != "process" {
			def = "bench/results-process-" + o.deployProvider + ".json"
		}
		return writeResults(outOr(def), prov, map[string]any{"results": []processResult{r}})
	}

	o.agents = nil
	for _, a := range strings.Split(m.agents, ",") {
		a = normalizeAgent(strings.TrimSpace(a), o.kwokVersion)
		if _, err := simAgentSetting(a, 1, fastStages); err != nil {
			return fmt.Errorf("--agents: %w", err)
		}
		o.agents = append(o.agents, a)
	}
	sets, err := parseStageSets(m.kwokStages)
	if err != nil {
		return fmt.Errorf("--kwok-stages: %w", err)
	}
	if sc.run {
		if len(sets) > 1 {
			return fmt.Errorf("--kwok-stages: --scaling takes one stage set")
		}
		o.stages = sets[0]
		sizes, err := parseScales(sc.scales)
		if err != nil {
			return fmt.Errorf("--scaling-scales: %w", err)
		}
		r, err := measureScaling(context.Background(), o, sizes, sc.window)
		if err != nil {
			return fmt.Errorf("scaling: %w", err)
		}
		printScaling(os.Stdout, r)
		return writeResults(outOr("bench/results-scaling.json"), prov, map[string]any{"scaling": r})
	}

	sizes := []scale{{o.nodes, o.pods}}
	if m.scales != "" {
		if sizes, err = parseScales(m.scales); err != nil {
			return fmt.Errorf("--scales: %w", err)
		}
	}
	ctx := context.Background()
	var results []result
	for _, set := range sets {
		o.stages = set
		for _, size := range sizes {
			o.nodes, o.pods = size.nodes, size.pods
			var these []result
			for _, agent := range o.agents {
				r, err := measure(ctx, o, agent)
				if err != nil {
					return fmt.Errorf("%s at %d nodes and %d pods: %w", agent, o.nodes, o.pods, err)
				}
				these = append(these, r)
			}
			fmt.Printf("\n%s:\n", tableTitle(o.nodes, o.pods, set, o.agents))
			printTable(os.Stdout, these)
			printDifferences(os.Stdout, these)
			printSettings(os.Stdout, these)
			results = append(results, these...)
		}
	}
	for _, r := range results {
		if r.HeapAtPodPeak != nil {
			printHeapSummary(os.Stdout, r.Agent, fmt.Sprintf("with %d pods Running on %d nodes", r.Pods, r.Nodes), r.HeapAtPodPeak)
		}
	}
	return writeResults(o.out, prov, map[string]any{"results": results})
}

// printJSON prints v indented, as the process and stats modes show their
// results.
func printJSON(v any) {
	data, _ := json.MarshalIndent(v, "", "  ")
	fmt.Printf("%s\n", data)
}

// printSettings prints under a table what each agent ran with.
func printSettings(w io.Writer, results []result) {
	fmt.Fprintln(w, "settings:")
	for _, r := range results {
		fmt.Fprintf(w, "  %s: %s\n", r.Agent, r.Setting.Summary)
	}
}

// flagSet says whether the command line set the flag.
func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

// agentRun is one sim agent on its own fresh control plane, with its
// nodes Ready.
type agentRun struct {
	agent      string
	setting    agentSetting
	cp         *controlPlane
	cl         *cluster
	proc       *process
	nodeNames  []string
	heap       *agentProbe // with heapProfile: nodelet's kubelet API, kwok's server
	memory     *smapsSampler
	nodesReady float64  // seconds from the agent's start
	stops      []func() // run in reverse by stop
}

// startAgentRun starts a control plane and the agent of o.nodes nodes on
// it (nodelet's own, or Nodes the bench creates for kwok and
// nodelet-takeover, played by o.stages), and waits until the nodes are
// Ready, its memory sampled from its start (startSmapsSampler).
// heapProfile runs nodelet's kubelet API or kwok's server, for their Go
// runtime figures and heap profiles (and nodelet's CPU profile).
func startAgentRun(ctx context.Context, o options, agent string, heapProfile bool) (_ *agentRun, err error) {
	setting, err := simAgentSetting(agent, o.nodes, o.stages)
	if err != nil {
		return nil, err
	}
	run := &agentRun{agent: agent, setting: setting}
	defer func() {
		if err != nil {
			run.stop()
		}
	}()
	if run.cp, err = startControlPlane(ctx, o.bin, o.keep); err != nil {
		return nil, err
	}
	run.stops = append(run.stops, run.cp.stop)
	if run.cl, err = newCluster(run.cp.kubeconfig); err != nil {
		return nil, err
	}
	run.stops = append(run.stops, run.cl.stop)

	var args []string
	if agent == "nodelet" {
		args, run.nodeNames = simAgentArgs(o, run.cp, o.nodes), simNodeNames(o.nodes)
	} else {
		logf("%s: pre-creating %d nodes", agent, o.nodes)
		if run.nodeNames, err = run.cl.createKwokNodes(ctx, o.nodes); err != nil {
			return nil, err
		}
		if args, err = stagedAgentArgs(o, run.cp, agent); err != nil {
			return nil, err
		}
	}
	if heapProfile {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		client, transport, err := adminClient(run.cp.dir, time.Minute)
		if err != nil {
			return nil, err
		}
		run.stops = append(run.stops, transport.CloseIdleConnections)
		if _, isKwok := parseKwokAgent(agent); isKwok {
			args = withKwokServer(args, port)
		} else {
			args = withKubeletAPI(args, run.cp, port)
		}
		run.heap = &agentProbe{port: port, client: client}
	}

	logf("%s: starting (%s)", agent, setting.Summary)
	start := time.Now()
	if run.proc, err = startAgent(run.cp.dir, agent, args); err != nil {
		return nil, err
	}
	run.stops = append(run.stops, run.proc.stop)
	var stopSampler func()
	run.memory, stopSampler = startSmapsSampler(run.pid())
	run.stops = append(run.stops, stopSampler)
	if err := run.cl.waitNodesReady(ctx, o.nodes, 10*time.Minute); err != nil {
		return nil, fmt.Errorf("%s: %w (log %s)", agent, err, run.proc.logPath)
	}
	run.nodesReady = time.Since(start).Seconds()
	logf("%s: %d nodes Ready in %.1fs", agent, o.nodes, run.nodesReady)
	return run, nil
}

// stop stops the agent, the cluster's watches and the control plane.
func (run *agentRun) stop() {
	for i := len(run.stops) - 1; i >= 0; i-- {
		run.stops[i]()
	}
	run.stops = nil
}

// pid is the agent's process ID.
func (run *agentRun) pid() int { return run.proc.cmd.Process.Pid }

// stagedAgentArgs is the command line of kwok or nodelet-takeover on
// cp, with o.stages from the kwok module of its version (nodelet-takeover
// plays --kwok-version's); tuned kwok's configuration file is written in
// cp's directory.
func stagedAgentArgs(o options, cp *controlPlane, agent string) ([]string, error) {
	k, isKwok := parseKwokAgent(agent)
	version := o.kwokVersion
	if isKwok {
		version = k.version
	}
	stages, err := stageFiles(kwokStageDir(o.gomodcache, version), o.stages)
	if err != nil {
		return nil, err
	}
	if !isKwok {
		return takeoverArgs(o.bin, cp.kubeconfig, o.agentV, stages), nil
	}
	var configPath string
	if k.tuned {
		configPath = filepath.Join(cp.dir, "kwok-configuration.yaml")
		if err := os.WriteFile(configPath, kwokConfiguration(version, tunedKwokParallelism(o.nodes)), 0o644); err != nil {
			return nil, fmt.Errorf("kwok configuration: %w", err)
		}
	}
	return kwokArgs(o.bin, cp.kubeconfig, k, configPath, stages), nil
}

// measure runs one agent on a fresh control plane.
func measure(ctx context.Context, o options, agent string) (result, error) {
	r := result{Agent: agent, Nodes: o.nodes, Pods: o.pods}
	profiled := agent
	if playsStages(agent) {
		r.Stages = string(o.stages)
		profiled = agent + "-" + r.Stages
	}
	run, err := startAgentRun(ctx, o, agent, o.heapProfile)
	if err != nil {
		return r, err
	}
	defer run.stop()
	r.Setting, r.NodesReadySeconds = run.setting, run.nodesReady
	cp, cl, proc, nodeNames, heap := run.cp, run.cl, run.proc, run.nodeNames, run.heap

	var runtime0 *runtimeMark
	if heap != nil {
		runtime0 = heap.markRuntime(ctx)
	}
	_, isKwok := parseKwokAgent(agent)
	var podsProfile chan struct{}
	if heap != nil && o.cpuProfile && !isKwok {
		// The pod burst's first cpuProfileMax, the steady window's below.
		podsProfile = make(chan struct{})
		go func() {
			defer close(podsProfile)
			heap.saveCPUProfile(ctx, cpuProfileMax, profilePath(o.out, "cpu-pods", profiled, o.nodes, o.pods))
		}()
	}
	phaseStart, apiCPU0, agentCPU0 := time.Now(), cp.apiserverCPU(), procCPU(proc.cmd.Process.Pid)
	writes0, writeSecs0, err := cl.podWrites(ctx)
	if err != nil {
		return r, err
	}
	kinds := phaseRequests{cl: cl, r: &r}
	if err := kinds.start(ctx); err != nil {
		return r, err
	}
	p50, p99, tail, err := cl.createPods(ctx, nodeNames, o.pods)
	if err != nil {
		return r, err
	}
	r.PodRunningP50, r.PodRunningP99, r.LastCreateToRunning = p50, p99, tail
	r.PodPhaseSeconds = time.Since(phaseStart).Seconds()
	r.PodPhaseAPIServerCores = (cp.apiserverCPU() - apiCPU0) / r.PodPhaseSeconds
	r.PodPhaseAgentCores = (procCPU(proc.cmd.Process.Pid) - agentCPU0) / r.PodPhaseSeconds
	if heap != nil {
		r.PodPhaseRuntime = podPhase(runtime0, heap.markRuntime(ctx))
	}
	writes1, writeSecs1, err := cl.podWrites(ctx)
	if err != nil {
		return r, err
	}
	r.PodPhaseWritesPerSec = (writes1 - writes0) / r.PodPhaseSeconds
	if writes1 > writes0 {
		r.PodPhaseWriteLatencyMs = (writeSecs1 - writeSecs0) / (writes1 - writes0) * 1000
	}
	logf("%s: pod phase %.1fs: apiserver %.2f cores, agent %.2f cores, %.0f pod writes/s at %.1f ms mean", agent,
		r.PodPhaseSeconds, r.PodPhaseAPIServerCores, r.PodPhaseAgentCores, r.PodPhaseWritesPerSec, r.PodPhaseWriteLatencyMs)
	logf("%s: %d pods Running: p50 %.3fs p99 %.3fs, last create to all Running %.3fs", agent, o.pods, p50, p99, tail)
	if err := kinds.end(ctx, agent, "pods", "per pod created", float64(o.pods)); err != nil {
		return r, err
	}
	if heap != nil {
		r.HeapAtPodPeak = heap.peakHeap(ctx, profilePath(o.out, "heap", profiled, o.nodes, o.pods))
	}

	requests0, err := cl.podRequests(ctx)
	if err != nil {
		return r, err
	}
	if err := kinds.start(ctx); err != nil {
		return r, err
	}
	if r.LastDeleteToGone, r.DeletePhase, err = cl.deletePods(ctx, o.pods); err != nil {
		return r, err
	}
	if err := kinds.end(ctx, agent, "delete", "per pod deleted", float64(o.pods)); err != nil {
		return r, err
	}
	requests1, err := cl.podRequests(ctx)
	if err != nil {
		return r, err
	}
	r.DeleteStatusWritesPerPod, r.DeleteDeletesPerPod, r.DeleteNotFoundPerPod = deletionRequests(requests0, requests1, o.pods)
	logf("%s: all pods gone %.3fs after the last delete, %.3fs after the first; per pod %.3f status writes, %.3f deletes (%.3f answered 404)", agent,
		r.LastDeleteToGone, r.DeletePhase, r.DeleteStatusWritesPerPod, r.DeleteDeletesPerPod, r.DeleteNotFoundPerPod)

	logf("%s: steady state for %s", agent, o.steady)
	apiCPU0 = cp.apiserverCPU()
	if podsProfile != nil {
		<-podsProfile
	}
	var cpuProfile chan struct{}
	if heap != nil && o.cpuProfile && !isKwok {
		cpuProfile = make(chan struct{})
		go func() {
			defer close(cpuProfile)
			d := min(o.steady, cpuProfileMax)
			select {
			case <-ctx.Done():
				return
			case <-time.After((o.steady - d) / 2):
			}
			heap.saveCPUProfile(ctx, d, profilePath(o.out, "cpu", profiled, o.nodes, o.pods))
		}()
	}
	if err := kinds.start(ctx); err != nil {
		return r, err
	}
	writes, lapses, err := cl.steady(ctx, o.steady)
	if err == nil {
		err = kinds.end(ctx, agent, "steady", "per node per minute", float64(o.nodes)*o.steady.Minutes())
	}
	if cpuProfile != nil {
		<-cpuProfile
	}
	if err != nil {
		return r, err
	}
	r.SteadySeconds = o.steady.Seconds()
	r.WritesPerNodeMinute = float64(writes) / float64(o.nodes) / o.steady.Minutes()
	r.LeaseLapses = lapses
	r.APIServerCPUShare = (cp.apiserverCPU() - apiCPU0) / o.steady.Seconds()
	r.AgentCPUSeconds, r.AgentPeakRSSMiB = proc.usage()
	r.Memory = run.memory.Peak()
	r.APIServerCPUSeconds = cp.apiserverCPU()
	logf("%s: %.2f writes/node/min, %d lease lapses; agent %.1f CPU s, peak RSS %.0f MiB", agent, r.WritesPerNodeMinute, lapses, r.AgentCPUSeconds, r.AgentPeakRSSMiB)
	if m := r.Memory; m != nil {
		logf("%s: sampled peak RSS %.0f MiB: %.0f anonymous, %.0f file-backed (%d samples)", agent, m.AtPeakRSS.RSSMiB, m.AtPeakRSS.AnonMiB, m.AtPeakRSS.FileMiB, m.Samples)
	}
	return r, nil
}

// simAgentArgs is the command line of one nodelet agent of n sim nodes,
// named as simNodeName gives them.
func simAgentArgs(o options, cp *controlPlane, n int) []string {
	return []string{filepath.Join(o.bin, "nodelet"), "--kubeconfig", cp.kubeconfig, "--node-name", "bench",
		"--nodes", strconv.Itoa(n), fmt.Sprintf("-v=%d", o.agentV)}
}

// withKwokServer adds to kwok's command line its server on port, on
// loopback: /metrics (Go's collector among them) and, at its defaults
// (enableDebuggingHandlers, enableProfilingHandler), /debug/pprof/, over
// HTTP and, on the same port, HTTPS with a certificate of its own.
func withKwokServer(args []string, port int) []string {
	return append(args, "--server-address", fmt.Sprintf("127.0.0.1:%d", port))
}

// withKubeletAPI adds to an agent's command line the kubelet API on port,
// its serving certificate under the control plane's directory and client
// certificates of the control plane's CA (adminClient's).
func withKubeletAPI(args []string, cp *controlPlane, port int) []string {
	return append(args, "--root-dir", filepath.Join(cp.dir, "nodelet"), "--enable-server", "--port", strconv.Itoa(port),
		"--client-ca-file", filepath.Join(cp.dir, "pki", "ca.crt"))
}

// simNodeName is the name nodelet gives sim node i of the bench's agent.
func simNodeName(i int) string { return fmt.Sprintf("bench-%d", i) }

func simNodeNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = simNodeName(i)
	}
	return names
}

// scale is one size the bench measures.
type scale struct{ nodes, pods int }

// parseScales reads --scales: nodes/pods pairs, comma-separated.
func parseScales(s string) ([]scale, error) {
	var out []scale
	for _, part := range strings.Split(s, ",") {
		n, p, ok := strings.Cut(strings.TrimSpace(part), "/")
		nodes, err1 := strconv.Atoi(n)
		pods, err2 := strconv.Atoi(p)
		if !ok || err1 != nil || err2 != nil || nodes <= 0 || pods < 0 {
			return nil, fmt.Errorf("%q is not nodes/pods (for example 1000/5000)", part)
		}
		out = append(out, scale{nodes, pods})
	}
	return out, nil
}

// process is a running agent.
type process struct {
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
}

func startAgent(dir, name string, args []string) (*process, error) {
	logPath := filepath.Join(dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); f.Close(); close(p.done) }()
	return p, nil
}

// usage reads the agent's CPU seconds and peak RSS from /proc.
func (p *process) usage() (cpuSeconds, peakMiB float64) {
	return procCPU(p.cmd.Process.Pid), procPeakRSS(p.cmd.Process.Pid)
}

func (p *process) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func procCPU(pid int) float64 {
	_, self, _ := procStat(pid)
	return self
}

// procStat reads a process's command name, its own CPU seconds, and the CPU
// seconds of its children it has waited for.
func procStat(pid int) (comm string, self, children float64) {
	comm, f := readProcStat(pid)
	if len(f) < 15 {
		return "", math.NaN(), math.NaN()
	}
	var utime, stime, cutime, cstime float64
	fmt.Sscan(f[11], &utime)
	fmt.Sscan(f[12], &stime)
	fmt.Sscan(f[13], &cutime)
	fmt.Sscan(f[14], &cstime)
	return comm, (utime + stime) / 100, (cutime + cstime) / 100 // USER_HZ
}

// readProcStat reads /proc/PID/stat: the command name, and the fields after
// it (state, ppid, …), or none when the process is gone.
func readProcStat(pid int) (comm string, fields []string) {
	comm, fields, err := proc.Stat(pid)
	if err != nil {
		return "", nil
	}
	return comm, fields
}

func procPeakRSS(pid int) float64 { return procStatusKB(pid, "VmHWM") / 1024 }

// procStatusKB reads one kB field of /proc/PID/status, NaN when it cannot.
func procStatusKB(pid int, field string) float64 {
	kb, err := proc.StatusKB(pid, field)
	if err != nil {
		return math.NaN()
	}
	return float64(kb)
}

func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(i, 0)]
}

func sortedSeconds(d []time.Duration) []float64 {
	out := make([]float64, len(d))
	for i, v := range d {
		out[i] = v.Seconds()
	}
	sort.Float64s(out)
	return out
}
