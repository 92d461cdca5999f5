// Package sim is the simulated provider: it owns the simulated pods of one
// node — their status, their pod IPs and the node's resource accounting —
// and describes that node. Nothing runs: a pod is a map entry that moves from
// Pending to Running (and, for a configured share, to exits, restarts,
// Succeeded or Failed) to terminated on timers of the injected clock, and the
// node's conditions may flip on a schedule; so 5,000 providers and 100,000
// pods fit in one process (no goroutine per pod or per node; at most one
// timer per pod and one per node, and only while something is due; a timer
// that fires has the next one armed by a short-lived goroutine).
//
// It never touches the API server, the host or the network, but as kwok's
// objects (Options.Rules) say: it then reads log files, runs commands and
// dials addresses for the kubelet API's logs, exec and port-forward.
// nodelet's controllers read what it reports and write it to the API.
package sim

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/podrules"
	"github.com/nodelet/nodelet/pkg/provider"
	"github.com/nodelet/nodelet/pkg/simrules"
	"github.com/nodelet/nodelet/pkg/stage"
)

var (
	_ provider.PodLifecycleHandler = (*Provider)(nil)
	_ provider.PodNotifier         = (*Provider)(nil)
	_ provider.PodRestorer         = (*Provider)(nil)
	_ provider.NodeProvider        = (*Provider)(nil)
	_ provider.NodeNotifier        = (*Provider)(nil)
)

// DefaultVersion is the kubelet version a simulated node reports.
const DefaultVersion = "v1.36.3-nodelet"

// DefaultRunDuration is how long a pod that completes or fails runs when
// Options.RunDuration is not set.
const DefaultRunDuration = 10 * time.Second

