// Package process is the process provider: it runs the pods bound to one
// node as supervised host processes and describes that node from the real
// host. Each pod gets a sandbox (its own PID, UTS, IPC and mount
// namespaces, host network) and each container a supervisor that outlives
// the agent (package runtime); volumes are prepared on the host (package
// volume), environments built as the kubelet builds them (package env),
// and probes and hooks run by package probe.
//
// This package owns the pods' lifecycle on the node: init containers,
// restart policy and crash-loop back-off, probes, hooks, graceful
// termination, active deadlines and the status computed from it all. It
// never writes to the API server: nodelet's pod controller reads the status
// it reports; it only reads what pods refer to (ConfigMaps, Secrets,
// Services, tokens, claims and their volumes) and records Events. CSI
// volumes are staged and published by package csimount, through the
// drivers' node services, once the volume controller has attached them; the
// provider reports them in the node's volumesInUse from when a pod asks for
// them until they are unstaged, and tells the node loop when that changes.
package process

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
	"github.com/nodelet/nodelet/pkg/provider"
	"github.com/nodelet/nodelet/pkg/provider/process/sandbox"
)

var (
	_ provider.PodLifecycleHandler = (*Provider)(nil)
	_ provider.PodNotifier         = (*Provider)(nil)
	_ provider.NodeProvider        = (*Provider)(nil)
	_ provider.NodeNotifier        = (*Provider)(nil)
	_ provider.LogsProvider        = (*Provider)(nil)
	_ provider.ExecProvider        = (*Provider)(nil)
	_ provider.AttachProvider      = (*Provider)(nil)
	_ provider.PortForwardProvider = (*Provider)(nil)
)

// Options configure the process provider of one node. NodeName, Address
// and RootDir are required.
type Options struct {
	NodeName string
	// Address is the node's InternalIP, which is also every pod's IP: pods
	// use the host's network.
	Address string
	// Port is the kubelet API port published in daemonEndpoints.
	Port int32
	// RootDir holds the pods' state, sandboxes, volumes and logs.
	RootDir string
	// Reserved is taken from the host's capacity to give allocatable
	// (the kubelet's systemReserved plus kubeReserved).
	Reserved corev1.ResourceList
	// MaxPods is the node's pod capacity; default 110.
	MaxPods int64
	// Version is the kubelet version in nodeInfo.
	Version string
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

// Parts are what the provider runs pods with. CSI is optional: without it,
// pods with persistentVolumeClaim volumes cannot start.
type Parts struct {
	Runtime  *sandbox.Manager
	Volumes  *hostvolume.Manager
	Env      env.Getter
	Recorder record.EventRecorder
	CSI      *csimount.Manager
}

// Provider runs the pods of one node as host processes.
type Provider struct {
	opts  Options
	parts Parts
	clock clock.WithTicker

	// ctx is the life of the pod workers: Run's context. Pods keep
	// running when it ends; only their supervision stops.
	ctx    context.Context
	cancel context.CancelFunc

	loadOnce sync.Once
	loadErr  error

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

	hostOnce sync.Once
	host     hostInfo
}

// New returns a provider; it does no I/O until Run or the first call.
func New(parts Parts, opts Options) (*Provider, error) {
	var errs []error
	if opts.NodeName == "" {
		errs = append(errs, errors.New("node name is required"))
	}
	if opts.Address == "" {
		errs = append(errs, errors.New("address is required: it is every pod's IP"))
	}
	if opts.RootDir == "" || !filepath.IsAbs(opts.RootDir) {
		errs = append(errs, fmt.Errorf("root dir %q must be an absolute path", opts.RootDir))
	}
	if parts.Runtime == nil || parts.Volumes == nil || parts.Env == nil || parts.Recorder == nil {
		errs = append(errs, errors.New("runtime, volumes, env and recorder are required"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("process provider: %w", err)
	}
	if opts.MaxPods == 0 {
		opts.MaxPods = 110
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.CleanUpPeriod <= 0 {
		opts.CleanUpPeriod = DefaultCleanUpPeriod
	}
	logger := klog.Background().WithValues("node", opts.NodeName, "provider", "process")
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	p := &Provider{
		opts: opts, parts: parts, clock: opts.Clock,
		ctx: ctx, cancel: cancel,
		pods: map[string]*podWorker{}, byUID: map[types.UID]*podWorker{},
		orphans: map[types.UID]bool{},
	}
	parts.Runtime.OnExit(p.containerExited)
	if parts.CSI != nil {
		parts.CSI.OnChange(p.nodeStatusChanged)
	}
	return p, nil
}

// Run adopts the pods left by an earlier agent, keeps volumes current and
// supervises the pods until ctx ends. The pods keep running after it
// returns.
func (p *Provider) Run(ctx context.Context) error {
	if err := p.load(); err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- p.parts.Volumes.Run(ctx) }()
	timer := p.clock.NewTimer(0)
	defer timer.Stop()
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-timer.C():
			p.cleanUp(ctx)
			timer.Reset(p.opts.CleanUpPeriod)
		}
	}
	p.cancel()
	if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("volumes: %w", err)
	}
	return nil
}

