package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// controlPlane is a bin/controlplane up in a temporary directory.
type controlPlane struct {
	dir, kubeconfig string
	cmd             *exec.Cmd
	keep            bool
}

// startControlPlane runs bin/controlplane up, with extra flags for it, in a
// fresh temporary directory and waits until it is ready.
func startControlPlane(ctx context.Context, bin string, keep bool, extra ...string) (*controlPlane, error) {
	dir, err := os.MkdirTemp("", "nodelet-bench-")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(filepath.Join(bin, "controlplane"), append([]string{"up", "--dir", dir}, extra...)...)
	log, err := os.Create(filepath.Join(dir, "up.log"))
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	cp := &controlPlane{dir: dir, kubeconfig: filepath.Join(dir, "admin.kubeconfig"), cmd: cmd, keep: keep}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		if _, err := os.Stat(filepath.Join(dir, "ready")); err == nil {
			return cp, nil
		}
		if time.Now().After(deadline) {
			cp.stop()
			return nil, fmt.Errorf("control plane not ready; see %s", log.Name())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (cp *controlPlane) stop() {
	_ = cp.cmd.Process.Signal(syscall.SIGTERM)
	_ = cp.cmd.Wait()
	if cp.keep {
		logf("kept %s", cp.dir)
		return
	}
	os.RemoveAll(cp.dir)
}

// apiserverCPU is the CPU seconds the apiserver child has used so far.
func (cp *controlPlane) apiserverCPU() float64 {
	out, err := exec.Command("pgrep", "-f", "controlplane apiserver --etcd-servers").Output()
	if err != nil {
		return 0
	}
	total := 0.0
	for _, f := range strings.Fields(string(out)) {
		pid, _ := strconv.Atoi(f)
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if strings.Contains(string(cmdline), cp.dir) {
			total += procCPU(pid)
		}
	}
	return total
}

// cluster is the benchmark driver's view of the API: a fast client and
// node and pod informers that timestamp what they see.
type cluster struct {
	client kubernetes.Interface
	cancel context.CancelFunc

	readyNodes atomic.Int64
	readySeen  sync.Map // node name → struct{}

	mu       sync.Mutex
	created  map[string]time.Time // pod name → create accepted
	bound    map[string]time.Time // pod name → first seen with a node
	running  map[string]time.Time // pod name → first seen Running and Ready
	podCount atomic.Int64
	pods     cache.SharedIndexInformer
}

const benchNamespace = "bench"

func newCluster(kubeconfig string) (*cluster, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = 20000, 40000
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &cluster{client: client, cancel: cancel, created: map[string]time.Time{}, bound: map[string]time.Time{}, running: map[string]time.Time{}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: benchNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	f := informers.NewSharedInformerFactory(client, 0)
	_, _ = f.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.onNode,
		UpdateFunc: func(_, obj any) { c.onNode(obj) },
	})
	c.pods = f.Core().V1().Pods().Informer()
	_, _ = c.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.onPod,
		UpdateFunc: func(_, obj any) { c.onPod(obj) },
		DeleteFunc: func(any) { c.podCount.Add(-1) },
	})
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	return c, nil
}

func (c *cluster) stop() { c.cancel() }

func (c *cluster) podInformer() cache.SharedIndexInformer { return c.pods }

func (c *cluster) onNode(obj any) {
	n := obj.(*corev1.Node)
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
			if _, loaded := c.readySeen.LoadOrStore(n.Name, struct{}{}); !loaded {
				c.readyNodes.Add(1)
			}
		}
	}
}

func (c *cluster) onPod(obj any) {
	p := obj.(*corev1.Pod)
	if p.Spec.NodeName != "" {
		c.mu.Lock()
		if _, ok := c.bound[p.Name]; !ok {
			c.bound[p.Name] = time.Now()
		}
		c.mu.Unlock()
	}
	if p.Status.Phase != corev1.PodRunning {
		return
	}
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
			now := time.Now()
			c.mu.Lock()
			if _, ok := c.running[p.Name]; !ok {
				c.running[p.Name] = now
			}
			c.mu.Unlock()
		}
	}
}

