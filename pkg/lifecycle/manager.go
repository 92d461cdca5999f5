// Package lifecycle runs pods on a node the way the kubelet's pod worker
// does, over any container runtime: volumes and the sandbox first, init
// containers in order (restartable ones as sidecars that keep running),
// then the containers, each restarted by the restart policy after a
// crash-loop back-off; probes, postStart and preStop hooks, graceful
// termination with sidecars stopped last, active deadlines, and the status
// computed every time from the runtime's records and the probes, so a
// restarted agent computes the same one.
//
// Each pod has a worker that decides apart from doing, as the kubelet
// computes a pod's actions before it carries them out: computePodActions
// (plan.go) is a pure function from a snapshot of the pod (podView, the
// same the status is computed from) and the time to a plan (podActions):
// the sandbox to set up or replace, the containers to start, restart,
// resize or leave in back-off, the containers to stop and in which order,
// and when to come back. The worker's executor (step, execute) carries the
// plan out against the Runtime and decides nothing itself, so restart,
// sidecar and back-off policy change in plan.go alone.
//
// What runs the containers is a Runtime (the process provider's host
// sandboxes, or a CRI runtime); volumes are prepared on the host by package
// hostvolume (and CSI volumes by package csimount), environments built by
// package env, probes and hooks run by package probe.
//
// The package never writes to the API server: nodelet's pod controller
// reads the status it reports. It reads what pods refer to (ConfigMaps,
// Secrets, Services, tokens, claims and their volumes), records Events, and
// owns <rootDir>/state, where each pod's spec and start time are kept.
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/lifecycle/csimount"
	"github.com/nodelet/nodelet/pkg/lifecycle/env"
	"github.com/nodelet/nodelet/pkg/lifecycle/hostvolume"
	"github.com/nodelet/nodelet/pkg/podrules"
	"github.com/nodelet/nodelet/pkg/provider"
)

var (
	_ provider.PodLifecycleHandler = (*Manager)(nil)
	_ provider.PodNotifier         = (*Manager)(nil)
	_ provider.NodeNotifier        = (*Manager)(nil)
	_ provider.LogsProvider        = (*Manager)(nil)
	_ provider.ExecProvider        = (*Manager)(nil)
	_ provider.AttachProvider      = (*Manager)(nil)
	_ provider.PortForwardProvider = (*Manager)(nil)
)

// Options configure the pod lifecycle of one node. NodeName, Address,
// RootDir and Allocatable are required.
type Options struct {
	NodeName string
	// Address is the node's InternalIP: every pod's hostIP, and the pod IP
	// of pods whose sandbox has no IP of its own.
	Address string
	// RootDir holds the pods' state (<RootDir>/state) and volumes.
	RootDir string
	// Allocatable is the node's allocatable resources, which pods are
	// admitted against and which the downward API reports as limits.
	Allocatable func() corev1.ResourceList
	// AppArmor tells that the runtime enforces the AppArmor profiles pods
	// ask for (the host has AppArmor enabled); without, such pods are
	// refused, as the kubelet refuses them.
	AppArmor bool
	// AllowedUnsafeSysctls are the sysctls beyond the safe set that pods
	// may set (names, or prefixes ending in "*").
	AllowedUnsafeSysctls []string
	// Admit, when set, may refuse a pod before it is admitted against the
	// node's resources (node pressure): with a *provider.Rejection, the
	// pod fails with its reason.
	Admit func(pod *corev1.Pod) error
	// Clock drives back-off, deadlines and probes; default the real clock.
	Clock clock.WithTicker
	// CleanUpPeriod is how often what pods that are gone left behind (their
	// CSI volumes, a sandbox that could not be removed) is cleaned up again;
	// default DefaultCleanUpPeriod.
	CleanUpPeriod time.Duration
}

// DefaultCleanUpPeriod is how often leftovers of pods that are gone are
// cleaned up when Options.CleanUpPeriod is unset.
const DefaultCleanUpPeriod = time.Minute

// Parts are what the pods run with. CSI is optional: without it, pods with
// persistentVolumeClaim volumes cannot start.
type Parts struct {
	Runtime  Runtime
	Volumes  *hostvolume.Manager
	Env      env.Getter
	Recorder record.EventRecorder
	CSI      *csimount.Manager
	// Probes, when set, count the probe attempts, and RuntimeMetrics the
	// calls to the runtime.
	Probes         *ProbeMetrics
	RuntimeMetrics *RuntimeMetrics
}