func key(namespace, name string) string { return namespace + "/" + name }

// stateFile is where a pod's spec and start time are kept, so a restarted
// agent knows what it runs.
func (p *Provider) stateFile(uid types.UID) string {
	return filepath.Join(p.opts.RootDir, "state", string(uid)+".json")
}

// podState is what survives an agent restart besides the runtime's records.
type podState struct {
	Pod         *corev1.Pod `json:"pod"`
	StartTime   time.Time   `json:"startTime"`
	FailReason  string      `json:"failReason,omitempty"`
	FailMessage string      `json:"failMessage,omitempty"`
}

func (p *Provider) saveState(s *podState) error {
	data, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("encode pod state: %w", err)
	}
	path := p.stateFile(s.Pod.UID)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("pod state: %w", err)
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("pod state: %w", err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		return fmt.Errorf("write pod state %s: %w", path, err)
	}
	return nil
}

// load adopts every pod an earlier agent left: its state file and its
// sandbox. A sandbox without state (a crash between the two) is removed; a
// state file without a sandbox is a pod whose sandbox is created again.
func (p *Provider) load() error {
	p.loadOnce.Do(func() { p.loadErr = p.doLoad() })
	return p.loadErr
}

func (p *Provider) doLoad() error {
	logger := klog.FromContext(p.ctx)
	sandboxes, err := p.parts.Runtime.Sandboxes(p.ctx)
	if err != nil {
		return fmt.Errorf("list sandboxes: %w", err)
	}
	byUID := map[types.UID]*sandbox.Sandbox{}
	for _, s := range sandboxes {
		byUID[s.Spec().UID] = s
	}
	entries, err := os.ReadDir(filepath.Join(p.opts.RootDir, "state"))
	if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("read pod states: %w", err)
	}
	for _, e := range entries {
		if filepath.Ext(e.Name()) != ".json" {
			continue
		}
		path := filepath.Join(p.opts.RootDir, "state", e.Name())
		data, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("read pod state: %w", err)
		}
		var s podState
		if err := json.Unmarshal(data, &s); err != nil || s.Pod == nil {
			logger.Error(err, "Ignoring unreadable pod state", "file", path)
			continue
		}
		w := newPodWorker(p, s.Pod, s.StartTime)
		w.failReason, w.failMessage = s.FailReason, s.FailMessage
		w.sandbox = byUID[s.Pod.UID]
		delete(byUID, s.Pod.UID)
		p.mu.Lock()
		p.pods[key(s.Pod.Namespace, s.Pod.Name)] = w
		p.byUID[s.Pod.UID] = w
		p.mu.Unlock()
		logger.Info("Adopted pod", "pod", klog.KObj(s.Pod), "sandbox", w.sandbox != nil)
		w.start()
	}
	for uid := range byUID {
		logger.Info("Removing sandbox of no known pod", "uid", uid)
		if err := p.removeOrphan(p.ctx, uid); err != nil {
			logger.Error(err, "Removing sandbox failed; retrying later", "uid", uid)
			p.mu.Lock()
			p.orphans[uid] = true
			p.mu.Unlock()
		}
	}
	return nil
}

