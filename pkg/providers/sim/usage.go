package sim

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodelet/nodelet/pkg/provider"
	"github.com/nodelet/nodelet/pkg/simrules"
)

var (
	_ provider.StatsProvider     = (*Provider)(nil)
	_ provider.NodeStatsProvider = (*Provider)(nil)
)

// Annotations that set a simulated pod's usage, read at every sample so
// that re-annotating a running pod changes its load: a CPU quantity
// ("250m") and a memory quantity ("200Mi") for the whole pod, shared by
// its containers in proportion to their requests.
const (
	AnnotationCPUUsage    = "sim.nodelet.io/cpu-usage"
	AnnotationMemoryUsage = "sim.nodelet.io/memory-usage"
)

// Usage is how simulated pods use CPU and memory when no annotation says.
type Usage struct {
	// CPURequestRatio and MemoryRequestRatio are the shares of its
	// requests a container uses (0: idle); a container without a request
	// is taken as requesting AssumedCPU and AssumedMemory.
	CPURequestRatio, MemoryRequestRatio float64
	// Noise, in [0, 1], varies every sample by up to that share either way
	// (default 0: steady).
	Noise float64
	// AssumedCPU (default 100m) and AssumedMemory (default 128Mi) stand in
	// for a missing request.
	AssumedCPU, AssumedMemory resource.Quantity
	// SystemCPU and SystemMemory are the node's own usage besides its pods
	// (defaults 100m and 512Mi), as a real node's daemons.
	SystemCPU, SystemMemory resource.Quantity
}

func (u *Usage) setDefaults() {
	if u.AssumedCPU.IsZero() {
		u.AssumedCPU = resource.MustParse("100m")
	}
	if u.AssumedMemory.IsZero() {
		u.AssumedMemory = resource.MustParse("128Mi")
	}
	if u.SystemCPU.IsZero() {
		u.SystemCPU = resource.MustParse("100m")
	}
	if u.SystemMemory.IsZero() {
		u.SystemMemory = resource.MustParse("512Mi")
	}
}

func (u *Usage) validate() error {
	var errs []error
	if !(u.CPURequestRatio >= 0) || !(u.MemoryRequestRatio >= 0) { // NaN too
		errs = append(errs, errors.New("usage: request ratios must not be negative"))
	}
	if !isRatio(u.Noise) {
		errs = append(errs, fmt.Errorf("usage: noise %v must be between 0 and 1", u.Noise))
	}
	for name, q := range map[string]resource.Quantity{
		"assumed cpu": u.AssumedCPU, "assumed memory": u.AssumedMemory,
		"system cpu": u.SystemCPU, "system memory": u.SystemMemory,
	} {
		if q.Sign() < 0 {
			errs = append(errs, fmt.Errorf("usage: %s %s must not be negative", name, q.String()))
		}
	}
	return errors.Join(errs...)
}

// cpuMeter integrates a simulated CPU rate into the cumulative usage the
// summary API reports.
type cpuMeter struct {
	at    int64   // Unix nanoseconds of the last sample, 0 before the first
	total float64 // core-nanoseconds
}

// advance adds rate (in nanocores) since the last sample and returns the
// new total.
func (m *cpuMeter) advance(now time.Time, rate float64) uint64 {
	t := now.UnixNano()
	if m.at != 0 && t > m.at {
		m.total += rate * float64(t-m.at) / float64(time.Second)
	}
	m.at = t
	return uint64(m.total)
}

// sampleTime is the time a sample of usage is taken at, in whole
// milliseconds: /metrics/resource carries its timestamps so, and a rate
// computed from two samples (metrics-server's) comes out as the usage
// only if the cumulative CPU was integrated to the same instants.
func (p *Provider) sampleTime() time.Time { return p.clock.Now().Truncate(time.Millisecond) }

// PodStats samples the simulated usage of the running pods.
func (p *Provider) PodStats(ctx context.Context) ([]statsv1alpha1.PodStats, error) {
	now := p.sampleTime()
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]statsv1alpha1.PodStats, 0, len(p.pods))
	var cpu, mem float64
	var node *corev1.Node // the node kwok's expressions see, made for the first
	nodeView := func() *corev1.Node {
		if node == nil {
			node = p.nodeViewLocked()
		}
		return node
	}
	for _, st := range p.pods {
		ps, ok := p.podStatsLocked(ctx, st, now, nodeView)
		if !ok {
			continue
		}
		cpu += float64(*ps.CPU.UsageNanoCores)
		mem += float64(*ps.Memory.WorkingSetBytes)
		out = append(out, ps)
	}
	p.podsCPU, p.podsMemory = cpu, mem
	return out, nil
}