// Options configure one simulated node. NodeName and PodCIDR are required.
// The zero value of every other field keeps pods simple: Running at once,
// terminated at once when deleted, never failing, and the node always
// healthy.
type Options struct {
	NodeName string
	// PodCIDR is where pod IPs are allocated (network and broadcast
	// addresses skipped, at most its first 65,536 addresses used); an IP is
	// freed when its pod terminates or reaches Succeeded or Failed.
	PodCIDR string
	// Address is the node's InternalIP and the pods' hostIP.
	Address string
	// Zone, Region and InstanceType, each when set, are the node's
	// topology.kubernetes.io/zone, topology.kubernetes.io/region and
	// node.kubernetes.io/instance-type labels, unless the node has them
	// already.
	Zone, Region, InstanceType string
	// Port is the kubelet API port published in daemonEndpoints.
	Port int32
	// StartDelay is how long a pod stays Pending; 0 runs it at once.
	StartDelay time.Duration
	// StartJitter adds to each pod's StartDelay a random extra, uniform in
	// [0, StartJitter).
	StartJitter time.Duration
	// DeleteDelay is how long a deleted pod takes to terminate, capped by its
	// grace period; 0 terminates it at once. A pod that already Succeeded or
	// Failed terminates at once.
	DeleteDelay time.Duration
	// DeleteJitter adds to each pod's DeleteDelay a random extra, uniform in
	// [0, DeleteJitter), drawn once per pod (before the grace period cap).
	DeleteJitter time.Duration
	// CompleteRatio and FailRatio are the shares of pods, each in [0, 1] and
	// together at most 1, whose containers exit once they have run for
	// RunDuration (plus RunJitter): with exit code 0 and reason Completed, or
	// exit code 1 and reason Error. Which pods is decided by a hash of the
	// pod UID, so a pod restored after an agent restart keeps its fate. What
	// follows is the kubelet's restart policy: with Never the pod Succeeds
	// (exit 0) or Fails; with OnFailure a completed pod Succeeds and a
	// failed one restarts; with Always both restart. A restart waits in
	// CrashLoopBackOff (10 s, doubling with each restart up to 5 min), then
	// runs the containers again with their restart count one higher.
	CompleteRatio float64
	FailRatio     float64
	// RunDuration is how long the containers of a completing or failing pod
	// run each time; default DefaultRunDuration.
	RunDuration time.Duration
	// RunJitter adds to each run a random extra, uniform in [0, RunJitter).
	RunJitter time.Duration
	// NodeConditions are node conditions that flip on a schedule.
	NodeConditions []NodeCondition
	// Seed seeds the jitter; nodes given different seeds draw different
	// delays. The same seed and the same calls give the same delays.
	Seed uint64
	// Capacity is the node's capacity and allocatable; pods are admitted
	// against its cpu, memory and pods. A resource left out is unlimited.
	// It is kept, not copied (the nodes of a fleet share one): the caller
	// must not change it afterwards.
	Capacity corev1.ResourceList
	// Clock drives the delays; default clock.RealClock{}.
	Clock clock.WithDelayedExecution
	// Version is the kubelet version in nodeInfo; default DefaultVersion.
	Version string
	// Volumes, when set, holds a pod Pending until the volumes it needs
	// attached are attached to the node, and the node reports the volumes
	// of its pods in status.volumesInUse, as a kubelet that mounted them.
	Volumes Volumes
	// Usage is how the pods use CPU and memory, for the stats endpoints
	// and metrics-server.
	Usage Usage
	// PingErrorFile, when set, names a file whose presence fails the node's
	// ping with the file's content as the error: a node made unhealthy on
	// demand. While it fails the node is wedged, as one whose kubelet hangs:
	// deleted pods do not terminate, and their volumes stay in use.
	PingErrorFile string
	// Pressure, when set, reports the node's memory, disk and PID pressure
	// (the eviction manager's, from the simulated usage) before the
	// scheduled NodeConditions, and Admit may refuse a pod under pressure
	// with a *provider.Rejection.
	Pressure func(node *corev1.Node)
	Admit    func(pod *corev1.Pod) error
	// Stages, when it holds stages for Pods (kwok's Stage objects), plays
	// the lifecycles of the pods created while it does, in place of
	// StartDelay, StartJitter, DeleteDelay, DeleteJitter, CompleteRatio,
	// FailRatio, RunDuration and RunJitter (see stages.go); those must be
	// left at 0 if it holds stages for Pods when the provider is made. A
	// pod keeps the lifecycle it started with. Its stages for Nodes play
	// the node, as NodeChanged shows it (see nodestages.go); stages for
	// other kinds are ignored.
	Stages stage.Source
	// Events records the Events of stages; nil drops them.
	Events EventRecorder
	// API carries out the finalizer and other patches of stages and their
	// delete of a pod not being deleted; nil skips them (a patch then
	// changes only the provider's copy of the pod).
	API StageAPI
	// NodeAPI carries out the patches of the Node and its delete by stages
	// for Nodes; nil skips them.
	NodeAPI NodeStageAPI
	// Rules, when set, are kwok's objects for what the pods do besides
	// their lifecycle: their usage (before Usage's model, see usage.go),
	// logs, exec and port-forward (see debugging.go).
	Rules simrules.Source
}

// Volumes says which volumes a pod needs attached and whether they are:
// the attach/detach controller.
type Volumes interface {
	// PodVolumes returns the names of the volumes of pod that must be
	// attached before it runs, or an error while they cannot be resolved.
	PodVolumes(pod *corev1.Pod) ([]corev1.UniqueVolumeName, error)
	// IsVolumeAttachedToNode tells whether the volume is attached to node.
	IsVolumeAttachedToNode(volume corev1.UniqueVolumeName, node types.NodeName) bool
}

// volumeRecheck is how often a pod waiting for its volumes checks them.
const volumeRecheck = time.Second

