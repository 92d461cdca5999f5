// Package sim is the simulated provider: it owns the simulated pods of one
// node — their status, their pod IPs and the node's resource accounting —
// and describes that node. Nothing runs: a pod is a map entry that moves from
// Pending to Running to Succeeded on timers of the injected clock, so 5,000
// providers and 100,000 pods fit in one process (no goroutine per pod or per
// node; a timer only when a delay is non-zero).
//
// It never touches the API server, the host or the network: nodelet's
// controllers read what it reports and write it to the API.
package sim

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/provider"
)

var (
	_ provider.PodLifecycleHandler = (*Provider)(nil)
	_ provider.PodNotifier         = (*Provider)(nil)
	_ provider.PodRestorer         = (*Provider)(nil)
	_ provider.NodeProvider        = (*Provider)(nil)
)

// DefaultVersion is the kubelet version a simulated node reports.
const DefaultVersion = "v1.36.3-nodelet"

// Options configure one simulated node. NodeName and PodCIDR are required.
type Options struct {
	NodeName string
	// PodCIDR is where pod IPs are allocated (network and broadcast
	// addresses skipped, at most its first 65,536 addresses used); an IP is
	// freed when its pod terminates.
	PodCIDR string
	// Address is the node's InternalIP and the pods' hostIP.
	Address string
	// Port is the kubelet API port published in daemonEndpoints.
	Port int32
	// StartDelay is how long a pod stays Pending; 0 runs it at once.
	StartDelay time.Duration
	// DeleteDelay is how long a deleted pod takes to terminate, capped by its
	// grace period; 0 terminates it at once.
	DeleteDelay time.Duration
	// Capacity is the node's capacity and allocatable; pods are admitted
	// against its cpu, memory and pods. A resource left out is unlimited.
	Capacity corev1.ResourceList
	// Clock drives the delays; default clock.RealClock{}.
	Clock clock.WithDelayedExecution
	// Version is the kubelet version in nodeInfo; default DefaultVersion.
	Version string
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
	if o.StartDelay < 0 {
		errs = append(errs, fmt.Errorf("start delay %v must not be negative", o.StartDelay))
	}
	if o.DeleteDelay < 0 {
		errs = append(errs, fmt.Errorf("delete delay %v must not be negative", o.DeleteDelay))
	}
	return errors.Join(errs...)
}

// Provider is one simulated node and its pods. It is safe for concurrent use.
type Provider struct {
	opts  Options
	clock clock.WithDelayedExecution

	mu     sync.Mutex
	pods   map[string]*simPod // by namespace/name
	ips    *ipAllocator
	used   requests // sum of the admitted pods' requests
	notify func(*corev1.Pod)
	// outbox holds notifications not yet delivered; draining is set while
	// one caller delivers them, in order and without the lock.
	outbox   []*corev1.Pod
	draining bool
}

// simPod is the whole state of one pod.
type simPod struct {
	pod *corev1.Pod // our copy: spec, metadata and current status
	req requests    // what it was admitted with
	ip  uint32      // allocator offset to release, 0 if none
	// gen is bumped whenever the pending timer changes meaning; a timer acts
	// only if the generation it was armed with is still current.
	gen      uint64
	deleting bool
	deleteAt time.Time // when a deleting pod terminates
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
	opts.Capacity = opts.Capacity.DeepCopy()
	return &Provider{
		opts:  opts,
		clock: opts.Clock,
		pods:  make(map[string]*simPod),
		ips:   ips,
	}, nil
}

func key(namespace, name string) string { return namespace + "/" + name }