// Manager runs the pods of one node through its Runtime.
type Manager struct {
	opts   Options
	parts  Parts
	clock  clock.WithTicker
	states stateStore
	deps   *workerDeps

	// ctx is the life of the pod workers: Run's context. Pods keep
	// running when it ends; only their supervision stops.
	ctx    context.Context
	cancel context.CancelFunc

	// loadMu guards loaded: the pods an earlier agent left are adopted
	// once, by the first call that finds the runtime answering.
	loadMu sync.Mutex
	loaded bool

	mu     sync.Mutex
	pods   map[string]*podWorker // namespace/name
	byUID  map[types.UID]*podWorker
	notify func(*corev1.Pod)
	// nodeNotify asks the node loop to report the node's status; nodeGen
	// tells the registrations apart.
	nodeNotify func()
	nodeGen    int
	// orphans are sandboxes of no known pod that could not be removed yet.
	orphans map[types.UID]bool
	// nextAttempts are, by static pod UID, the attempt each container of
	// a static pod that terminated would have run next: a static pod
	// created again with that UID (its manifest removed and written back)
	// goes on counting its containers' restarts from there, as the
	// kubelet's do from the containers the runtime still holds.
	nextAttempts map[types.UID]map[string]int
	// attemptsOrder are nextAttempts' UIDs, the oldest first.
	attemptsOrder []types.UID
}

// maxNextAttempts bounds nextAttempts: static pods whose manifests never
// come back are forgotten, the oldest first.
const maxNextAttempts = 64

// New returns a manager; it does no I/O until Run or the first call.
func New(parts Parts, opts Options) (*Manager, error) {
	var errs []error
	if opts.NodeName == "" {
		errs = append(errs, errors.New("node name is required"))
	}
	if opts.Address == "" {
		errs = append(errs, errors.New("address is required: it is every pod's host IP"))
	}
	if opts.RootDir == "" || !filepath.IsAbs(opts.RootDir) {
		errs = append(errs, fmt.Errorf("root dir %q must be an absolute path", opts.RootDir))
	}
	if opts.Allocatable == nil {
		errs = append(errs, errors.New("allocatable is required"))
	}
	if parts.Runtime == nil || parts.Volumes == nil || parts.Env == nil || parts.Recorder == nil {
		errs = append(errs, errors.New("runtime, volumes, env and recorder are required"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("pod lifecycle: %w", err)
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.CleanUpPeriod <= 0 {
		opts.CleanUpPeriod = DefaultCleanUpPeriod
	}
	if parts.RuntimeMetrics != nil {
		parts.Runtime = countedRuntime{Runtime: parts.Runtime, m: parts.RuntimeMetrics}
	}
	logger := klog.Background().WithValues("node", opts.NodeName)
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	m := &Manager{
		opts: opts, parts: parts, clock: opts.Clock,
		states: stateStore{dir: filepath.Join(opts.RootDir, "state")},
		ctx:    ctx, cancel: cancel,
		pods: map[string]*podWorker{}, byUID: map[types.UID]*podWorker{},
		orphans: map[types.UID]bool{},
	}
	m.deps = &workerDeps{
		ctx: ctx, clock: opts.Clock, runtime: parts.Runtime, volumes: parts.Volumes, csi: parts.CSI,
		env: parts.Env, recorder: parts.Recorder, states: m.states, probes: parts.Probes,
		nodeName: opts.NodeName, address: opts.Address, allocatable: opts.Allocatable,
	}
	parts.Runtime.OnExit(m.containerExited)
	if parts.CSI != nil {
		parts.CSI.OnChange(m.NodeStatusChanged)
	}
	return m, nil
}

// Run adopts the pods left by an earlier agent, keeps volumes current and
// supervises the pods until ctx ends. The pods keep running after it
// returns.
func (m *Manager) Run(ctx context.Context) error {
	if err := m.load(); err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- m.parts.Volumes.Run(ctx) }()
	timer := m.clock.NewTimer(0)
	defer timer.Stop()
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-timer.C():
			m.cleanUp(ctx)
			timer.Reset(m.opts.CleanUpPeriod)
		}
	}
	m.cancel()
	if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("volumes: %w", err)
	}
	return nil
}

func key(namespace, name string) string { return namespace + "/" + name }

// load adopts every pod an earlier agent left: its state file and its
// sandbox. A sandbox without state (a crash between the two) is removed; a
// state file without a sandbox is a pod whose sandbox is created again.
func (m *Manager) load() error {
	m.loadMu.Lock()
	defer m.loadMu.Unlock()
	if m.loaded {
		return nil
	}
	if err := m.doLoad(); err != nil {
		return err
	}
	m.loaded = true
	return nil
}