// NodeCondition is a condition a share of the simulated nodes shows for For
// out of every Every. Which nodes is decided by a hash of the node name and
// the entry's index, and each chosen node has its own offset within the
// period (a hash too, counted from the Unix epoch), so that the nodes do not
// all flip together and an agent restart changes nothing.
type NodeCondition struct {
	// Type is the condition type: Ready, MemoryPressure, DiskPressure,
	// PIDPressure or any other. Ready False or Unknown replaces the healthy
	// Ready condition (and makes the node NotReady); a pressure True
	// replaces its healthy False.
	Type corev1.NodeConditionType
	// Status is the status shown during the window: True, False or Unknown.
	// Outside it the four standard types are healthy again; a condition of
	// another type shows the opposite status (False, or True when Status is
	// False) without reason or message.
	Status corev1.ConditionStatus
	// Reason and Message are shown during the window. An empty Message says
	// that the condition is simulated and on which schedule.
	Reason  string
	Message string
	// Every is the period and For the length of the window in it, with
	// 0 < For <= Every (For == Every shows the condition all the time).
	Every, For time.Duration
	// NodeRatio is the share of nodes, in [0, 1], that show the condition.
	NodeRatio float64
}

func (o *Options) validate() error {
	var errs []error
	if o.NodeName == "" {
		errs = append(errs, errors.New("node name is required"))
	}
	if o.Address != "" {
		if _, err := netip.ParseAddr(o.Address); err != nil {
			errs = append(errs, fmt.Errorf("address: %w", err))
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"start delay", o.StartDelay}, {"start jitter", o.StartJitter},
		{"delete delay", o.DeleteDelay}, {"delete jitter", o.DeleteJitter},
		{"run duration", o.RunDuration}, {"run jitter", o.RunJitter},
	} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s %v must not be negative", d.name, d.v))
		}
	}
	if !isRatio(o.CompleteRatio) {
		errs = append(errs, fmt.Errorf("complete ratio %v must be between 0 and 1", o.CompleteRatio))
	}
	if !isRatio(o.FailRatio) {
		errs = append(errs, fmt.Errorf("fail ratio %v must be between 0 and 1", o.FailRatio))
	}
	if o.CompleteRatio+o.FailRatio > 1+ratioSlack {
		errs = append(errs, fmt.Errorf("complete ratio %v and fail ratio %v must not add up to more than 1", o.CompleteRatio, o.FailRatio))
	}
	if o.Stages != nil && len(o.Stages.Stages().For("v1", "Pod")) > 0 {
		for _, d := range []struct {
			name string
			set  bool
		}{
			{"start delay", o.StartDelay != 0}, {"start jitter", o.StartJitter != 0},
			{"delete delay", o.DeleteDelay != 0}, {"delete jitter", o.DeleteJitter != 0},
			{"complete ratio", o.CompleteRatio != 0}, {"fail ratio", o.FailRatio != 0},
			{"run duration", o.RunDuration != 0}, {"run jitter", o.RunJitter != 0},
		} {
			if d.set {
				errs = append(errs, fmt.Errorf("%s: cannot be combined with stages, which play the pods' lifecycles", d.name))
			}
		}
	}
	if err := o.Usage.validate(); err != nil {
		errs = append(errs, err)
	}
	for i, c := range o.NodeConditions {
		if err := c.validate(); err != nil {
			errs = append(errs, fmt.Errorf("node condition %d: %w", i, err))
		}
	}
	return errors.Join(errs...)
}

// ratioSlack absorbs rounding in sums of ratios such as 0.7 + 0.3.
const ratioSlack = 1e-9

func isRatio(r float64) bool { return r >= 0 && r <= 1 } // false for NaN

func (c *NodeCondition) validate() error {
	var errs []error
	if c.Type == "" {
		errs = append(errs, errors.New("type is required"))
	}
	switch c.Status {
	case corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionUnknown:
	default:
		errs = append(errs, fmt.Errorf("status %q must be True, False or Unknown", c.Status))
	}
	if c.Every <= 0 {
		errs = append(errs, fmt.Errorf("every %v must be positive", c.Every))
	}
	if c.For <= 0 || c.For > c.Every {
		errs = append(errs, fmt.Errorf("for %v must be positive and at most every (%v)", c.For, c.Every))
	}
	if !isRatio(c.NodeRatio) {
		errs = append(errs, fmt.Errorf("node ratio %v must be between 0 and 1", c.NodeRatio))
	}
	return errors.Join(errs...)
}

