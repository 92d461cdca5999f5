package main

// The --stats mode: what serving the kubelet stats endpoints to
// metrics-server costs an agent of many sim nodes, each on its own address.
// The control plane runs metrics-server (bin/controlplane up
// --metrics-server); the bench keeps it paused (SIGSTOP) until the pods
// run, lets it scrape while one window is measured, pauses it again for the
// other, and then times the endpoints itself.

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// statsOptions are the --stats mode's settings.
type statsOptions struct {
	nodes, pods int
	window      time.Duration // each CPU window
	sample      int           // nodes whose endpoints are timed
	topTimeout  time.Duration // how long metrics-server may take to cover the fleet
	profile     string        // where the agent's CPU profile of the scraped window goes
	resolution  time.Duration // metrics-server's --metric-resolution
}

// statsResult is what serving stats to metrics-server cost the agent.
type statsResult struct {
	Nodes int `json:"nodes"`
	Pods  int `json:"pods"`
	// ScrapeIntervalSeconds is metrics-server's --metric-resolution.
	ScrapeIntervalSeconds float64 `json:"scrapeIntervalSeconds"`
	NodesReadySeconds     float64 `json:"nodesReadySeconds"`
	// TopFullSeconds is from metrics-server's resumption until kubectl top
	// listed every node and pod (or gave up at --stats-top-timeout).
	TopFullSeconds float64 `json:"topFullSeconds"`
	WindowSeconds  float64 `json:"windowSeconds"`
	// The agent's CPU while metrics-server scraped and while it was
	// paused, and the difference: the cost of being scraped.
	ScrapedAgentCores float64 `json:"scrapedAgentCores"`
	IdleAgentCores    float64 `json:"idleAgentCores"`
	ExtraAgentCores   float64 `json:"extraAgentCoresFromScraping"`
	ExtraCoresGoal    float64 `json:"extraAgentCoresGoal"`
	ScrapedAgentRSS   float64 `json:"scrapedAgentRSSMiB"`
	IdleAgentRSS      float64 `json:"idleAgentRSSMiB"`
	AgentPeakRSSMiB   float64 `json:"agentPeakRSSMiB"`
	// MetricsServerCores is metrics-server's own CPU while it scraped.
	MetricsServerCores float64 `json:"metricsServerCores"`
	// The endpoints' latency on an open connection, from a sample of
	// nodes each asked at its own address, metrics-server paused.
	SampledNodes      int     `json:"sampledNodes"`
	SummaryP50Ms      float64 `json:"statsSummaryP50Ms"`
	SummaryP99Ms      float64 `json:"statsSummaryP99Ms"`
	SummaryMeanBytes  float64 `json:"statsSummaryMeanBytes"`
	ResourceP50Ms     float64 `json:"metricsResourceP50Ms"`
	ResourceP99Ms     float64 `json:"metricsResourceP99Ms"`
	ResourceMeanBytes float64 `json:"metricsResourceMeanBytes"`
	// What kubectl top listed after the scraped window.
	TopNodes int `json:"topNodes"`
	TopPods  int `json:"topPods"`
}