// NodeStats is the node's simulated usage: its pods' as last sampled by
// PodStats, plus the system's, against the node's capacity.
func (p *Provider) NodeStats(context.Context) (statsv1alpha1.NodeStats, error) {
	now := p.sampleTime()
	p.mu.Lock()
	defer p.mu.Unlock()
	u := &p.opts.Usage
	rate := p.podsCPU + float64(u.SystemCPU.MilliValue())*1e6
	total := p.nodeCPU.advance(now, rate)
	ws := uint64(p.podsMemory) + uint64(u.SystemMemory.Value())
	ns := statsv1alpha1.NodeStats{
		NodeName:  p.opts.NodeName,
		StartTime: metav1.NewTime(p.started),
		CPU:       &statsv1alpha1.CPUStats{Time: metav1.NewTime(now), UsageNanoCores: ptr(uint64(rate)), UsageCoreNanoSeconds: &total},
		Memory:    &statsv1alpha1.MemoryStats{Time: metav1.NewTime(now), WorkingSetBytes: &ws, UsageBytes: ptr(ws), RSSBytes: ptr(ws)},
	}
	if q, ok := p.opts.Capacity[corev1.ResourceMemory]; ok {
		avail := uint64(max(q.Value()-int64(ws), 0))
		ns.Memory.AvailableBytes = &avail
	}
	if q, ok := p.opts.Capacity[corev1.ResourceEphemeralStorage]; ok {
		capacity := uint64(q.Value())
		used := min(uint64(u.SystemMemory.Value()), capacity) // the system's files, as much as its memory
		ns.Fs = &statsv1alpha1.FsStats{Time: metav1.NewTime(now), CapacityBytes: &capacity, UsedBytes: &used, AvailableBytes: ptr(capacity - used)}
	}
	return ns, nil
}

// nodeViewLocked is the node as kwok's expressions see it (the variable
// node): its name and, once the API showed it (NodeChanged), its
// metadata; its capacity and allocatable.
func (p *Provider) nodeViewLocked() *corev1.Node {
	n := &corev1.Node{ObjectMeta: p.node.meta}
	n.Name = p.opts.NodeName
	n.Status.Capacity, n.Status.Allocatable = p.opts.Capacity, p.opts.Capacity
	return n
}