// Provider is one simulated node and its pods. It is safe for concurrent use.
type Provider struct {
	opts  Options
	clock clock.WithDelayedExecution
	conds []nodeCond // the entries of opts.NodeConditions this node shows
	// podCIDR is opts.PodCIDR in canonical form, the node's spec.podCIDR.
	podCIDR string

	mu       sync.Mutex
	pods     map[string]*simPod // by namespace/name
	finished int                // pods in p.pods that Succeeded or Failed
	ips      *ipAllocator
	used     podrules.Requests // sum of the requests of the admitted, unfinished pods
	rng      *rand.Rand        // jitter
	notify   func(*corev1.Pod)
	// outbox holds notifications not yet delivered; draining is set while
	// one caller delivers them, in order and without the lock.
	outbox   []*corev1.Pod
	draining bool

	// nodeNotify asks nodelet to report the node status; nodeGen counts the
	// calls of NotifyNodeStatus, flip is the one pending timer of the next
	// condition flip.
	nodeNotify func()
	nodeGen    uint64
	flip       *armed
	// volumesChanged is set when the volumes in use may have changed: the
	// node status is reported once the lock is released.
	volumesChanged bool

	// started is when the provider was made, the node's start time;
	// podsCPU (nanocores) and podsMemory (bytes) are the pods' usage at
	// the last PodStats, and nodeCPU the node's cumulative CPU.
	started             time.Time
	podsCPU, podsMemory float64
	nodeCPU             cpuMeter

	// node is the state of the node's stages.
	node nodeStaging

	// rearming counts goroutines that arm the next timer after one fired
	// (see async); tests wait for them.
	rearming sync.WaitGroup
}

// simPod is the whole state of one pod.
type simPod struct {
	// pod is the pod as given, for its metadata and spec; its status is
	// not read. It is shared with the caller (SharesPods) and never
	// changed in place: what the provider changes of its metadata (a
	// deletion, a stage's patch) replaces it with a Pod struct of its
	// own.
	pod *corev1.Pod
	// status is the pod's current status, the provider's own.
	status  corev1.PodStatus
	req     podrules.Requests // what it was admitted with
	ip      uint32            // allocator offset to release, 0 if none
	outcome outcome
	// deleteJitter is this pod's share of DeleteJitter, drawn once.
	deleteJitter time.Duration
	// finished is set once the pod Succeeded or Failed on its own: its
	// requests and IP are released, it stays until deleted.
	finished bool
	deleting bool
	// step is what happens next to the pod, at stepAt; timer is armed for
	// it while it is in the future.
	step   step
	stepAt time.Time
	timer  *armed
	// gen is bumped whenever the pod's schedule is replaced from outside (a
	// delete); a timer or a catch-up acts only if the generation it started
	// with is still current.
	gen uint64
	// volumes are the attachable volumes the pod uses, once resolved.
	volumes         []corev1.UniqueVolumeName
	volumesResolved bool
	// meters keep the pod's cumulative CPU (first) and its containers',
	// in spec order, once its usage was sampled.
	meters []cpuMeter
	// usageFailed is the kwok rule whose expression failed for the pod,
	// last logged (usageFailedLocked).
	usageFailed *simrules.Rule

	// staged is set when stages play the pod's lifecycle (see stages.go).
	staged bool
	// With stages: stage is the one to play at stepAt (step stepStage),
	// podIP the pod's IP for the templates, and plays how many stages the
	// pod played at the instant playsAt.
	stage   *stage.Stage
	podIP   string
	plays   int
	playsAt time.Time
	// view is the pod as stages see it and viewRaw its JSON, kept while
	// the pod is unchanged and a stage waits to play on it; nil once it
	// changed or none waits (see viewLocked).
	view    *stage.Object
	viewRaw []byte
	// shared is set once status was handed out with a notification, its
	// lists and pointers shared with the pod notified: it is copied
	// before it is next changed in place (see own).
	shared bool
}

// own returns the pod's status to change in place, copied first if a
// notification shares it. Every change of st.status in place goes through
// it; a status replaced whole needs none.
func (st *simPod) own() *corev1.PodStatus {
	if st.shared {
		st.status = *st.status.DeepCopy()
		st.shared = false
	}
	return &st.status
}