// measureStats runs one sim agent of so.nodes nodes serving the kubelet
// API, each node on its own loopback address, with so.pods pods, and
// measures it with and without metrics-server scraping it.
func measureStats(ctx context.Context, o options, so statsOptions) (statsResult, error) {
	r := statsResult{Nodes: so.nodes, Pods: so.pods, ExtraCoresGoal: 0.05}
	addresses, err := statsAddresses(so.nodes)
	if err != nil {
		return r, err
	}
	msPath, err := filepath.Abs(filepath.Join(o.bin, "metrics-server"))
	if err != nil {
		return r, err
	}
	if _, err := os.Stat(msPath); err != nil {
		return r, fmt.Errorf("metrics-server (make bin/metrics-server): %w", err)
	}
	cp, err := startControlPlane(ctx, o.bin, o.keep, "--metrics-server", msPath, "--metric-resolution", so.resolution.String())
	if err != nil {
		return r, err
	}
	defer cp.stop()
	ms, err := cp.metricsServer()
	if err != nil {
		return r, err
	}
	r.ScrapeIntervalSeconds = ms.resolution.Seconds()
	// Paused until the pods run; resumed before the control plane stops,
	// so that it can stop.
	if err := ms.pause(); err != nil {
		return r, err
	}
	defer func() { _ = ms.resume() }()
	cl, err := newCluster(cp.kubeconfig)
	if err != nil {
		return r, err
	}
	defer cl.stop()

	port, err := freePort()
	if err != nil {
		return r, err
	}
	configPath := filepath.Join(cp.dir, "nodelet-stats.yaml")
	config := fmt.Sprintf("apiVersion: nodelet.io/v1alpha1\nkind: NodeletConfiguration\nsim:\n  nodeAddresses: %s\n", addresses)
	if err := os.WriteFile(configPath, []byte(config), 0o644); err != nil {
		return r, err
	}
	args := append(withKubeletAPI(simAgentArgs(o, cp, so.nodes), cp, port), "--config", configPath)
	nodeNames := simNodeNames(so.nodes)
	logf("stats: starting nodelet with %d nodes on %s, kubelet API port %d", so.nodes, addresses, port)
	start := time.Now()
	proc, err := startAgent(cp.dir, "nodelet-stats", args)
	if err != nil {
		return r, err
	}
	defer proc.stop()
	pid := proc.cmd.Process.Pid
	if err := cl.waitNodesReady(ctx, so.nodes, 10*time.Minute); err != nil {
		return r, fmt.Errorf("stats agent: %w (log %s)", err, proc.logPath)
	}
	r.NodesReadySeconds = time.Since(start).Seconds()
	logf("stats: %d nodes Ready in %.1fs", so.nodes, r.NodesReadySeconds)
	if _, _, _, err := cl.createPods(ctx, nodeNames, so.pods); err != nil {
		return r, fmt.Errorf("stats agent: %w (log %s)", err, proc.logPath)
	}
	logf("stats: %d pods Running", so.pods)

	if err := ms.resume(); err != nil {
		return r, err
	}
	resumed := time.Now()
	top := topCounter{kubectl: filepath.Join(o.bin, "controlplane"), kubeconfig: cp.kubeconfig}
	nodes, pods, err := top.waitFull(ctx, so.nodes, so.pods, so.topTimeout)
	if err != nil {
		return r, err
	}
	r.TopFullSeconds = time.Since(resumed).Seconds()
	logf("stats: kubectl top lists %d of %d nodes and %d of %d pods %.1fs after metrics-server resumed", nodes, so.nodes, pods, so.pods, r.TopFullSeconds)

	r.WindowSeconds = so.window.Seconds()
	logf("stats: agent CPU for %s while metrics-server scrapes every %s", so.window, ms.resolution)
	agent0, ms0 := procCPU(pid), procCPU(ms.pid)
	profiled := make(chan error, 1)
	if so.profile != "" {
		go func() { profiled <- cpuProfile(ctx, cp.dir, port, so.window-5*time.Second, so.profile) }()
	} else {
		profiled <- nil
	}
	time.Sleep(so.window) // the measurement window
	if err := <-profiled; err != nil {
		return r, err
	}
	r.ScrapedAgentCores = (procCPU(pid) - agent0) / so.window.Seconds()
	r.MetricsServerCores = (procCPU(ms.pid) - ms0) / so.window.Seconds()
	r.ScrapedAgentRSS = procRSS(pid)
	if r.TopNodes, r.TopPods, err = top.count(ctx); err != nil {
		return r, err
	}
	logf("stats: scraped: agent %.3f cores, RSS %.0f MiB; metrics-server %.3f cores; kubectl top lists %d nodes and %d pods",
		r.ScrapedAgentCores, r.ScrapedAgentRSS, r.MetricsServerCores, r.TopNodes, r.TopPods)
	if r.TopNodes == 0 || r.TopPods == 0 {
		return r, fmt.Errorf("metrics-server has no figures after the scraped window: %d nodes, %d pods in kubectl top", r.TopNodes, r.TopPods)
	}

	if err := ms.pause(); err != nil {
		return r, err
	}
	logf("stats: agent CPU for %s with metrics-server paused", so.window)
	agent0, ms0 = procCPU(pid), procCPU(ms.pid)
	time.Sleep(so.window) // the measurement window
	r.IdleAgentCores = (procCPU(pid) - agent0) / so.window.Seconds()
	r.IdleAgentRSS = procRSS(pid)
	r.ExtraAgentCores = r.ScrapedAgentCores - r.IdleAgentCores
	logf("stats: idle: agent %.3f cores, RSS %.0f MiB (metrics-server paused: %.2f CPU s); scraping costs %.3f cores (goal < %.2f)",
		r.IdleAgentCores, r.IdleAgentRSS, procCPU(ms.pid)-ms0, r.ExtraAgentCores, r.ExtraCoresGoal)

	lat, err := timeEndpoints(ctx, cp.dir, port, so.nodes, min(so.sample, so.nodes))
	if err != nil {
		return r, err
	}
	r.SampledNodes = lat.nodes
	r.SummaryP50Ms, r.SummaryP99Ms, r.SummaryMeanBytes = lat.summary.p50(), lat.summary.p99(), lat.summary.meanBytes()
	r.ResourceP50Ms, r.ResourceP99Ms, r.ResourceMeanBytes = lat.resource.p50(), lat.resource.p99(), lat.resource.meanBytes()
	logf("stats: %d nodes: /stats/summary p50 %.2f ms p99 %.2f ms (%.0f B); /metrics/resource p50 %.2f ms p99 %.2f ms (%.0f B)",
		r.SampledNodes, r.SummaryP50Ms, r.SummaryP99Ms, r.SummaryMeanBytes, r.ResourceP50Ms, r.ResourceP99Ms, r.ResourceMeanBytes)
	r.AgentPeakRSSMiB = procPeakRSS(pid)
	r.round()
	return r, nil
}