// CreatePod admits the pod against the node's capacity and starts it: Running
// at once, or Pending for StartDelay. Creating a pod it already runs (same
// UID) does nothing.
func (p *Provider) CreatePod(ctx context.Context, pod *corev1.Pod) error {
	now := p.clock.Now()
	p.mu.Lock()
	if st, ok := p.pods[key(pod.Namespace, pod.Name)]; ok {
		p.mu.Unlock()
		return sameUID(st, pod)
	}
	req := podRequests(pod)
	if err := p.admit(req, p.used, len(p.pods)); err != nil {
		p.mu.Unlock()
		return err
	}
	off, ip, err := p.ips.allocate()
	if err != nil {
		p.mu.Unlock()
		return fmt.Errorf("create pod %s: %w", klog.KObj(pod), err)
	}
	st := &simPod{pod: pod.DeepCopy(), req: req, ip: off}
	setPending(st.pod, now, p.opts.Address, ip.String())
	gen := p.add(st, now)
	p.unlockAndNotify()

	klog.FromContext(ctx).V(4).Info("Created simulated pod", "pod", klog.KObj(pod), "podIP", ip)
	if p.opts.StartDelay > 0 {
		p.armStart(ctx, st, gen, now, p.opts.StartDelay)
	}
	return nil
}

// RestorePod takes over a pod that nodelet ran before it restarted, from the
// status it last reported: simulated workloads exist only on paper, so
// nothing is lost. Start time, pod IP, container states and restart counts are
// kept as they are; a pending pod goes on to Running after what remains of
// StartDelay. A pod that never started is created; a finished one is ignored.
func (p *Provider) RestorePod(ctx context.Context, pod *corev1.Pod) error {
	switch {
	case pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed:
		return nil
	case !provider.PodStarted(pod):
		return p.CreatePod(ctx, pod)
	}
	now := p.clock.Now()
	p.mu.Lock()
	if st, ok := p.pods[key(pod.Namespace, pod.Name)]; ok {
		p.mu.Unlock()
		return sameUID(st, pod)
	}
	st := &simPod{pod: pod.DeepCopy(), req: podRequests(pod)}
	s := &st.pod.Status
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
	p.used.add(st.req)
	st.gen++
	gen := st.gen
	phase := s.Phase
	p.mu.Unlock()

	klog.FromContext(ctx).V(4).Info("Restored simulated pod", "pod", klog.KObj(pod), "phase", phase)
	pending := phase != corev1.PodRunning
	if pending {
		p.armStart(ctx, st, gen, now, p.opts.StartDelay-now.Sub(startedAt))
	}
	return nil
}

func sameUID(st *simPod, pod *corev1.Pod) error {
	if st.pod.UID == pod.UID {
		return nil
	}
	return fmt.Errorf("pod %s: the provider still runs pod UID %s, not %s", klog.KObj(pod), st.pod.UID, pod.UID)
}

// add stores a new pod and notifies its status. The caller holds the lock.
func (p *Provider) add(st *simPod, now time.Time) uint64 {
	p.pods[key(st.pod.Namespace, st.pod.Name)] = st
	p.used.add(st.req)
	st.gen++
	if p.opts.StartDelay <= 0 {
		setRunning(st.pod, now)
	}
	p.queueNotify(st.pod)
	return st.gen
}

// armStart runs a pending pod after delay, or at once if delay is not
// positive. It is called without the lock.
func (p *Provider) armStart(ctx context.Context, st *simPod, gen uint64, now time.Time, delay time.Duration) {
	p.mu.Lock()
	if st.pod.Status.Phase != corev1.PodPending {
		p.mu.Unlock()
		return
	}
	if delay <= 0 {
		p.startLocked(st, gen, now)
		p.unlockAndNotify()
		return
	}
	p.mu.Unlock()
	logger := klog.FromContext(ctx)
	at := now.Add(delay)
	// The callback must not read the clock: a fake clock calls it holding
	// its own lock. The pod starts at the time it was due.
	p.clock.AfterFunc(delay, func() {
		p.mu.Lock()
		if p.startLocked(st, gen, at) {
			logger.V(4).Info("Simulated pod is running", "pod", klog.KObj(st.pod))
		}
		p.unlockAndNotify()
	})
}

// startLocked moves a pending pod to Running if it is still the pod the
// timer was armed for. The caller holds the lock.
func (p *Provider) startLocked(st *simPod, gen uint64, at time.Time) bool {
	if p.pods[key(st.pod.Namespace, st.pod.Name)] != st || st.gen != gen || st.deleting || st.pod.Status.Phase != corev1.PodPending {
		return false
	}
	setRunning(st.pod, at)
	p.queueNotify(st.pod)
	return true
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
	status := st.pod.Status
	st.pod = pod.DeepCopy()
	st.pod.Status = status
	klog.FromContext(ctx).V(4).Info("Updated simulated pod", "pod", klog.KObj(pod))
	return nil
}