// current is the pod with its current status: a Pod struct of its own,
// whose status shares its lists and pointers with st's. It is for reading
// under the lock; what leaves the provider is copied (copyOut) or marks
// the status shared (queueNotify).
func (st *simPod) current() *corev1.Pod {
	return &corev1.Pod{TypeMeta: st.pod.TypeMeta, ObjectMeta: st.pod.ObjectMeta, Spec: st.pod.Spec, Status: st.status}
}

// copyOut is the pod with a copy of its current status, for a caller
// outside the provider. The metadata and spec are shared, not copied: the
// pods the provider is given are never changed in place (SharesPods), so
// neither the provider nor the callers of GetPod and GetPods change them.
func (st *simPod) copyOut() *corev1.Pod {
	pod := st.current()
	pod.Status = *st.status.DeepCopy()
	return pod
}

// New returns the provider of one simulated node. It does no I/O.
func New(opts Options) (*Provider, error) {
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("invalid sim provider options: %w", err)
	}
	ips, err := newIPAllocator(opts.PodCIDR)
	if err != nil {
		return nil, fmt.Errorf("invalid sim provider options: %w", err)
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Version == "" {
		opts.Version = DefaultVersion
	}
	if opts.RunDuration == 0 {
		opts.RunDuration = DefaultRunDuration
	}
	opts.Usage.setDefaults()
	return &Provider{
		opts:    opts,
		clock:   opts.Clock,
		started: opts.Clock.Now(),
		conds:   nodeConds(opts.NodeName, opts.NodeConditions),
		podCIDR: ips.prefix.String(),
		pods:    make(map[string]*simPod),
		ips:     ips,
		rng:     rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x9e3779b97f4a7c15)),
	}, nil
}

func key(namespace, name string) string { return namespace + "/" + name }

// CreatePod admits the pod against the node's capacity and starts it: Running
// at once, or Pending for StartDelay (plus jitter). Creating a pod it already
// runs (same UID) does nothing.
func (p *Provider) CreatePod(ctx context.Context, pod *corev1.Pod) error {
	now := p.clock.Now()
	p.mu.Lock()
	if st, ok := p.pods[key(pod.Namespace, pod.Name)]; ok {
		p.mu.Unlock()
		return sameUID(st, pod)
	}
	req := podrules.PodRequests(pod)
	if r := podrules.AdmitOS(pod); r != nil {
		p.mu.Unlock()
		return provider.Reject(r.Reason, "%s", r.Message)
	}
	if p.opts.Admit != nil {
		if err := p.opts.Admit(pod); err != nil {
			p.mu.Unlock()
			return err
		}
	}
	if r := podrules.Admit(p.opts.Capacity, req, p.used, len(p.pods)-p.finished); r != nil {
		p.mu.Unlock()
		return provider.Reject(r.Reason, "%s", r.Message)
	}
	off, ip, err := p.ips.allocate()
	if err != nil {
		p.mu.Unlock()
		return fmt.Errorf("create pod %s: %w", klog.KObj(pod), err)
	}
	if len(p.podStages()) > 0 {
		// The pod as the API has it; the stages give it its status.
		st := &simPod{pod: pod, status: *pod.Status.DeepCopy(), req: req, ip: off, podIP: ip.String(), staged: true}
		if st.status.Phase == "" {
			st.status.Phase = corev1.PodPending // as the API server creates it
		}
		return p.startStagedLocked(ctx, st, now)
	}
	st := &simPod{
		pod:          pod,
		status:       *pod.Status.DeepCopy(), // what others wrote stays (setPending sets the rest)
		req:          req,
		ip:           off,
		outcome:      p.opts.outcomeOf(pod.UID),
		deleteJitter: p.jitterLocked(p.opts.DeleteJitter),
	}
	setPending(st.pod, st.own(), now, p.opts.Address, ip.String())
	p.pods[key(pod.Namespace, pod.Name)] = st
	p.used.Add(st.req)
	delay := p.opts.StartDelay + p.jitterLocked(p.opts.StartJitter)
	if !p.volumesAttachedLocked(klog.FromContext(ctx), st) {
		delay = max(delay, volumeRecheck)
	}
	if delay > 0 {
		st.step, st.stepAt = stepStart, now.Add(delay)
	} else {
		// Running in one notification, not Pending then Running.
		p.startLocked(st, now)
	}
	p.queueNotify(st)
	gen, pending := st.gen, st.step != stepNone
	p.unlockAndNotify()

	logger := klog.FromContext(ctx)
	logger.V(4).Info("Created simulated pod", "pod", klog.KObj(pod), "podIP", ip)
	if pending {
		p.schedule(logger, st, gen)
	}
	return nil
}