// round keeps the figures' meaningful digits: CPU is read in hundredths of
// a second, times in microseconds.
func (r *statsResult) round() {
	for _, x := range []*float64{&r.NodesReadySeconds, &r.TopFullSeconds, &r.ScrapedAgentRSS, &r.IdleAgentRSS,
		&r.AgentPeakRSSMiB, &r.SummaryMeanBytes, &r.ResourceMeanBytes} {
		*x = roundTo(*x, 1)
	}
	for _, x := range []*float64{&r.SummaryP50Ms, &r.SummaryP99Ms, &r.ResourceP50Ms, &r.ResourceP99Ms} {
		*x = roundTo(*x, 3)
	}
	for _, x := range []*float64{&r.ScrapedAgentCores, &r.IdleAgentCores, &r.ExtraAgentCores, &r.MetricsServerCores} {
		*x = roundTo(*x, 4)
	}
}

func roundTo(x float64, digits int) float64 {
	p := math.Pow10(digits)
	return math.Round(x*p) / p
}

// statsAddresses is the smallest range of 127.64.0.0/10 that gives each of
// n nodes its own address (node i takes the (i+1)-th; at least a /24).
func statsAddresses(n int) (netip.Prefix, error) {
	hostBits := 8
	for 1<<hostBits-1 < n {
		hostBits++
	}
	if hostBits > 22 {
		return netip.Prefix{}, fmt.Errorf("%d nodes do not fit in 127.64.0.0/10", n)
	}
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{127, 64, 0, 0}), 32-hostBits), nil
}

// statsNodeAddress is node i's address in the range, as nodelet assigns it.
func statsNodeAddress(prefix netip.Prefix, i int) netip.Addr {
	a := prefix.Addr()
	b := a.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]) + uint32(i) + 1
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// pausedProcess is the control plane's metrics-server, which the bench
// stops and continues (never ends) to decide when it scrapes.
type pausedProcess struct {
	pid        int
	resolution time.Duration // its --metric-resolution
}

// metricsServer finds the metrics-server that this control plane's "up"
// started: its child whose command line names this directory.
func (cp *controlPlane) metricsServer() (pausedProcess, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return pausedProcess{}, err
	}
	certDir := "--cert-dir=" + filepath.Join(cp.dir, "metrics-server")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || procParent(pid) != cp.cmd.Process.Pid {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		args := strings.Split(string(cmdline), "\x00")
		p := pausedProcess{pid: pid}
		found := false
		for _, a := range args {
			found = found || a == certDir
			if v, ok := strings.CutPrefix(a, "--metric-resolution="); ok {
				if p.resolution, err = time.ParseDuration(v); err != nil {
					return p, fmt.Errorf("metrics-server --metric-resolution: %w", err)
				}
			}
		}
		if found {
			return p, nil
		}
	}
	return pausedProcess{}, fmt.Errorf("no metrics-server child of the control plane (pid %d); see %s", cp.cmd.Process.Pid, filepath.Join(cp.dir, "up.log"))
}