// podStatsLocked samples one pod; ok is false for a pod that does not run.
// node gives the node kwok's expressions see.
func (p *Provider) podStatsLocked(ctx context.Context, st *simPod, now time.Time, node func() *corev1.Node) (statsv1alpha1.PodStats, bool) {
	pod := st.pod
	if st.status.Phase != corev1.PodRunning || st.finished {
		return statsv1alpha1.PodStats{}, false
	}
	u := &p.opts.Usage
	running := map[string]metav1.Time{}
	for _, cs := range st.status.ContainerStatuses {
		if cs.State.Running != nil {
			running[cs.Name] = cs.State.Running.StartedAt
		}
	}
	// The pod's load: from its annotations, else a share of the requests
	// of its running containers; kwok's objects come first (below).
	weights := make([][2]float64, len(pod.Spec.Containers))
	var sumCPU, sumMem float64
	for i := range pod.Spec.Containers {
		if _, ok := running[pod.Spec.Containers[i].Name]; !ok {
			continue
		}
		req := pod.Spec.Containers[i].Resources.Requests
		c, m := u.AssumedCPU, u.AssumedMemory
		if q, ok := req[corev1.ResourceCPU]; ok {
			c = q
		}
		if q, ok := req[corev1.ResourceMemory]; ok {
			m = q
		}
		weights[i] = [2]float64{float64(c.MilliValue()) * 1e6, float64(m.Value())}
		sumCPU += weights[i][0]
		sumMem += weights[i][1]
	}
	cpu, mem := sumCPU*u.CPURequestRatio, sumMem*u.MemoryRequestRatio
	if q, err := resource.ParseQuantity(pod.Annotations[AnnotationCPUUsage]); err == nil {
		cpu = float64(q.MilliValue()) * 1e6
	}
	if q, err := resource.ParseQuantity(pod.Annotations[AnnotationMemoryUsage]); err == nil {
		mem = float64(q.Value())
	}
	if u.Noise > 0 {
		cpu *= 1 + u.Noise*(2*p.rng.Float64()-1)
		mem *= 1 + u.Noise*(2*p.rng.Float64()-1)
	}
	if st.meters == nil {
		st.meters = make([]cpuMeter, len(pod.Spec.Containers)+1)
	}
	// Each running container's share, unless kwok's ResourceUsage or
	// ClusterResourceUsage names its figures: then the pod's are the sum
	// of its containers'.
	rules := p.rules()
	type figures struct{ cpu, mem float64 }
	containers := make([]figures, len(pod.Spec.Containers))
	var sum figures
	overridden := false
	var withStatus *corev1.Pod // the pod as kwok's expressions see it, made once one applies
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		if _, ok := running[c.Name]; !ok {
			continue
		}
		share := [2]float64{1 / float64(len(running)), 1 / float64(len(running))}
		if sumCPU > 0 {
			share[0] = weights[i][0] / sumCPU
		}
		if sumMem > 0 {
			share[1] = weights[i][1] / sumMem
		}
		f := figures{cpu * share[0], mem * share[1]}
		if u := rules.Usage(pod.Namespace, pod.Name, c.Name); u != nil {
			if withStatus == nil {
				withStatus = st.current()
			}
			data := simrules.UsageData{Node: node(), Pod: withStatus, Container: c}
			for _, r := range []struct {
				name  corev1.ResourceName
				scale float64
				to    *float64
			}{{corev1.ResourceCPU, 1e9, &f.cpu}, {corev1.ResourceMemory, 1, &f.mem}} {
				v, ok, err := u.Resource(ctx, string(r.name), data)
				if err != nil {
					p.usageFailedLocked(ctx, st, u.Rule(), err)
				}
				if ok {
					*r.to, overridden = v*r.scale, true
				}
			}
		}
		containers[i] = f
		sum.cpu += f.cpu
		sum.mem += f.mem
	}
	if overridden {
		cpu, mem = sum.cpu, sum.mem
	}
	ps := statsv1alpha1.PodStats{
		PodRef: statsv1alpha1.PodReference{Name: pod.Name, Namespace: pod.Namespace, UID: string(pod.UID)},
		CPU:    cpuStats(now, cpu, st.meters[0].advance(now, cpu)),
		Memory: memoryStats(now, mem),
	}
	if st.status.StartTime != nil {
		ps.StartTime = *st.status.StartTime
	}
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		started, ok := running[c.Name]
		if !ok || i+1 >= len(st.meters) {
			continue
		}
		f := containers[i]
		ps.Containers = append(ps.Containers, statsv1alpha1.ContainerStats{
			Name:      c.Name,
			StartTime: started,
			CPU:       cpuStats(now, f.cpu, st.meters[i+1].advance(now, f.cpu)),
			Memory:    memoryStats(now, f.mem),
		})
	}
	return ps, true
}

// usageFailedLocked logs that an expression of rule failed for the pod,
// once per pod and rule (not at every sample); the figure is then kwok's
// fallback, 0.
func (p *Provider) usageFailedLocked(ctx context.Context, st *simPod, rule *simrules.Rule, err error) {
	if st.usageFailed == rule {
		return
	}
	st.usageFailed = rule
	klog.FromContext(ctx).Error(err, "kwok's usage expression failed; the figure is 0 until it does not", "pod", klog.KObj(st.pod), "rule", rule.String())
}

func cpuStats(now time.Time, rate float64, total uint64) *statsv1alpha1.CPUStats {
	return &statsv1alpha1.CPUStats{Time: metav1.NewTime(now), UsageNanoCores: ptr(uint64(rate)), UsageCoreNanoSeconds: &total}
}

func memoryStats(now time.Time, bytes float64) *statsv1alpha1.MemoryStats {
	b := uint64(bytes)
	return &statsv1alpha1.MemoryStats{Time: metav1.NewTime(now), WorkingSetBytes: &b, UsageBytes: ptr(b), RSSBytes: ptr(b)}
}