// RestorePod takes over a pod that nodelet ran before it restarted, from the
// status it last reported: simulated workloads exist only on paper, so
// nothing is lost. Start time, pod IP, container states and restart counts are
// kept as they are, and so is the pod's fate (CompleteRatio, FailRatio): a
// pending pod goes on to Running after what remains of StartDelay, a running
// pod that completes or fails exits RunDuration after its containers
// started, one in CrashLoopBackOff restarts when its back-off ends (steps
// that fell due while the agent was away happen at once, at the times they
// were due). A pod that never started is created; a finished one is
// ignored.
func (p *Provider) RestorePod(ctx context.Context, pod *corev1.Pod) error {
	switch {
	case pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed:
		return nil
	case !podrules.PodStarted(pod):
		return p.CreatePod(ctx, pod)
	}
	now := p.clock.Now()
	p.mu.Lock()
	if st, ok := p.pods[key(pod.Namespace, pod.Name)]; ok {
		p.mu.Unlock()
		return sameUID(st, pod)
	}
	st := &simPod{
		pod:          pod,
		status:       *pod.Status.DeepCopy(),
		req:          podrules.PodRequests(pod),
		outcome:      p.opts.outcomeOf(pod.UID),
		deleteJitter: p.jitterLocked(p.opts.DeleteJitter),
	}
	s := &st.status
	if s.PodIP != "" {
		if st.ip = p.ips.reserve(s.PodIP); st.ip == 0 {
			klog.FromContext(ctx).V(2).Info("Restored pod IP is outside the pod CIDR or taken; keeping it unreserved", "pod", klog.KObj(pod), "podIP", s.PodIP)
		}
	} else {
		off, ip, err := p.ips.allocate()
		if err != nil {
			p.mu.Unlock()
			return fmt.Errorf("restore pod %s: %w", klog.KObj(pod), err)
		}
		st.ip, s.PodIP, s.PodIPs = off, ip.String(), []corev1.PodIP{{IP: ip.String()}}
	}
	if len(p.podStages()) > 0 {
		// Its status is the stages' so far; they go on from it.
		st.podIP, st.staged = s.PodIP, true
		return p.startStagedLocked(ctx, st, now)
	}
	if s.HostIP == "" && p.opts.Address != "" {
		s.HostIP, s.HostIPs = p.opts.Address, []corev1.HostIP{{IP: p.opts.Address}}
	}
	startedAt := now
	if s.StartTime != nil {
		startedAt = s.StartTime.Time
	} else {
		s.StartTime = ptr(metav1.NewTime(now))
	}
	if s.Phase != corev1.PodRunning {
		s.Phase = corev1.PodPending
	}
	// Restored pods were admitted before: they count, but are never rejected.
	p.pods[key(pod.Namespace, pod.Name)] = st
	p.used.Add(st.req)
	p.volumesAttachedLocked(klog.FromContext(ctx), st) // its volumes are in use again
	if s.Phase == corev1.PodPending {
		delay := p.opts.StartDelay + p.jitterLocked(p.opts.StartJitter)
		st.step, st.stepAt = stepStart, latest(now, startedAt.Add(delay))
	} else {
		p.resumeLocked(st, now)
	}
	gen, pending := st.gen, st.step != stepNone
	phase := s.Phase
	p.mu.Unlock()

	logger := klog.FromContext(ctx)
	logger.V(4).Info("Restored simulated pod", "pod", klog.KObj(pod), "phase", phase)
	if pending {
		p.schedule(logger, st, gen)
	}
	return nil
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func sameUID(st *simPod, pod *corev1.Pod) error {
	if st.pod.UID == pod.UID {
		return nil
	}
	return fmt.Errorf("pod %s: the provider still runs pod UID %s, not %s", klog.KObj(pod), st.pod.UID, pod.UID)
}

// UpdatePod replaces the pod's spec and metadata; its status is kept.
func (p *Provider) UpdatePod(ctx context.Context, pod *corev1.Pod) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	st, ok := p.pods[key(pod.Namespace, pod.Name)]
	if !ok {
		return fmt.Errorf("update pod %s: %w", klog.KObj(pod), provider.ErrNotFound)
	}
	if err := sameUID(st, pod); err != nil {
		return fmt.Errorf("update: %w", err)
	}
	old := st.pod
	st.pod = pod
	forgetView(st)
	logger := klog.FromContext(ctx)
	logger.V(4).Info("Updated simulated pod", "pod", klog.KObj(pod))
	if st.staged && stagedMetaChanged(old, st.pod) {
		// As kwok, which matches a pod again whenever it changes.
		p.rematchLater(logger, st, p.clock.Now())
	}
	return nil
}