// removeOrphan removes the sandbox of a pod the provider does not know,
// with its volumes: CSI volumes first (unpublished, then unstaged once the
// sandbox is gone), so that nothing mounted is ever deleted.
func (p *Provider) removeOrphan(ctx context.Context, uid types.UID) error {
	if p.parts.CSI != nil {
		if err := p.parts.CSI.TearDown(ctx, uid); err != nil {
			return fmt.Errorf("unpublish CSI volumes: %w", err)
		}
	}
	stub := &corev1.Pod{}
	stub.UID = uid
	if err := p.parts.Volumes.TearDown(ctx, stub); err != nil {
		return fmt.Errorf("tear down volumes: %w", err)
	}
	if err := p.parts.Runtime.RemoveSandbox(ctx, uid); err != nil {
		return err
	}
	if p.parts.CSI != nil {
		if err := p.parts.CSI.Release(ctx, uid); err != nil {
			return fmt.Errorf("unstage CSI volumes: %w", err)
		}
	}
	return nil
}

// cleanUp retries what pods that are gone left behind: sandboxes that could
// not be removed, and CSI volumes published for pods the provider does not
// know or staged for none.
func (p *Provider) cleanUp(ctx context.Context) {
	logger := klog.FromContext(ctx)
	p.mu.Lock()
	orphans := make([]types.UID, 0, len(p.orphans))
	for uid := range p.orphans {
		orphans = append(orphans, uid)
	}
	p.mu.Unlock()
	for _, uid := range orphans {
		if err := p.removeOrphan(ctx, uid); err != nil {
			logger.Error(err, "Removing sandbox of no known pod failed; retrying later", "uid", uid)
			continue
		}
		p.mu.Lock()
		delete(p.orphans, uid)
		p.mu.Unlock()
	}
	if p.parts.CSI == nil {
		return
	}
	known := func(uid types.UID) bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.byUID[uid] != nil || p.orphans[uid]
	}
	if err := p.parts.CSI.Sweep(ctx, known); err != nil {
		logger.Error(err, "Cleaning up CSI volumes failed; retrying later")
	}
}

func (p *Provider) worker(namespace, name string) (*podWorker, error) {
	if err := p.load(); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	w, ok := p.pods[key(namespace, name)]
	if !ok {
		return nil, fmt.Errorf("pod %s/%s: %w", namespace, name, provider.ErrNotFound)
	}
	return w, nil
}

// CreatePod admits the pod against the node's allocatable resources, then
// starts its worker, which sets up volumes and sandbox and runs the
// containers.
func (p *Provider) CreatePod(ctx context.Context, pod *corev1.Pod) error {
	if err := p.load(); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	k := key(pod.Namespace, pod.Name)
	if w, ok := p.pods[k]; ok {
		if w.uid != pod.UID {
			return fmt.Errorf("pod %s: another pod of that name (uid %s) is still terminating", k, w.uid)
		}
		return nil
	}
	var used provider.Requests
	count := 0
	for _, w := range p.pods {
		if !w.finished() {
			used.Add(provider.PodRequests(w.spec()))
			count++
		}
	}
	if err := provider.Admit(p.allocatable(), provider.PodRequests(pod), used, count); err != nil {
		return err
	}
	w := newPodWorker(p, pod, p.clock.Now())
	if err := p.saveState(w.state()); err != nil {
		return err
	}
	p.pods[k] = w
	p.byUID[pod.UID] = w
	w.start()
	return nil
}