func (m *Manager) doLoad() error {
	logger := klog.FromContext(m.ctx)
	sandboxes, err := m.parts.Runtime.Sandboxes(m.ctx)
	if err != nil {
		return fmt.Errorf("list sandboxes: %w", err)
	}
	byUID := map[types.UID]Sandbox{}
	for _, s := range sandboxes {
		byUID[s.UID()] = s
	}
	states, err := m.states.load(func(path string, err error) {
		logger.Error(err, "Ignoring unreadable pod state", "file", path)
	})
	if err != nil {
		return err
	}
	for _, s := range states {
		w := newPodWorker(m.deps, m, s.Pod, s.StartTime)
		w.failReason, w.failMessage = s.FailReason, s.FailMessage
		w.deleting, w.grace, w.final = s.Deleting, s.Grace, s.Final
		w.volumesTornDown = s.VolumesTornDown
		w.sandbox = byUID[s.Pod.UID]
		delete(byUID, s.Pod.UID)
		w.seedStatus()
		m.mu.Lock()
		m.pods[key(s.Pod.Namespace, s.Pod.Name)] = w
		m.byUID[s.Pod.UID] = w
		m.mu.Unlock()
		logger.Info("Adopted pod", "pod", klog.KObj(s.Pod), "sandbox", w.sandbox != nil)
		w.start()
	}
	for uid := range byUID {
		logger.Info("Removing sandbox of no known pod", "uid", uid)
		if err := m.removeOrphan(m.ctx, uid); err != nil {
			logger.Error(err, "Removing sandbox failed; retrying later", "uid", uid)
			m.mu.Lock()
			m.orphans[uid] = true
			m.mu.Unlock()
		}
	}
	return nil
}

// removeOrphan removes the sandbox of a pod the provider does not know,
// with its volumes: CSI volumes first (unpublished, then unstaged once the
// sandbox is gone), so that nothing mounted is ever deleted.
func (m *Manager) removeOrphan(ctx context.Context, uid types.UID) error {
	if m.parts.CSI != nil {
		if err := m.parts.CSI.TearDown(ctx, uid); err != nil {
			return fmt.Errorf("unpublish CSI volumes: %w", err)
		}
	}
	stub := &corev1.Pod{}
	stub.UID = uid
	if err := m.parts.Volumes.TearDown(ctx, stub); err != nil {
		return fmt.Errorf("tear down volumes: %w", err)
	}
	if err := m.parts.Runtime.RemoveSandbox(ctx, uid); err != nil {
		return err
	}
	if m.parts.CSI != nil {
		if err := m.parts.CSI.Release(ctx, uid); err != nil {
			return fmt.Errorf("unstage CSI volumes: %w", err)
		}
	}
	return nil
}

// cleanUp retries what pods that are gone left behind: sandboxes that could
// not be removed, and CSI volumes published for pods the provider does not
// know or staged for none.
func (m *Manager) cleanUp(ctx context.Context) {
	logger := klog.FromContext(ctx)
	m.mu.Lock()
	orphans := make([]types.UID, 0, len(m.orphans))
	for uid := range m.orphans {
		orphans = append(orphans, uid)
	}
	m.mu.Unlock()
	for _, uid := range orphans {
		if err := m.removeOrphan(ctx, uid); err != nil {
			logger.Error(err, "Removing sandbox of no known pod failed; retrying later", "uid", uid)
			continue
		}
		m.mu.Lock()
		delete(m.orphans, uid)
		m.mu.Unlock()
	}
	if m.parts.CSI == nil {
		return
	}
	known := func(uid types.UID) bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.byUID[uid] != nil || m.orphans[uid]
	}
	if err := m.parts.CSI.Sweep(ctx, known); err != nil {
		logger.Error(err, "Cleaning up CSI volumes failed; retrying later")
	}
}