func (c *cluster) waitNodesReady(ctx context.Context, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for c.readyNodes.Load() < int64(n) {
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d nodes Ready after %s", c.readyNodes.Load(), n, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// latest keeps the latest of the times it is shown, from many goroutines.
type latest struct {
	mu sync.Mutex
	t  time.Time
}

func (l *latest) see(t time.Time) {
	l.mu.Lock()
	if t.After(l.t) {
		l.t = t
	}
	l.mu.Unlock()
}

// parallel runs f(i) for i in [0, n) on workers goroutines.
func parallel(n, workers int, f func(i int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func (c *cluster) createKwokNodes(ctx context.Context, n int) ([]string, error) {
	names := make([]string, n)
	err := parallel(n, 64, func(i int) error {
		names[i] = fmt.Sprintf("kwok-%d", i)
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Name:        names[i],
			Annotations: map[string]string{kwokNodeAnnotation: kwokNodeAnnotationValue},
			Labels:      map[string]string{"type": "kwok", "kubernetes.io/hostname": names[i]},
		}}
		_, err := c.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		return err
	})
	return names, err
}

// createPods creates m pods spread over nodes and waits until all run.
func (c *cluster) createPods(ctx context.Context, nodes []string, m int) (p50, p99, tail float64, err error) {
	if m == 0 {
		return 0, 0, 0, nil
	}
	var last latest
	err = parallel(m, 64, func(i int) error {
		created, err := c.createPod(ctx, benchPodName(i), nodes[i%len(nodes)])
		last.see(created)
		return err
	})
	if err != nil {
		return 0, 0, 0, fmt.Errorf("create pods: %w", err)
	}
	deadline := time.Now().Add(10 * time.Minute)
	for {
		c.mu.Lock()
		n := len(c.running)
		c.mu.Unlock()
		if n >= m {
			break
		}
		if time.Now().After(deadline) {
			return 0, 0, 0, fmt.Errorf("%d of %d pods Running after 10 minutes", n, m)
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var lat []time.Duration
	var allRunning time.Time
	for name, r := range c.running {
		lat = append(lat, max(r.Sub(c.created[name]), 0))
		if r.After(allRunning) {
			allRunning = r
		}
	}
	s := sortedSeconds(lat)
	return percentile(s, 0.5), percentile(s, 0.99), max(allRunning.Sub(last.t), 0).Seconds(), nil
}

// benchPodName is the name of the bench's i-th pod.
func benchPodName(i int) string { return fmt.Sprintf("pod-%d", i) }

// createPod creates one bench pod bound to node and notes when the API
// accepted it.
func (c *cluster) createPod(ctx context.Context, name, node string) (time.Time, error) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: benchNamespace},
		Spec: corev1.PodSpec{
			NodeName:    node,
			Containers:  []corev1.Container{{Name: "app", Image: "bench:1", Command: []string{"sleep", "infinity"}}},
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
		},
	}
	if _, err := c.client.CoreV1().Pods(benchNamespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return time.Time{}, fmt.Errorf("create pod %s: %w", name, err)
	}
	now := time.Now()
	c.mu.Lock()
	c.created[name] = now
	c.mu.Unlock()
	c.podCount.Add(1)
	return now, nil
}

// runningAfter is how long after its creation a bench pod was first seen
// Running and Ready, or false while it has not been.
func (c *cluster) runningAfter(name string) (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	running, ok := c.running[name]
	if !ok {
		return 0, false
	}
	return max(running.Sub(c.created[name]), 0), true
}

// deletePod deletes one bench pod gracefully; a pod already gone is not an
// error.
func (c *cluster) deletePod(ctx context.Context, name string) error {
	err := c.client.CoreV1().Pods(benchNamespace).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete pod %s: %w", name, err)
	}
	return nil
}