// DeletePod stops the pod: after DeleteDelay (plus the pod's jitter), or its
// grace period if shorter, every running container has exited 0 and the pod
// is gone from the provider; its final status is notified and its IP freed.
// The final phase is Succeeded, or Failed if a container's last exit was a
// failure; a pod that had already finished keeps its status and goes at
// once. Deleting again may only bring the end closer. Deleting an unknown
// pod does nothing.
func (p *Provider) DeletePod(ctx context.Context, pod *corev1.Pod) error {
	logger := klog.FromContext(ctx)
	now := p.clock.Now()

	p.mu.Lock()
	st, ok := p.pods[key(pod.Namespace, pod.Name)]
	if !ok || (pod.UID != "" && st.pod.UID != pod.UID) {
		p.mu.Unlock()
		return nil
	}
	if pod.DeletionTimestamp != nil {
		// A Pod struct of the provider's own: the one it was given is
		// shared.
		deleted := *st.pod
		deleted.DeletionTimestamp = pod.DeletionTimestamp.DeepCopy()
		if pod.DeletionGracePeriodSeconds != nil {
			deleted.DeletionGracePeriodSeconds = ptr(*pod.DeletionGracePeriodSeconds)
		}
		st.pod = &deleted
	}
	if st.staged {
		return p.deleteStagedLocked(logger, st, pod, now)
	}
	var delay time.Duration
	if !st.finished {
		delay = p.opts.DeleteDelay + st.deleteJitter
		// A pod that names no grace period stops after DeleteDelay alone,
		// not within the API server's default of 30 s.
		if g, ok := podrules.GracePeriod(pod); ok {
			delay = min(delay, max(g, 0))
		}
	}
	at := now.Add(delay)
	if st.deleting && !at.Before(st.stepAt) {
		p.mu.Unlock()
		return nil
	}
	st.deleting = true
	st.step, st.stepAt = stepTerminate, at
	st.gen++
	gen := st.gen
	old := cancelLocked(&st.timer)
	p.mu.Unlock()
	stopTimer(old)

	if delay > 0 {
		logger.V(4).Info("Stopping simulated pod", "pod", klog.KObj(pod), "delay", delay)
	}
	p.schedule(logger, st, gen)
	return nil
}

// SharesPods says that the provider changes no pod it is handed
// (provider.PodSharer): the pod controller hands it the informer cache's
// pods, and the newer object of each once the cache has one, so that a pod
// it keeps costs its status and its simPod, not a copy of the pod.
func (p *Provider) SharesPods() {}