// UpdatePod takes the pod's new spec: only the active deadline and
// metadata (for the downward API) can change on a running pod.
func (p *Provider) UpdatePod(ctx context.Context, pod *corev1.Pod) error {
	w, err := p.worker(pod.Namespace, pod.Name)
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
func (p *Provider) DeletePod(ctx context.Context, pod *corev1.Pod) error {
	w, err := p.worker(pod.Namespace, pod.Name)
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
// and SIGKILL.
func gracePeriod(pod *corev1.Pod) time.Duration {
	switch {
	case pod.DeletionGracePeriodSeconds != nil:
		return time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
	case pod.Spec.TerminationGracePeriodSeconds != nil:
		return time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
	}
	return 30 * time.Second
}

// GetPod returns the pod with its current status.
func (p *Provider) GetPod(_ context.Context, namespace, name string) (*corev1.Pod, error) {
	w, err := p.worker(namespace, name)
	if err != nil {
		return nil, err
	}
	return w.snapshot(), nil
}

// GetPods returns every pod the provider runs, terminating ones included.
func (p *Provider) GetPods(context.Context) ([]*corev1.Pod, error) {
	if err := p.load(); err != nil {
		return nil, err
	}
	p.mu.Lock()
	ws := make([]*podWorker, 0, len(p.pods))
	for _, w := range p.pods {
		ws = append(ws, w)
	}
	p.mu.Unlock()
	out := make([]*corev1.Pod, 0, len(ws))
	for _, w := range ws {
		out = append(out, w.snapshot())
	}
	return out, nil
}

// NotifyPods registers the callback for status changes.
func (p *Provider) NotifyPods(_ context.Context, notify func(*corev1.Pod)) {
	p.mu.Lock()
	p.notify = notify
	ws := make([]*podWorker, 0, len(p.pods))
	for _, w := range p.pods {
		ws = append(ws, w)
	}
	p.mu.Unlock()
	for _, w := range ws {
		w.kick()
	}
}

// NotifyNodeStatus registers the function that asks the node loop to
// report the node's status now: the provider calls it when the CSI volumes
// in use change. A later call replaces it; it is dropped when ctx ends.
func (p *Provider) NotifyNodeStatus(ctx context.Context, notify func()) {
	p.mu.Lock()
	p.nodeGen++
	gen := p.nodeGen
	p.nodeNotify = notify
	p.mu.Unlock()
	context.AfterFunc(ctx, func() {
		p.mu.Lock()
		if p.nodeGen == gen {
			p.nodeNotify = nil
		}
		p.mu.Unlock()
	})
}

// nodeStatusChanged asks the node loop to report the node's status.
func (p *Provider) nodeStatusChanged() {
	p.mu.Lock()
	notify := p.nodeNotify
	p.mu.Unlock()
	if notify != nil {
		notify()
	}
}

// VolumesChanged tells the provider that API objects its pods' CSI volumes
// depend on changed (a claim, a volume, a CSIDriver, a VolumeAttachment or
// the Node): pods waiting for them try again at once. It never blocks, so
// informer event handlers may call it.
func (p *Provider) VolumesChanged() {
	p.mu.Lock()
	ws := make([]*podWorker, 0, len(p.pods))
	for _, w := range p.pods {
		ws = append(ws, w)
	}
	p.mu.Unlock()
	for _, w := range ws {
		w.volumesChanged()
	}
}

// publish hands a pod's new status to the pod controller.
func (p *Provider) publish(pod *corev1.Pod) {
	p.mu.Lock()
	notify := p.notify
	p.mu.Unlock()
	if notify != nil {
		notify(pod)
	}
}

// forget removes a terminated pod.
func (p *Provider) forget(w *podWorker) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pods[key(w.namespace, w.name)] == w {
		delete(p.pods, key(w.namespace, w.name))
	}
	if p.byUID[w.uid] == w {
		delete(p.byUID, w.uid)
	}
}

// containerExited is the runtime's exit callback.
func (p *Provider) containerExited(uid types.UID, _ string) {
	p.mu.Lock()
	w := p.byUID[uid]
	p.mu.Unlock()
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