// deletePods deletes the m pods gracefully and waits until all are gone.
// It returns how long after the last delete the last pod went, and how
// long the whole phase took, from the first delete: the agent's writes
// compete with the bench's deletes, so an agent that slows them ends the
// phase later even when it keeps up with them.
func (c *cluster) deletePods(ctx context.Context, m int) (afterLast, phase float64, err error) {
	if m == 0 {
		return 0, 0, nil
	}
	start := time.Now()
	var last latest
	err = parallel(m, 64, func(i int) error {
		if err := c.deletePod(ctx, benchPodName(i)); err != nil {
			return err
		}
		last.see(time.Now())
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("delete pods: %w", err)
	}
	deadline := time.Now().Add(10 * time.Minute)
	for c.podCount.Load() > 0 {
		if time.Now().After(deadline) {
			return 0, 0, fmt.Errorf("%d pods left 10 minutes after deletion", c.podCount.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(last.t).Seconds(), time.Since(start).Seconds(), nil
}

// steady counts mutating API requests and lease lapses over d.
func (c *cluster) steady(ctx context.Context, d time.Duration) (writes int, lapses int, err error) {
	lw, err := c.watchLapses(ctx)
	if err != nil {
		return 0, 0, err
	}
	before, err := c.mutatingRequests(ctx)
	if err != nil {
		lw.stop()
		return 0, 0, err
	}
	time.Sleep(d) // the measurement window
	lapses = lw.stop()
	after, err := c.mutatingRequests(ctx)
	if err != nil {
		return 0, 0, err
	}
	return after - before, lapses, nil
}

// mutatingRequests sums the apiserver's counters of writes to nodes,
// leases, pods and events.
func (c *cluster) mutatingRequests(ctx context.Context) (int, error) {
	byResource, err := c.writesByResource(ctx)
	total := 0
	for _, n := range byResource {
		total += n
	}
	return total, err
}

// writesByResource is the apiserver's count of writes so far to nodes,
// leases, pods and events, by resource.
func (c *cluster) writesByResource(ctx context.Context) (map[string]int, error) {
	totals := map[string]float64{}
	err := c.scanMetrics(ctx, func(name, line string, v float64) {
		if name == "apiserver_request_total" && isWrite(labelValue(line, "verb")) {
			switch r := labelValue(line, "resource"); r {
			case "nodes", "leases", "pods", "events":
				totals[r] += v
			}
		}
	})
	out := make(map[string]int, len(totals))
	for r, v := range totals {
		out[r] = int(v)
	}
	return out, err
}

// podWrites is the apiserver's count of writes to pods (create, status
// patch, delete) so far and the seconds it spent serving them.
func (c *cluster) podWrites(ctx context.Context) (count, seconds float64, err error) {
	err = c.scanMetrics(ctx, func(name, line string, v float64) {
		if labelValue(line, "resource") != "pods" || !isWrite(labelValue(line, "verb")) {
			return
		}
		switch name {
		case "apiserver_request_duration_seconds_count":
			count += v
		case "apiserver_request_duration_seconds_sum":
			seconds += v
		}
	})
	return count, seconds, err
}

// requestsByKind is the apiserver's count of requests so far by verb,
// resource and subresource ("PATCH pods/status").
func (c *cluster) requestsByKind(ctx context.Context) (map[string]float64, error) {
	out := map[string]float64{}
	err := c.scanMetrics(ctx, func(name, line string, v float64) {
		if name != "apiserver_request_total" {
			return
		}
		kind := labelValue(line, "verb") + " " + labelValue(line, "resource")
		if sub := labelValue(line, "subresource"); sub != "" {
			kind += "/" + sub
		}
		out[kind] += v
	})
	return out, err
}

// phaseRequests records in a result the requests the API server served
// over each phase, by kind: start before the phase, end after it.
type phaseRequests struct {
	cl     *cluster
	r      *result
	before map[string]float64
}

func (p *phaseRequests) start(ctx context.Context) (err error) {
	p.before, err = p.cl.requestsByKind(ctx)
	return err
}

// end records the phase's requests per unit (a pod, a node-minute) and
// logs the commonest.
func (p *phaseRequests) end(ctx context.Context, agent, phase, per string, units float64) error {
	after, err := p.cl.requestsByKind(ctx)
	if err != nil {
		return err
	}
	perUnit := requestsPer(p.before, after, units)
	if p.r.Requests == nil {
		p.r.Requests = map[string]map[string]float64{}
	}
	p.r.Requests[phase] = perUnit
	logf("%s: %s phase, requests %s: %s", agent, phase, per, topRequests(perUnit, 8))
	return nil
}

// requestsPer is the requests of each kind between two counts of
// requestsByKind, per unit, to the thousandth; kinds below that are left
// out.
func requestsPer(before, after map[string]float64, units float64) map[string]float64 {
	out := map[string]float64{}
	if units <= 0 {
		return out
	}
	for kind, n := range after {
		if v := math.Round((n-before[kind])/units*1000) / 1000; v > 0 {
			out[kind] = v
		}
	}
	return out
}

// topRequests is the n commonest kinds of perUnit, commonest first.
func topRequests(perUnit map[string]float64, n int) string {
	kinds := slices.Collect(maps.Keys(perUnit))
	slices.SortFunc(kinds, func(a, b string) int {
		if c := cmp.Compare(perUnit[b], perUnit[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for _, k := range kinds[:min(n, len(kinds))] {
		parts = append(parts, fmt.Sprintf("%s %.3f", k, perUnit[k]))
	}
	return strings.Join(parts, ", ")
}

// podRequests is the apiserver's count so far of the requests on pods by
// verb, subresource and code ("DELETE pods 404", "PATCH pods/status 200").
func (c *cluster) podRequests(ctx context.Context) (map[string]float64, error) {
	out := map[string]float64{}
	err := c.scanMetrics(ctx, func(name, line string, v float64) {
		if name != "apiserver_request_total" || labelValue(line, "resource") != "pods" {
			return
		}
		kind := labelValue(line, "verb") + " pods"
		if sub := labelValue(line, "subresource"); sub != "" {
			kind += "/" + sub
		}
		out[kind+" "+labelValue(line, "code")] += v
	})
	return out, err
}

// deletionRequests is what the agent asked of the API per pod while m pods
// were deleted, from two counts of podRequests: its status writes, its
// deletes (the bench's own m graceful deletes left out) and how many of
// those the API answered 404 (the pod was gone already). The kubelet
// makes one final status write and one delete.
func deletionRequests(before, after map[string]float64, m int) (statusWrites, deletes, notFound float64) {
	if m == 0 {
		return 0, 0, 0
	}
	for kind, n := range after {
		n -= before[kind]
		fields := strings.Fields(kind) // verb, resource, code
		if len(fields) != 3 {
			continue
		}
		switch {
		case fields[1] == "pods/status" && (fields[0] == "PATCH" || fields[0] == "PUT"):
			statusWrites += n
		case fields[1] == "pods" && fields[0] == "DELETE":
			deletes += n
			if fields[2] == "404" {
				notFound += n
			}
		}
	}
	per := func(n float64) float64 { return roundTo(n/float64(m), 3) }
	return per(statusWrites), per(deletes - float64(m)), per(notFound)
}

func isWrite(verb string) bool {
	return verb == "POST" || verb == "PUT" || verb == "PATCH" || verb == "DELETE"
}

// scanMetrics calls f with every sample of the apiserver's /metrics: the
// metric name, the whole line and the value.
func (c *cluster) scanMetrics(ctx context.Context, f func(name, line string, v float64)) error {
	raw, err := c.client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("apiserver metrics: %w", err)
	}
	return scanSamples(raw, f)
}

// scanSamples calls f with every sample of a Prometheus text exposition:
// the metric name, the whole line and the value.
func scanSamples(raw []byte, f func(name, line string, v float64)) error {
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) < 2 || strings.HasPrefix(line, "#") {
			continue
		}
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			continue
		}
		name := fields[0]
		if i := strings.IndexByte(line, '{'); i >= 0 {
			name = line[:i]
		}
		f(name, line, v)
	}
	return sc.Err()
}

func labelValue(line, name string) string {
	i := strings.Index(line, name+`="`)
	if i < 0 {
		return ""
	}
	rest := line[i+len(name)+2:]
	return rest[:strings.IndexByte(rest, '"')]
}