func (m *Manager) worker(namespace, name string) (*podWorker, error) {
	if err := m.load(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	w, ok := m.pods[key(namespace, name)]
	if !ok {
		return nil, fmt.Errorf("pod %s/%s: %w", namespace, name, provider.ErrNotFound)
	}
	return w, nil
}

// CreatePod admits the pod against the node's allocatable resources and
// the host ports of the pods running on it, then starts its worker, which sets up volumes and sandbox and runs the
// containers.
func (m *Manager) CreatePod(ctx context.Context, pod *corev1.Pod) error {
	if err := m.load(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	k := key(pod.Namespace, pod.Name)
	if w, ok := m.pods[k]; ok {
		if w.uid != pod.UID {
			return fmt.Errorf("pod %s: another pod of that name (uid %s) is still terminating", k, w.uid)
		}
		return nil
	}
	var used podrules.Requests
	var running []*corev1.Pod
	for _, w := range m.pods {
		if !w.finished() {
			spec := w.spec()
			used.Add(podrules.PodRequests(spec))
			running = append(running, spec)
		}
	}
	count := len(running)
	if r := podrules.AdmitOS(pod); r != nil {
		return provider.Reject(r.Reason, "%s", r.Message)
	}
	if r := podrules.AdmitSysctls(pod, m.opts.AllowedUnsafeSysctls); r != nil {
		return provider.Reject(r.Reason, "%s", r.Message)
	}
	if r := podrules.AdmitAppArmor(pod, m.opts.AppArmor); r != nil {
		return provider.Reject(r.Reason, "%s", r.Message)
	}
	if m.opts.Admit != nil {
		if err := m.opts.Admit(pod); err != nil {
			return err
		}
	}
	if r := podrules.Admit(m.opts.Allocatable(), podrules.PodRequests(pod), used, count); r != nil {
		return provider.Reject(r.Reason, "%s", r.Message)
	}
	if r := podrules.AdmitHostPorts(pod, running); r != nil {
		return provider.Reject(r.Reason, "%s", r.Message)
	}
	w := newPodWorker(m.deps, m, pod, m.clock.Now())
	if next, ok := m.nextAttempts[pod.UID]; ok {
		delete(m.nextAttempts, pod.UID)
		for name, attempt := range next {
			cs := w.containerLocked(name)
			cs.firstAttempt, cs.backOffFrom = attempt, attempt
		}
	}
	if err := m.states.save(w.state()); err != nil {
		return err
	}
	m.pods[k] = w
	m.byUID[pod.UID] = w
	w.start()
	return nil
}

// UpdatePod takes the pod's new spec: only the active deadline and
// metadata (for the downward API) can change on a running pod.
func (m *Manager) UpdatePod(ctx context.Context, pod *corev1.Pod) error {
	w, err := m.worker(pod.Namespace, pod.Name)
	if err != nil {
		return err
	}
	if w.uid != pod.UID {
		return fmt.Errorf("pod %s/%s: uid %s, provider runs %s: %w", pod.Namespace, pod.Name, pod.UID, w.uid, provider.ErrNotFound)
	}
	w.update(pod)
	return nil
}

// DeletePod begins the pod's termination with its grace period; a second
// call with a shorter grace period shortens it.
func (m *Manager) DeletePod(ctx context.Context, pod *corev1.Pod) error {
	w, err := m.worker(pod.Namespace, pod.Name)
	if err != nil {
		return err
	}
	if pod.UID != "" && w.uid != pod.UID {
		return fmt.Errorf("pod %s/%s: uid %s, provider runs %s: %w", pod.Namespace, pod.Name, pod.UID, w.uid, provider.ErrNotFound)
	}
	w.delete(gracePeriod(pod))
	return nil
}

// gracePeriod is how long a deleted pod's containers get between SIGTERM
// and SIGKILL: the pod's, else the API server's default.
func gracePeriod(pod *corev1.Pod) time.Duration {
	grace, _ := podrules.GracePeriod(pod)
	return grace
}

// GetPod returns the pod with its current status.
func (m *Manager) GetPod(_ context.Context, namespace, name string) (*corev1.Pod, error) {
	w, err := m.worker(namespace, name)
	if err != nil {
		return nil, err
	}
	return w.snapshot(), nil
}

// GetPods returns every pod the provider runs, terminating ones included.
func (m *Manager) GetPods(context.Context) ([]*corev1.Pod, error) {
	if err := m.load(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	ws := make([]*podWorker, 0, len(m.pods))
	for _, w := range m.pods {
		ws = append(ws, w)
	}
	m.mu.Unlock()
	out := make([]*corev1.Pod, 0, len(ws))
	for _, w := range ws {
		out = append(out, w.snapshot())
	}
	return out, nil
}

// NotifyPods registers the callback for status changes.
func (m *Manager) NotifyPods(_ context.Context, notify func(*corev1.Pod)) {
	m.mu.Lock()
	m.notify = notify
	ws := make([]*podWorker, 0, len(m.pods))
	for _, w := range m.pods {
		ws = append(ws, w)
	}
	m.mu.Unlock()
	for _, w := range ws {
		w.kick()
	}
}

// NotifyNodeStatus registers the function that asks the node loop to
// report the node's status now: the provider calls it when the CSI volumes
// in use change. A later call replaces it; it is dropped when ctx ends.
func (m *Manager) NotifyNodeStatus(ctx context.Context, notify func()) {
	m.mu.Lock()
	m.nodeGen++
	gen := m.nodeGen
	m.nodeNotify = notify
	m.mu.Unlock()
	context.AfterFunc(ctx, func() {
		m.mu.Lock()
		if m.nodeGen == gen {
			m.nodeNotify = nil
		}
		m.mu.Unlock()
	})
}

// NodeStatusChanged asks the node loop to report the node's status now:
// the CSI volumes in use, or what the provider reports of its runtime,
// changed.
func (m *Manager) NodeStatusChanged() {
	m.mu.Lock()
	notify := m.nodeNotify
	m.mu.Unlock()
	if notify != nil {
		notify()
	}
}

// VolumesInUse are the CSI volumes the node must report in
// status.volumesInUse: wanted by a pod, published or staged.
func (m *Manager) VolumesInUse() []corev1.UniqueVolumeName {
	if m.parts.CSI == nil {
		return nil
	}
	return m.parts.CSI.VolumesInUse()
}

// VolumesChanged tells the provider that API objects its pods' CSI volumes
// depend on changed (a claim, a volume, a CSIDriver, a VolumeAttachment or
// the Node): pods waiting for them try again at once. It never blocks, so
// informer event handlers may call it.
func (m *Manager) VolumesChanged() {
	m.mu.Lock()
	ws := make([]*podWorker, 0, len(m.pods))
	for _, w := range m.pods {
		ws = append(ws, w)
	}
	m.mu.Unlock()
	for _, w := range ws {
		w.volumesChanged()
	}
}

// published hands a pod's new status to the pod controller.
func (m *Manager) published(pod *corev1.Pod) {
	m.mu.Lock()
	notify := m.notify
	m.mu.Unlock()
	if notify != nil {
		notify(pod)
	}
}

// Evict stops the pod as e says and fails it; it returns once the worker
// was asked to. A pod that is not running here, finished or being deleted
// is left alone.
func (m *Manager) Evict(pod *corev1.Pod, e Eviction) error {
	m.mu.Lock()
	w := m.byUID[pod.UID]
	m.mu.Unlock()
	if w == nil {
		return fmt.Errorf("evict pod %s: %w", klog.KObj(pod), provider.ErrNotFound)
	}
	w.mu.Lock()
	if w.failReason == "" && !w.deleting && w.evictReq == nil {
		w.evictReq = &e
		w.abortWaitLocked()
	}
	w.mu.Unlock()
	w.kick()
	return nil
}

// forget removes a terminated pod.
func (m *Manager) forget(w *podWorker) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.pods[key(w.namespace, w.name)] == w {
		delete(m.pods, key(w.namespace, w.name))
	}
	if m.byUID[w.uid] == w {
		delete(m.byUID, w.uid)
	}
	m.parts.Probes.forget(w.name, w.namespace, w.uid)
	if pod := w.snapshot(); podrules.IsStaticPod(pod) {
		m.rememberAttempts(pod)
	}
}

// rememberAttempts keeps the next attempt of each container of a static
// pod that terminated (nextAttempts): one past its last, for a container
// that ran.
func (m *Manager) rememberAttempts(pod *corev1.Pod) {
	next := map[string]int{}
	for _, cs := range slices.Concat(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses) {
		if cs.ContainerID != "" || cs.LastTerminationState.Terminated != nil || cs.State.Terminated != nil {
			next[cs.Name] = int(cs.RestartCount) + 1
		}
	}
	if len(next) == 0 {
		return
	}
	if m.nextAttempts == nil {
		m.nextAttempts = map[types.UID]map[string]int{}
	}
	m.nextAttempts[pod.UID] = next
	m.attemptsOrder = append(slices.DeleteFunc(m.attemptsOrder, func(u types.UID) bool { return u == pod.UID }), pod.UID)
	for len(m.attemptsOrder) > maxNextAttempts {
		delete(m.nextAttempts, m.attemptsOrder[0])
		m.attemptsOrder = m.attemptsOrder[1:]
	}
}

// containerExited is the runtime's exit callback.
func (m *Manager) containerExited(uid types.UID, _ string) {
	m.mu.Lock()
	w := m.byUID[uid]
	m.mu.Unlock()
	if w != nil {
		w.kick()
	}
}

// statusChanged tells whether two statuses differ in more than the times
// the pod controller keeps anyway.
func statusChanged(a, b *corev1.PodStatus) bool {
	strip := func(s *corev1.PodStatus) *corev1.PodStatus {
		c := s.DeepCopy()
		for i := range c.Conditions {
			c.Conditions[i].LastTransitionTime = metav1Zero
			c.Conditions[i].LastProbeTime = metav1Zero
		}
		return c
	}
	return !equality.Semantic.DeepEqual(strip(a), strip(b))
}
