package main

// The --soak mode: one sim agent of many nodes with its pods, under a
// steady churn of pods created and deleted, for a long time. Every interval
// the bench samples the agent's memory and goroutines, the lease lapses so
// far, the API writes per node and what the churn achieved; at the end it
// judges the run against the soak's goal: memory flat over the second half,
// no lease lapse, writes within the steady-state budget.

import (
	"context"
	"fmt"
	"maps"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

const (
	// steadyWritesBudget is the steady-state goal for API writes per node
	// per minute (nodes, leases, pods and events), docs/reliability.md's.
	steadyWritesBudget = 6.5
	// soakRSSTolerance is how far, as a fraction, the agent's RSS may move
	// after the half-way mark from its value at the mark.
	soakRSSTolerance = 0.05
	// rssProbeInterval is how often the agent's RSS is read.
	rssProbeInterval = 5 * time.Second
)

// soakOptions are the --soak mode's settings.
type soakOptions struct {
	duration   time.Duration // of the churn
	churn      float64       // pods created, and as many deleted, per second
	interval   time.Duration // between samples
	profileDir string        // where the agent's heap profiles go, if set
	note       string        // written with the results (what else ran on the machine)
}

// soakSample is one interval of the soak. The RSS, heap and goroutines are
// read at its end; the rates and latencies are over the interval.
type soakSample struct {
	Minute float64 `json:"minute"`
	// RSSMiB, the figure judged, is the mean of the RSS read every
	// rssProbeInterval over the interval: one reading moves with each
	// garbage collection. RSSMaxMiB is their largest, RSSLastMiB the last.
	RSSMiB       float64 `json:"rssMiB"`
	RSSMaxMiB    float64 `json:"rssMaxMiB"`
	RSSLastMiB   float64 `json:"rssLastMiB"`
	HeapInUseMiB float64 `json:"heapInUseMiB"`
	Goroutines   int     `json:"goroutines"`
	AgentCores   float64 `json:"agentCores"`
	// LeaseLapses is the lapses that have ended so far; the last sample
	// adds the Leases still lapsed at the end (lapseWatch).
	LeaseLapses int `json:"leaseLapsesSoFar"`
	// WritesPerNodeMinute counts what the steady state counts: writes to
	// nodes, leases, pods and events, the bench's own creates and deletes
	// (BenchWritesPerNodeMinute) included.
	WritesPerNodeMinute      float64 `json:"apiWritesPerNodePerMinute"`
	BenchWritesPerNodeMinute float64 `json:"benchWritesPerNodePerMinute"`
	// HeartbeatWritesPerNodeMinute is the writes to nodes and leases alone.
	HeartbeatWritesPerNodeMinute float64 `json:"heartbeatWritesPerNodePerMinute"`
	PodsCreated                  int64   `json:"podsCreated"`
	PodsDeleted                  int64   `json:"podsDeleted"`
	ChurnErrors                  int64   `json:"churnErrors"`
	// ChurnSkipped counts the churn's turns that found every client busy.
	ChurnSkipped int64 `json:"churnSkipped"`
	PodsInAPI    int64 `json:"podsInAPI"`
	// Pods of the churn first seen Running and Ready in the interval, their
	// create→Running latency, and those created but not Running yet.
	PodsRunning   int     `json:"podsRunning"`
	RunningP50    float64 `json:"createToRunningP50Seconds"`
	RunningP99    float64 `json:"createToRunningP99Seconds"`
	NotRunningYet int     `json:"podsNotRunningYet"`
	Load1         float64 `json:"machineLoad1"`
}

// soakVerdict judges the soak against its goal.
type soakVerdict struct {
	MarkMinute          float64 `json:"markMinute"`
	MarkRSSMiB          float64 `json:"markRSSMiB"`
	MinRSSAfterMarkMiB  float64 `json:"minRSSAfterMarkMiB"`
	MaxRSSAfterMarkMiB  float64 `json:"maxRSSAfterMarkMiB"`
	RSSTolerance        float64 `json:"rssTolerance"`
	MemoryFlat          bool    `json:"memoryFlat"`
	MarkGoroutines      int     `json:"markGoroutines"`
	MaxGoroutinesAfter  int     `json:"maxGoroutinesAfterMark"`
	MarkHeapInUseMiB    float64 `json:"markHeapInUseMiB"`
	LastHeapInUseMiB    float64 `json:"lastHeapInUseMiB"`
	LeaseLapses         int     `json:"leaseLapses"`
	WritesPerNodeMinute float64 `json:"apiWritesPerNodePerMinute"`
	MaxWritesPerNodeMin float64 `json:"maxMinuteAPIWritesPerNodePerMinute"`
	BenchWritesPerNode  float64 `json:"benchWritesPerNodePerMinute"`
	// AgentWritesPerNodeMinute is what is judged: the writes less the
	// bench's own creates and deletes, which the steady state, having
	// none, never counted.
	AgentWritesPerNodeMinute float64 `json:"agentWritesPerNodePerMinute"`
	HeartbeatWrites          float64 `json:"heartbeatWritesPerNodePerMinute"`
	WritesBudget             float64 `json:"writesBudget"`
	WritesWithinBudget       bool    `json:"writesWithinBudget"`
	CreatedPerSecond         float64 `json:"podsCreatedPerSecond"`
	DeletedPerSecond         float64 `json:"podsDeletedPerSecond"`
	WorstRunningP99          float64 `json:"worstMinuteCreateToRunningP99Seconds"`
	Pass                     bool    `json:"pass"`
}

// soakResult is the whole soak.
type soakResult struct {
	Nodes             int     `json:"nodes"`
	Pods              int     `json:"pods"`
	ChurnPerSecond    float64 `json:"churnPerSecond"`
	DurationSeconds   float64 `json:"durationSeconds"`
	IntervalSeconds   float64 `json:"intervalSeconds"`
	Interrupted       bool    `json:"interrupted,omitempty"`
	NodesReadySeconds float64 `json:"nodesReadySeconds"`
	InitialRunningP99 float64 `json:"initialPodsCreateToRunningP99Seconds"`
	StartRSSMiB       float64 `json:"startRSSMiB"`
	StartHeapInUseMiB float64 `json:"startHeapInUseMiB"`
	StartGoroutines   int     `json:"startGoroutines"`
	AgentPeakRSSMiB   float64 `json:"agentPeakRSSMiB"`
	AgentCPUSeconds   float64 `json:"agentCPUSeconds"`
	HeapProfiles      string  `json:"heapProfiles,omitempty"`
	// PodWritesPerChurnedPod is the writes to pods and events during the
	// churn by kind ("PATCH pods/status"), per pod created.
	PodWritesPerChurnedPod map[string]float64 `json:"podWritesPerChurnedPod"`
	Samples                []soakSample       `json:"samples"`
	Verdict                soakVerdict        `json:"verdict"`
}

// measureSoak runs the soak: an agent of o.nodes sim nodes serving the
// kubelet API (for its /metrics and heap profiles), o.pods pods Running,
// then so.duration of churn.
func measureSoak(ctx context.Context, o options, so soakOptions) (soakResult, error) {
	r := soakResult{Nodes: o.nodes, Pods: o.pods, ChurnPerSecond: so.churn,
		DurationSeconds: so.duration.Seconds(), IntervalSeconds: so.interval.Seconds()}
	if o.pods < 1 || so.churn <= 0 || so.interval <= 0 || so.duration < so.interval {
		return r, fmt.Errorf("a soak needs pods, a churn rate, and a duration of at least one interval")
	}
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
	port, err := freePort()
	if err != nil {
		return r, err
	}
	logf("soak: starting nodelet with %d nodes, kubelet API port %d", o.nodes, port)
	start := time.Now()
	proc, err := startAgent(cp.dir, "nodelet-soak", withKubeletAPI(simAgentArgs(o, cp, o.nodes), cp, port))
	if err != nil {
		return r, err
	}
	defer proc.stop()
	if err := cl.waitNodesReady(ctx, o.nodes, 10*time.Minute); err != nil {
		return r, fmt.Errorf("soak agent: %w (log %s)", err, proc.logPath)
	}
	r.NodesReadySeconds = roundTo(time.Since(start).Seconds(), 1)
	logf("soak: %d nodes Ready in %.1fs", o.nodes, r.NodesReadySeconds)
	nodeNames := simNodeNames(o.nodes)
	_, p99, _, err := cl.createPods(ctx, nodeNames, o.pods)
	if err != nil {
		return r, fmt.Errorf("soak agent: %w (log %s)", err, proc.logPath)
	}
	r.InitialRunningP99 = roundTo(p99, 2)
	logf("soak: %d pods Running (p99 %.1fs); churn of %g pods/s for %s", o.pods, p99, so.churn, so.duration)

	client, transport, err := adminClient(cp.dir, 30*time.Second)
	if err != nil {
		return r, err
	}
	defer transport.CloseIdleConnections()
	agent := agentProbe{pid: proc.cmd.Process.Pid, port: port, client: client}
	rt, err := agent.runtime(ctx)
	if err != nil {
		return r, fmt.Errorf("soak agent: %w", err)
	}
	r.StartRSSMiB, r.StartHeapInUseMiB, r.StartGoroutines = roundTo(agent.rss(), 1), rt.heapInUseMiB, rt.goroutines
	if so.profileDir != "" {
		r.HeapProfiles = so.profileDir
		agent.saveHeapProfile(ctx, so.profileDir, "start")
	}

	kinds0, err := cl.requestsByKind(ctx)
	if err != nil {
		return r, err
	}
	ch := newChurner(cl, nodeNames, o.pods)
	churnCtx, stopChurn := context.WithCancel(ctx)
	churned := make(chan struct{})
	go func() { ch.run(churnCtx, so.churn); close(churned) }()
	defer func() { stopChurn(); <-churned }()

	r.Samples, r.Interrupted, err = soakSamples(ctx, so, cl, ch, agent, o.nodes, proc)
	stopChurn()
	<-churned
	if err != nil {
		return r, err
	}
	if kinds, err := cl.requestsByKind(ctx); err != nil {
		logf("soak: %v", err)
	} else {
		r.PodWritesPerChurnedPod = podWritesPerPod(kinds0, kinds, ch.created.Load())
	}
	if so.profileDir != "" {
		agent.saveHeapProfile(ctx, so.profileDir, "end")
	}
	r.AgentCPUSeconds, r.AgentPeakRSSMiB = proc.usage()
	r.AgentPeakRSSMiB = roundTo(r.AgentPeakRSSMiB, 1)
	r.Verdict = judgeSoak(r.Samples, so)
	if r.Interrupted {
		r.Verdict.Pass = false
	}
	return r, nil
}

// soakSamples samples the soak every interval until its end, counting
// lease lapses throughout. It stops early, interrupted, when ctx ends.
func soakSamples(ctx context.Context, so soakOptions, cl *cluster, ch *churner, agent agentProbe, nodes int, proc *process) ([]soakSample, bool, error) {
	sp, err := newSoakSampler(ctx, cl, ch, agent, nodes)
	if err != nil {
		return nil, false, err
	}
	lw, err := cl.watchLapses(ctx)
	if err != nil {
		return nil, false, err
	}
	markIndex := soakMarkIndex(so)
	var samples []soakSample
	end := sp.start.Add(so.duration)
	fmt.Printf("%7s %8s %6s %8s %6s %6s %8s %6s %7s %7s %6s %8s %6s %6s %5s\n",
		"minute", "RSS MiB", "max", "heap MiB", "gorout", "lapses", "wr/n/min", "bench", "created", "deleted", "errors", "p99 s", "pods", "cores", "load")
	for k := 1; ; k++ {
		until := sp.start.Add(time.Duration(k) * so.interval)
		if until.After(end) || end.Sub(until) < so.interval/2 {
			until = end
		}
		for time.Now().Before(until) {
			select {
			case <-ctx.Done():
				lw.stop()
				return samples, true, nil
			case <-time.After(min(rssProbeInterval, time.Until(until))):
				sp.probeRSS()
			}
		}
		if !proc.alive() {
			lw.stop()
			return samples, false, fmt.Errorf("the agent exited during the soak (log %s)", proc.logPath)
		}
		final := !until.Before(end)
		s := sp.take(ctx)
		if final {
			s.LeaseLapses = lw.stop()
		} else {
			s.LeaseLapses = lw.count()
		}
		samples = append(samples, s)
		fmt.Printf("%7.2f %8.1f %6.1f %8.1f %6d %6d %8.2f %6.2f %7d %7d %6d %8.3f %6d %6.2f %5.2f\n",
			s.Minute, s.RSSMiB, s.RSSMaxMiB, s.HeapInUseMiB, s.Goroutines, s.LeaseLapses, s.WritesPerNodeMinute, s.BenchWritesPerNodeMinute,
			s.PodsCreated, s.PodsDeleted, s.ChurnErrors+s.ChurnSkipped, s.RunningP99, s.PodsInAPI, s.AgentCores, s.Load1)
		if k == markIndex && so.profileDir != "" {
			agent.saveHeapProfile(ctx, so.profileDir, "mark")
		}
		if final {
			return samples, false, nil
		}
	}
}

// soakSampler takes the samples: each reads the agent, the apiserver's
// write counters and the churn's, and keeps them for the next.
type soakSampler struct {
	cl     *cluster
	ch     *churner
	agent  agentProbe
	nodes  int
	start  time.Time
	last   time.Time
	writes map[string]int // by resource
	churn  churnCounts
	cpu    float64 // the agent's CPU seconds
	rss    []float64
}

// probeRSS reads the agent's RSS for the next sample.
func (sp *soakSampler) probeRSS() {
	if rss := sp.agent.rss(); !math.IsNaN(rss) {
		sp.rss = append(sp.rss, rss)
	}
}

func newSoakSampler(ctx context.Context, cl *cluster, ch *churner, agent agentProbe, nodes int) (*soakSampler, error) {
	writes, err := cl.writesByResource(ctx)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	return &soakSampler{cl: cl, ch: ch, agent: agent, nodes: nodes, start: now, last: now,
		writes: writes, churn: ch.counts(), cpu: procCPU(agent.pid)}, nil
}

// take samples the interval since the last sample. A figure it cannot
// read is logged and left out (goroutines and heap -1); the next sample's
// rates cover it.
func (sp *soakSampler) take(ctx context.Context) soakSample {
	now := time.Now()
	minutes := now.Sub(sp.last).Minutes()
	sp.last = now
	perNodeMinute := func(n int64) float64 { return roundTo(float64(n)/float64(sp.nodes)/minutes, 3) }
	s := soakSample{Minute: roundTo(now.Sub(sp.start).Minutes(), 2), Load1: loadAverage()}
	sp.probeRSS()
	if n := len(sp.rss); n > 0 {
		s.RSSMiB = roundTo(mean(sp.rss), 1)
		s.RSSMaxMiB, s.RSSLastMiB = roundTo(slices.Max(sp.rss), 1), roundTo(sp.rss[n-1], 1)
		sp.rss = sp.rss[:0]
	}

	if rt, err := sp.agent.runtime(ctx); err != nil {
		logf("soak: %v", err)
		s.Goroutines, s.HeapInUseMiB = -1, -1
	} else {
		s.Goroutines, s.HeapInUseMiB = rt.goroutines, rt.heapInUseMiB
	}
	if writes, err := sp.cl.writesByResource(ctx); err != nil {
		logf("soak: %v", err)
	} else {
		var total, heartbeats int64
		for resource, n := range writes {
			d := int64(n - sp.writes[resource])
			total += d
			if resource == "nodes" || resource == "leases" {
				heartbeats += d
			}
		}
		s.WritesPerNodeMinute, s.HeartbeatWritesPerNodeMinute = perNodeMinute(total), perNodeMinute(heartbeats)
		sp.writes = writes
	}

	churn := sp.ch.counts()
	done := churn.minus(sp.churn)
	sp.churn = churn
	s.PodsCreated, s.PodsDeleted, s.ChurnErrors, s.ChurnSkipped = done.created, done.deleted, done.failed, done.skipped
	s.BenchWritesPerNodeMinute = perNodeMinute(done.created + done.deleted)
	s.PodsInAPI = sp.cl.podCount.Load()
	lat, waiting := sp.ch.ranSince()
	s.PodsRunning, s.NotRunningYet = len(lat), waiting
	if len(lat) > 0 {
		sorted := sortedFloats(lat)
		s.RunningP50, s.RunningP99 = roundTo(percentile(sorted, 0.5), 3), roundTo(percentile(sorted, 0.99), 3)
	}

	cpu := procCPU(sp.agent.pid)
	s.AgentCores = roundTo((cpu-sp.cpu)/(minutes*60), 3)
	sp.cpu = cpu
	return s
}

func mean(v []float64) float64 {
	sum := 0.0
	for _, x := range v {
		sum += x
	}
	return sum / float64(len(v))
}

// soakMarkIndex is the sample at the half-way mark (1-based): the memory
// of every later sample is judged against it.
func soakMarkIndex(so soakOptions) int {
	n := int(math.Round(so.duration.Seconds() / so.interval.Seconds()))
	return max(1, int(math.Round(float64(n)/2)))
}

// judgeSoak judges the samples against the soak's goal: the RSS of every
// sample after the half-way mark within soakRSSTolerance of the mark's, no
// lease lapse, and the agent's API writes per node per minute over the
// whole churn within the steady-state budget.
func judgeSoak(samples []soakSample, so soakOptions) soakVerdict {
	v := soakVerdict{RSSTolerance: soakRSSTolerance, WritesBudget: steadyWritesBudget}
	if len(samples) == 0 {
		return v
	}
	mark := soakMarkIndex(so)
	last := samples[len(samples)-1]
	v.LeaseLapses = last.LeaseLapses
	v.LastHeapInUseMiB = last.HeapInUseMiB
	var writes, bench, heartbeats, created, deleted float64
	prevMinute := 0.0
	for _, s := range samples {
		minutes := s.Minute - prevMinute
		prevMinute = s.Minute
		writes += s.WritesPerNodeMinute * minutes
		bench += s.BenchWritesPerNodeMinute * minutes
		heartbeats += s.HeartbeatWritesPerNodeMinute * minutes
		created += float64(s.PodsCreated)
		deleted += float64(s.PodsDeleted)
		v.MaxWritesPerNodeMin = max(v.MaxWritesPerNodeMin, s.WritesPerNodeMinute)
		v.WorstRunningP99 = max(v.WorstRunningP99, s.RunningP99)
	}
	v.WritesPerNodeMinute = roundTo(writes/last.Minute, 3)
	v.BenchWritesPerNode = roundTo(bench/last.Minute, 3)
	v.HeartbeatWrites = roundTo(heartbeats/last.Minute, 3)
	v.CreatedPerSecond = roundTo(created/(last.Minute*60), 2)
	v.DeletedPerSecond = roundTo(deleted/(last.Minute*60), 2)
	v.AgentWritesPerNodeMinute = roundTo(v.WritesPerNodeMinute-v.BenchWritesPerNode, 3)
	v.WritesWithinBudget = v.AgentWritesPerNodeMinute <= steadyWritesBudget

	memoryJudged := len(samples) > mark
	if memoryJudged {
		m := samples[mark-1]
		v.MarkMinute, v.MarkRSSMiB, v.MarkGoroutines, v.MarkHeapInUseMiB = m.Minute, m.RSSMiB, m.Goroutines, m.HeapInUseMiB
		v.MinRSSAfterMarkMiB, v.MaxRSSAfterMarkMiB = math.Inf(1), 0
		for _, s := range samples[mark:] {
			v.MinRSSAfterMarkMiB = min(v.MinRSSAfterMarkMiB, s.RSSMiB)
			v.MaxRSSAfterMarkMiB = max(v.MaxRSSAfterMarkMiB, s.RSSMiB)
			v.MaxGoroutinesAfter = max(v.MaxGoroutinesAfter, s.Goroutines)
		}
		v.MemoryFlat = v.MaxRSSAfterMarkMiB <= v.MarkRSSMiB*(1+soakRSSTolerance) &&
			v.MinRSSAfterMarkMiB >= v.MarkRSSMiB*(1-soakRSSTolerance)
	}
	v.Pass = memoryJudged && v.MemoryFlat && v.LeaseLapses == 0 && v.WritesWithinBudget
	return v
}

// printSoakVerdict prints the verdict under the samples.
func printSoakVerdict(r soakResult) {
	v := r.Verdict
	fmt.Printf("\nstart: RSS %.1f MiB, heap in use %.1f MiB, %d goroutines (after %d nodes Ready and %d pods Running); peak RSS %.1f MiB\n",
		r.StartRSSMiB, r.StartHeapInUseMiB, r.StartGoroutines, r.Nodes, r.Pods, r.AgentPeakRSSMiB)
	fmt.Printf("goal: RSS (each minute's mean) after the half-way mark within %.0f%% of the mark's, 0 lease lapses, ≤ %.1f API writes/node/min by the agent\n",
		soakRSSTolerance*100, steadyWritesBudget)
	if v.MarkMinute == 0 {
		fmt.Printf("memory:  not judged: no sample after the half-way mark\n")
	} else {
		fmt.Printf("memory:  RSS %.1f MiB at minute %g, %.1f–%.1f MiB after it (%+.1f%% … %+.1f%%): %s\n",
			v.MarkRSSMiB, v.MarkMinute, v.MinRSSAfterMarkMiB, v.MaxRSSAfterMarkMiB,
			(v.MinRSSAfterMarkMiB/v.MarkRSSMiB-1)*100, (v.MaxRSSAfterMarkMiB/v.MarkRSSMiB-1)*100, okWord(v.MemoryFlat, "flat", "NOT flat"))
		fmt.Printf("         heap in use %.1f MiB at the mark, %.1f at the end; goroutines %d at the mark, at most %d after\n",
			v.MarkHeapInUseMiB, v.LastHeapInUseMiB, v.MarkGoroutines, v.MaxGoroutinesAfter)
	}
	fmt.Printf("leases:  %d lapses: %s\n", v.LeaseLapses, okWord(v.LeaseLapses == 0, "ok", "FAILED"))
	fmt.Printf("writes:  %.2f API writes/node/min by the agent over the soak: %s\n", v.AgentWritesPerNodeMinute,
		okWord(v.WritesWithinBudget, "within budget", "OVER budget"))
	fmt.Printf("         %.2f with the bench's own creates and deletes (%.2f; worst minute %.2f); nodes and leases %.2f\n",
		v.WritesPerNodeMinute, v.BenchWritesPerNode, v.MaxWritesPerNodeMin, v.HeartbeatWrites)
	if len(r.PodWritesPerChurnedPod) > 0 {
		var kinds []string
		for _, kind := range slices.Sorted(maps.Keys(r.PodWritesPerChurnedPod)) {
			kinds = append(kinds, fmt.Sprintf("%s %.2f", kind, r.PodWritesPerChurnedPod[kind]))
		}
		fmt.Printf("         per churned pod: %s\n", strings.Join(kinds, ", "))
	}
	fmt.Printf("churn:   %.2f pods/s created, %.2f deleted (target %g); worst minute's create→Running p99 %.3f s\n",
		v.CreatedPerSecond, v.DeletedPerSecond, r.ChurnPerSecond, v.WorstRunningP99)
	switch {
	case r.Interrupted:
		fmt.Println("verdict: INTERRUPTED (not judged)")
	case v.Pass:
		fmt.Println("verdict: PASS")
	default:
		fmt.Println("verdict: FAIL")
	}
}

// podWritesPerPod is the writes to pods and events between two counts of
// requestsByKind, by kind, per pod created.
func podWritesPerPod(before, after map[string]float64, created int64) map[string]float64 {
	out := map[string]float64{}
	if created == 0 {
		return out
	}
	for kind, n := range after {
		verb, resource, _ := strings.Cut(kind, " ")
		resource, _, _ = strings.Cut(resource, "/")
		if !isWrite(verb) || (resource != "pods" && resource != "events") || n == before[kind] {
			continue
		}
		out[kind] = roundTo((n-before[kind])/float64(created), 3)
	}
	return out
}

func okWord(ok bool, yes, no string) string {
	if ok {
		return yes
	}
	return no
}

// loadAverage is the machine's load average over the last minute.
func loadAverage() float64 {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	var load float64
	fmt.Sscan(string(data), &load)
	return load
}

// agentProbe reads the agent's memory from /proc and its Go runtime's
// figures from its kubelet API (nodelet) or its server (kwok).
type agentProbe struct {
	pid    int
	port   int
	client *http.Client
}

func (a agentProbe) rss() float64 { return procRSS(a.pid) }

// goRuntime is what the agent's /metrics says of its Go runtime.
type goRuntime struct {
	goroutines   int
	heapInUseMiB float64
	allocMiB     float64 // allocated since the start, freed or not
}

func (a agentProbe) runtime(ctx context.Context) (goRuntime, error) {
	var rt goRuntime
	raw, err := agentGet(ctx, a.client, a.port, "/metrics")
	if err != nil {
		return rt, fmt.Errorf("agent metrics: %w", err)
	}
	found := 0
	err = scanSamples(raw, func(name, _ string, v float64) {
		switch name {
		case "go_goroutines":
			rt.goroutines = int(v)
			found++
		case "go_memstats_heap_inuse_bytes":
			rt.heapInUseMiB = roundTo(v/(1<<20), 1)
			found++
		case "go_memstats_alloc_bytes_total":
			rt.allocMiB = v / (1 << 20)
			found++
		}
	})
	if err == nil && found < 3 {
		err = fmt.Errorf("no go_goroutines, go_memstats_heap_inuse_bytes or go_memstats_alloc_bytes_total")
	}
	if err != nil {
		return rt, fmt.Errorf("agent metrics: %w", err)
	}
	return rt, nil
}

// saveHeapProfile writes the agent's heap profile, after a garbage
// collection, to dir/heap-<name>.pb.gz; a failure is only logged.
func (a agentProbe) saveHeapProfile(ctx context.Context, dir, name string) {
	data, err := a.heapProfile(ctx, true)
	if err == nil {
		if err = os.MkdirAll(dir, 0o755); err == nil {
			err = os.WriteFile(filepath.Join(dir, "heap-"+name+".pb.gz"), data, 0o644)
		}
	}
	if err != nil {
		logf("soak: heap profile %s: %v", name, err)
	}
}