// GetPod returns the pod with a copy of its current status.
func (p *Provider) GetPod(_ context.Context, namespace, name string) (*corev1.Pod, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	st, ok := p.pods[key(namespace, name)]
	if !ok {
		return nil, fmt.Errorf("%s/%s: %w", namespace, name, provider.ErrNotFound)
	}
	return st.copyOut(), nil
}

// GetPods returns every pod with a copy of its status, terminating ones
// included.
func (p *Provider) GetPods(_ context.Context) ([]*corev1.Pod, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*corev1.Pod, 0, len(p.pods))
	for _, st := range p.pods {
		out = append(out, st.copyOut())
	}
	return out, nil
}

// NotifyPods sets the function called with a copy of a pod each time its
// status changes, and with its final status once it has terminated. It is
// called without the provider's lock, in the order the changes happened.
func (p *Provider) NotifyPods(_ context.Context, notify func(*corev1.Pod)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.notify = notify
}

// queueNotify queues the pod of st for the notify function: a Pod struct
// of its own that shares the status's lists and pointers with st, which
// copies them before it next changes them (own). Of each pod the provider
// keeps, the status it last notified is thus held once, however long the
// callee keeps it, instead of twice. The caller holds the lock and then
// calls unlockAndNotify.
func (p *Provider) queueNotify(st *simPod) {
	if p.notify != nil {
		p.outbox = append(p.outbox, st.current())
		st.shared = true
	}
}

// unlockAndNotify releases the lock and delivers queued notifications, unless
// another caller is already delivering (it will deliver these too, in
// order). The notify function may call back into the provider.
func (p *Provider) unlockAndNotify() {
	if p.draining {
		p.mu.Unlock()
		return
	}
	p.draining = true
	for len(p.outbox) > 0 {
		batch, notify := p.outbox, p.notify
		p.outbox = nil
		p.mu.Unlock()
		p.deliver(notify, batch)
		p.mu.Lock()
	}
	p.draining = false
	var notifyNode func()
	if p.volumesChanged {
		notifyNode, p.volumesChanged = p.nodeNotify, false
	}
	p.mu.Unlock()
	if notifyNode != nil {
		notifyNode()
	}
}

// volumesAttachedLocked resolves the pod's attachable volumes if they are
// not yet, and tells whether they are all attached to the node. The caller
// holds the lock and then calls unlockAndNotify.
func (p *Provider) volumesAttachedLocked(logger klog.Logger, st *simPod) bool {
	if p.opts.Volumes == nil {
		return true
	}
	if !st.volumesResolved {
		names, err := p.opts.Volumes.PodVolumes(st.pod)
		if err != nil {
			logger.V(4).Info("Simulated pod waits for its volumes", "pod", klog.KObj(st.pod), "err", err)
			return false
		}
		st.volumes, st.volumesResolved = names, true
		p.volumesChanged = p.volumesChanged || len(names) > 0
	}
	for _, v := range st.volumes {
		if !p.opts.Volumes.IsVolumeAttachedToNode(v, types.NodeName(p.opts.NodeName)) {
			logger.V(4).Info("Simulated pod waits for its volume to attach", "pod", klog.KObj(st.pod), "volume", v)
			return false
		}
	}
	return true
}

// volumesInUse is the sorted set of the volumes of the pods that have not
// finished, which a kubelet would have mounted or be mounting.
func (p *Provider) volumesInUse() []corev1.UniqueVolumeName {
	p.mu.Lock()
	defer p.mu.Unlock()
	set := map[corev1.UniqueVolumeName]struct{}{}
	for _, st := range p.pods {
		if !st.finished {
			for _, v := range st.volumes {
				set[v] = struct{}{}
			}
		}
	}
	if len(set) == 0 {
		return nil
	}
	return slices.Sorted(maps.Keys(set))
}

func (p *Provider) deliver(notify func(*corev1.Pod), batch []*corev1.Pod) {
	defer func() {
		if r := recover(); r != nil {
			// Let the next change deliver again, then re-panic.
			p.mu.Lock()
			p.draining = false
			p.mu.Unlock()
			panic(r)
		}
	}()
	for _, pod := range batch {
		if notify != nil {
			notify(pod)
		}
	}
}