func (p pausedProcess) pause() error {
	if err := syscall.Kill(p.pid, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("pause metrics-server: %w", err)
	}
	return p.waitStopped(true)
}

func (p pausedProcess) resume() error {
	if err := syscall.Kill(p.pid, syscall.SIGCONT); err != nil {
		return fmt.Errorf("resume metrics-server: %w", err)
	}
	return p.waitStopped(false)
}

// waitStopped waits until the kernel shows the process stopped, or not:
// a signal is delivered asynchronously.
func (p pausedProcess) waitStopped(stopped bool) error {
	deadline := time.Now().Add(10 * time.Second)
	for (procState(p.pid) == "T") != stopped {
		if time.Now().After(deadline) {
			return fmt.Errorf("metrics-server (pid %d) in state %q 10s after the signal", p.pid, procState(p.pid))
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// procState is a process's state letter (R, S, T…), or "" when it is gone.
func procState(pid int) string {
	_, f := readProcStat(pid)
	if len(f) < 1 {
		return ""
	}
	return f[0]
}

// procParent is a process's parent PID, or 0.
func procParent(pid int) int {
	_, f := readProcStat(pid)
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// topCounter counts what kubectl top lists: the bench's nodes and the pods
// of its namespace.
type topCounter struct {
	kubectl, kubeconfig string
}

func (t topCounter) run(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, t.kubectl, append([]string{"kubectl", "--kubeconfig", t.kubeconfig, "top"}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("kubectl top %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// count is how many of the bench's nodes and pods kubectl top lists with
// figures.
func (t topCounter) count(ctx context.Context) (nodes, pods int, err error) {
	out, err := t.run(ctx, "nodes", "--no-headers")
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 5 && strings.HasPrefix(f[0], "bench-") && f[1] != "<unknown>" {
			nodes++
		}
	}
	out, err = t.run(ctx, "pods", "-A", "--no-headers")
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 4 && f[0] == benchNamespace {
			pods++
		}
	}
	return nodes, pods, nil
}

// waitFull polls kubectl top until it lists every node and pod, and gives
// what it last listed after timeout. kubectl top fails until metrics-server
// has two samples of something.
func (t topCounter) waitFull(ctx context.Context, wantNodes, wantPods int, timeout time.Duration) (nodes, pods int, err error) {
	deadline := time.Now().Add(timeout)
	for {
		nodes, pods, err = t.count(ctx)
		if err == nil && nodes >= wantNodes && pods >= wantPods {
			return nodes, pods, nil
		}
		if time.Now().After(deadline) {
			if nodes > 0 {
				logf("stats: kubectl top lists only %d of %d nodes and %d of %d pods after %s", nodes, wantNodes, pods, wantPods, timeout)
				return nodes, pods, nil
			}
			return 0, 0, fmt.Errorf("kubectl top lists no node %s after metrics-server resumed: %w", timeout, err)
		}
		time.Sleep(2 * time.Second)
	}
}

// responses are one endpoint's response times in milliseconds and their
// total size.
type responses struct {
	ms    []float64
	bytes int
}

func (l responses) p50() float64 { return percentile(sortedFloats(l.ms), 0.5) }
func (l responses) p99() float64 { return percentile(sortedFloats(l.ms), 0.99) }
func (l responses) meanBytes() float64 {
	if len(l.ms) == 0 {
		return 0
	}
	return float64(l.bytes) / float64(len(l.ms))
}

type endpointTimes struct {
	nodes             int
	summary, resource responses
}

// timeEndpoints asks sample random nodes, one after the other and each at
// its own address, for /stats/summary and then /metrics/resource, as the
// admin (metrics-server's identity here) without verifying the self-signed
// serving certificates. A request is timed from the moment it has a
// connection to the end of its body, so the TLS handshake of a node's
// first request is left out, as metrics-server keeps its connections.
func timeEndpoints(ctx context.Context, cpDir string, port, nodes, sample int) (endpointTimes, error) {
	var t endpointTimes
	client, transport, err := adminClient(cpDir, 30*time.Second)
	if err != nil {
		return t, err
	}
	defer transport.CloseIdleConnections()
	prefix, err := statsAddresses(nodes)
	if err != nil {
		return t, err
	}
	for _, i := range rand.Perm(nodes)[:sample] {
		base := fmt.Sprintf("https://%s:%d", statsNodeAddress(prefix, i), port)
		body, ms, err := timedGet(ctx, client, base+"/stats/summary")
		if err != nil {
			return t, err
		}
		var summary struct {
			Node struct {
				NodeName string `json:"nodeName"`
			} `json:"node"`
		}
		if err := json.Unmarshal(body, &summary); err != nil {
			return t, fmt.Errorf("%s/stats/summary: %w", base, err)
		}
		if want := simNodeName(i); summary.Node.NodeName != want {
			return t, fmt.Errorf("%s/stats/summary is node %q's, want %q's", base, summary.Node.NodeName, want)
		}
		t.summary.ms, t.summary.bytes = append(t.summary.ms, ms), t.summary.bytes+len(body)

		if body, ms, err = timedGet(ctx, client, base+"/metrics/resource"); err != nil {
			return t, err
		}
		if !strings.Contains(string(body), "node_cpu_usage_seconds_total ") {
			return t, fmt.Errorf("%s/metrics/resource has no node_cpu_usage_seconds_total", base)
		}
		t.resource.ms, t.resource.bytes = append(t.resource.ms, ms), t.resource.bytes+len(body)
		t.nodes++
		transport.CloseIdleConnections()
	}
	return t, nil
}

// adminClient is an HTTP client of the kubelet API with the control
// plane's admin certificate.
func adminClient(cpDir string, timeout time.Duration) (*http.Client, *http.Transport, error) {
	pki := filepath.Join(cpDir, "pki")
	cert, err := tls.LoadX509KeyPair(filepath.Join(pki, "admin.crt"), filepath.Join(pki, "admin.key"))
	if err != nil {
		return nil, nil, fmt.Errorf("admin client certificate: %w", err)
	}
	transport := &http.Transport{
		TLSClientConfig:     &tls.Config{Certificates: []tls.Certificate{cert}, InsecureSkipVerify: true},
		MaxIdleConnsPerHost: 1,
	}
	return &http.Client{Transport: transport, Timeout: timeout}, transport, nil
}

// cpuProfile asks the agent for a CPU profile of the next d and writes it
// to path, for go tool pprof.
func cpuProfile(ctx context.Context, cpDir string, port int, d time.Duration, path string) error {
	client, transport, err := adminClient(cpDir, d+time.Minute)
	if err != nil {
		return err
	}
	defer transport.CloseIdleConnections()
	data, err := agentGet(ctx, client, port, fmt.Sprintf("/debug/pprof/profile?seconds=%d", int(d.Seconds())))
	if err != nil {
		return fmt.Errorf("cpu profile: %w", err)
	}
	return os.WriteFile(path, data, 0o644)
}

// agentGet reads a path of the agent's kubelet API on loopback.
func agentGet(ctx context.Context, client *http.Client, port int, path string) ([]byte, error) {
	url := fmt.Sprintf("https://127.0.0.1:%d%s", port, path)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("get %s: %s", url, resp.Status)
	}
	return data, nil
}

// timedGet reads url and times it from having a connection to the end of
// the body, in milliseconds.
func timedGet(ctx context.Context, client *http.Client, url string) ([]byte, float64, error) {
	var connected time.Time
	trace := &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { connected = time.Now() }}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodGet, url, nil)
	if err != nil {
		return nil, 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("get %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	elapsed := time.Since(connected)
	if err != nil {
		return nil, 0, fmt.Errorf("get %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, 0, fmt.Errorf("get %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	return body, float64(elapsed.Microseconds()) / 1000, nil
}

func sortedFloats(v []float64) []float64 {
	out := append([]float64(nil), v...)
	sort.Float64s(out)
	return out
}