// DeletePod stops the pod: after DeleteDelay, or its grace period if shorter,
// every container has exited 0, the pod has Succeeded and is gone from the
// provider; its final status is notified and its IP freed. Deleting again
// may only bring the end closer. Deleting an unknown pod does nothing.
func (p *Provider) DeletePod(ctx context.Context, pod *corev1.Pod) error {
	logger := klog.FromContext(ctx)
	now := p.clock.Now()
	delay := p.opts.DeleteDelay
	if g := gracePeriod(pod); g != nil {
		delay = min(delay, max(*g, 0))
	}
	at := now.Add(delay)

	p.mu.Lock()
	st, ok := p.pods[key(pod.Namespace, pod.Name)]
	if !ok || (pod.UID != "" && st.pod.UID != pod.UID) {
		p.mu.Unlock()
		return nil
	}
	if pod.DeletionTimestamp != nil {
		st.pod.DeletionTimestamp = pod.DeletionTimestamp.DeepCopy()
		if pod.DeletionGracePeriodSeconds != nil {
			st.pod.DeletionGracePeriodSeconds = ptr(*pod.DeletionGracePeriodSeconds)
		}
	}
	if st.deleting && !at.Before(st.deleteAt) {
		p.mu.Unlock()
		return nil
	}
	st.deleting, st.deleteAt = true, at
	st.gen++
	gen := st.gen
	if delay <= 0 {
		p.terminateLocked(st, gen, now)
		p.unlockAndNotify()
		logger.V(4).Info("Simulated pod terminated", "pod", klog.KObj(pod))
		return nil
	}
	p.mu.Unlock()

	logger.V(4).Info("Stopping simulated pod", "pod", klog.KObj(pod), "delay", delay)
	// As in armStart, the callback must not read the clock.
	p.clock.AfterFunc(delay, func() {
		p.mu.Lock()
		if p.terminateLocked(st, gen, at) {
			logger.V(4).Info("Simulated pod terminated", "pod", klog.KObj(st.pod))
		}
		p.unlockAndNotify()
	})
	return nil
}

// gracePeriod is how long a deleted pod may take to stop, if the pod says.
func gracePeriod(pod *corev1.Pod) *time.Duration {
	s := pod.DeletionGracePeriodSeconds
	if s == nil {
		s = pod.Spec.TerminationGracePeriodSeconds
	}
	if s == nil {
		return nil
	}
	return ptr(time.Duration(*s) * time.Second)
}

// terminateLocked ends a deleting pod if it is still the pod the timer was
// armed for: it is removed, its IP and requests freed and its final status
// notified. The caller holds the lock.
func (p *Provider) terminateLocked(st *simPod, gen uint64, at time.Time) bool {
	k := key(st.pod.Namespace, st.pod.Name)
	if p.pods[k] != st || st.gen != gen || !st.deleting {
		return false
	}
	delete(p.pods, k)
	p.used.sub(st.req)
	p.ips.release(st.ip)
	st.ip = 0
	setTerminated(st.pod, at)
	p.queueNotify(st.pod)
	return true
}

// GetPod returns a copy of the pod with its current status.
func (p *Provider) GetPod(_ context.Context, namespace, name string) (*corev1.Pod, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	st, ok := p.pods[key(namespace, name)]
	if !ok {
		return nil, fmt.Errorf("%s/%s: %w", namespace, name, provider.ErrNotFound)
	}
	return st.pod.DeepCopy(), nil
}

// GetPods returns a copy of every pod, terminating ones included.
func (p *Provider) GetPods(_ context.Context) ([]*corev1.Pod, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*corev1.Pod, 0, len(p.pods))
	for _, st := range p.pods {
		out = append(out, st.pod.DeepCopy())
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

// queueNotify queues a copy of pod for the notify function. The caller holds
// the lock and then calls unlockAndNotify.
func (p *Provider) queueNotify(pod *corev1.Pod) {
	if p.notify != nil {
		p.outbox = append(p.outbox, pod.DeepCopy())
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
	p.mu.Unlock()
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
