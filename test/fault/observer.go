package fault

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Counters are what a user would call failures, counted from the API.
type Counters struct {
	PodsLost            int // pods gone from the API that neither the test nor a workload controller deleted
	ContainersRestarted int // restartCount increases and container ID changes
	StatusRegressions   int // pod phases going backwards (Running → Pending)
	LeaseLapses         int // a lease not renewed within its duration
	NodesNotReady       int // a node's Ready condition leaving True, but for Unknown while its lease was fresh in the API
}

func (c Counters) String() string {
	return fmt.Sprintf("pods lost %d, containers restarted %d, status regressions %d, lease lapses %d, nodes NotReady %d",
		c.PodsLost, c.ContainersRestarted, c.StatusRegressions, c.LeaseLapses, c.NodesNotReady)
}

// Observer watches the pods of one namespace and the nodes and leases whose
// names have a prefix, through its own client, and keeps Counters.
type Observer struct {
	ns, nodePrefix string
	cancel         context.CancelFunc
	// client reads a lease from the API when the watch's view of it may
	// be behind (nil: the watch's view is taken as it is).
	client kubernetes.Interface

	mu       sync.Mutex
	c        Counters
	details  []string
	deleting map[string]bool // namespace/name the test deletes
	// gone are the pods that left the API without the test deleting them,
	// each with its detail line; scaledDown are those a workload
	// controller said it deleted (a SuccessfulDelete Event), which are not
	// lost: a ReplicaSet whose create's answer an outage cut off creates
	// the pod again and deletes the surplus once it sees both.
	gone       []gonePod
	scaledDown map[string]bool
	pods       map[types.UID]*corev1.Pod
	renewed    map[string]time.Time // lease → last renewTime seen
	lapsed     map[string]bool      // lease → counted as lapsed since its last renewal
	duration   map[string]time.Duration
	ready      map[string]bool
	onDelete   func(*corev1.Pod)
	// notes are what was seen and not counted, with why, for Details.
	notes []string
}

// NodeMonitorGracePeriod is how long the node controller of the test
// control plane lets a node go without a heartbeat before it marks the
// node's Ready Unknown (hack/controlplane's --node-monitor-grace-period).
const NodeMonitorGracePeriod = 20 * time.Second

// Observe starts watching. OnDelete, when set, is called for every pod as
// it leaves the API (from the watch's goroutine).
func Observe(client kubernetes.Interface, ns, nodePrefix string, onDelete func(*corev1.Pod)) (*Observer, error) {
	ctx, cancel := context.WithCancel(context.Background())
	o := &Observer{ns: ns, nodePrefix: nodePrefix, cancel: cancel, onDelete: onDelete, client: client,
		deleting: map[string]bool{}, scaledDown: map[string]bool{}, pods: map[types.UID]*corev1.Pod{}, renewed: map[string]time.Time{},
		lapsed: map[string]bool{}, duration: map[string]time.Duration{}, ready: map[string]bool{}}

	pods := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(ns))
	nodes := informers.NewSharedInformerFactory(client, 0)
	leases := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(corev1.NamespaceNodeLease))
	handlers := []struct {
		inf cache.SharedIndexInformer
		h   cache.ResourceEventHandlerFuncs
	}{
		{pods.Core().V1().Pods().Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { o.pod(obj.(*corev1.Pod)) },
			UpdateFunc: func(_, obj any) { o.pod(obj.(*corev1.Pod)) },
			DeleteFunc: o.podGone,
		}},
		{pods.Core().V1().Events().Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { o.event(obj.(*corev1.Event)) },
			UpdateFunc: func(_, obj any) { o.event(obj.(*corev1.Event)) },
		}},
		{nodes.Core().V1().Nodes().Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { o.node(obj.(*corev1.Node)) },
			UpdateFunc: func(_, obj any) { o.node(obj.(*corev1.Node)) },
		}},
		{leases.Coordination().V1().Leases().Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { o.lease(obj.(*coordinationv1.Lease)) },
			UpdateFunc: func(_, obj any) { o.lease(obj.(*coordinationv1.Lease)) },
		}},
	}
	for _, h := range handlers {
		if _, err := h.inf.AddEventHandler(h.h); err != nil {
			cancel()
			return nil, err
		}
	}
	for _, f := range []informers.SharedInformerFactory{pods, nodes, leases} {
		f.Start(ctx.Done())
	}
	for _, f := range []informers.SharedInformerFactory{pods, nodes, leases} {
		for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
			if !ok {
				cancel()
				return nil, fmt.Errorf("observer: %v not synced", typ)
			}
		}
	}
	go o.watchLapses(ctx)
	return o, nil
}

// Stop ends the watches.
func (o *Observer) Stop() { o.cancel() }

// Deleting tells the observer that the test deletes a pod (before it does):
// its going is not a loss.
func (o *Observer) Deleting(ns, name string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.deleting[ns+"/"+name] = true
}

// Counters so far.
func (o *Observer) Counters() Counters {
	o.mu.Lock()
	defer o.mu.Unlock()
	c := o.c
	c.PodsLost = len(o.lostLocked())
	return c
}

// Details are one line per counted failure, oldest first.
func (o *Observer) Details() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := append(append([]string(nil), o.details...), o.notes...)
	for _, g := range o.lostLocked() {
		out = append(out, g.detail)
	}
	slices.Sort(out) // each begins with its time of day
	return out
}

// gonePod is a pod that left the API without the test deleting it.
type gonePod struct {
	name, detail string
}

// lostLocked are the pods gone that no workload controller said it
// deleted.
func (o *Observer) lostLocked() []gonePod {
	var lost []gonePod
	for _, g := range o.gone {
		if !o.scaledDown[g.name] {
			lost = append(lost, g)
		}
	}
	return lost
}

// event notes the pods a workload controller deleted: a ReplicaSet's
// SuccessfulDelete Event says "Deleted pod: <name>", or, once the event
// recorder has aggregated ten alike, "(combined from similar events):
// Deleted pod: <name>".
func (o *Observer) event(e *corev1.Event) {
	msg := strings.TrimPrefix(e.Message, "(combined from similar events): ")
	name, ok := strings.CutPrefix(msg, "Deleted pod: ")
	if e.Reason != "SuccessfulDelete" || !ok {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.scaledDown[name] = true
}

func (o *Observer) count(field *int, format string, args ...any) {
	*field++
	o.details = append(o.details, time.Now().Format("15:04:05.000")+" "+fmt.Sprintf(format, args...))
}

var phaseRank = map[corev1.PodPhase]int{
	corev1.PodPending: 0, corev1.PodRunning: 1, corev1.PodSucceeded: 2, corev1.PodFailed: 2,
}

func (o *Observer) pod(p *corev1.Pod) {
	o.mu.Lock()
	defer o.mu.Unlock()
	old := o.pods[p.UID]
	o.pods[p.UID] = p
	if p.DeletionTimestamp != nil && ownedByReplicaSet(p) && !o.scaledDown[p.Name] {
		// A ReplicaSet's pod whose graceful deletion someone asked for:
		// the node agent only ever finishes a deletion. The ReplicaSet's
		// own Events are not enough: the event recorder drops those of
		// one object beyond a burst of 25.
		o.scaledDown[p.Name] = true
		o.notes = append(o.notes, fmt.Sprintf("%s pod %s: deletion asked for, with a grace period of %ds (not a loss)",
			time.Now().Format("15:04:05.000"), p.Name, ptrValue(p.DeletionGracePeriodSeconds)))
	}
	if old == nil {
		return
	}
	if phaseRank[p.Status.Phase] < phaseRank[old.Status.Phase] {
		o.count(&o.c.StatusRegressions, "pod %s: phase %s after %s (%s)", p.Name, p.Status.Phase, old.Status.Phase, StateSummary(p))
	}
	before := map[string]corev1.ContainerStatus{}
	for _, s := range allStatuses(old) {
		before[s.Name] = s
	}
	for _, s := range allStatuses(p) {
		b, ok := before[s.Name]
		switch {
		case !ok:
		case s.RestartCount > b.RestartCount:
			o.count(&o.c.ContainersRestarted, "pod %s container %s: restartCount %d after %d", p.Name, s.Name, s.RestartCount, b.RestartCount)
		case s.RestartCount == b.RestartCount && b.ContainerID != "" && s.ContainerID != "" && s.ContainerID != b.ContainerID:
			o.count(&o.c.ContainersRestarted, "pod %s container %s: ID %s after %s, restartCount unchanged", p.Name, s.Name, s.ContainerID, b.ContainerID)
		}
	}
}

// StateSummary says in a few words what the pod's containers do.
func StateSummary(p *corev1.Pod) string {
	var out []string
	for _, s := range allStatuses(p) {
		switch {
		case s.State.Running != nil:
			out = append(out, s.Name+" running")
		case s.State.Terminated != nil:
			out = append(out, fmt.Sprintf("%s terminated %d %s", s.Name, s.State.Terminated.ExitCode, s.State.Terminated.Reason))
		case s.State.Waiting != nil:
			out = append(out, fmt.Sprintf("%s waiting %s %s", s.Name, s.State.Waiting.Reason, s.State.Waiting.Message))
		}
	}
	return strings.Join(out, "; ")
}

func allStatuses(p *corev1.Pod) []corev1.ContainerStatus {
	return append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...)
}

func (o *Observer) podGone(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	o.mu.Lock()
	delete(o.pods, p.UID)
	if !o.deleting[p.Namespace+"/"+p.Name] {
		o.gone = append(o.gone, gonePod{name: p.Name,
			detail: time.Now().Format("15:04:05.000") + " pod " + p.Name + " deleted, not by the test nor by a workload controller"})
	}
	onDelete := o.onDelete
	o.mu.Unlock()
	if onDelete != nil {
		onDelete(p)
	}
}

func (o *Observer) node(n *corev1.Node) {
	if !strings.HasPrefix(n.Name, o.nodePrefix) {
		return
	}
	status := corev1.ConditionUnknown
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			status = c.Status
		}
	}
	ready := status == corev1.ConditionTrue
	o.mu.Lock()
	was := o.ready[n.Name]
	o.ready[n.Name] = ready
	o.mu.Unlock()
	if !was || ready {
		return
	}
	// Ready Unknown is the node controller's verdict that no heartbeat
	// reached it for its grace period. With the node's lease renewed
	// within that period in the API, the controller's watch was behind
	// (it relists after an API server restart, and lags on a busy host),
	// not the agent: that is noted, not counted. Anything else is counted.
	age, known := o.leaseAge(n.Name)
	o.mu.Lock()
	defer o.mu.Unlock()
	if status == corev1.ConditionUnknown && known && age <= NodeMonitorGracePeriod {
		o.notes = append(o.notes, fmt.Sprintf("%s node %s: Ready left True for Unknown with its lease renewed %s before (not counted)",
			time.Now().Format("15:04:05.000"), n.Name, age.Round(time.Millisecond)))
		return
	}
	o.count(&o.c.NodesNotReady, "node %s: Ready left True", n.Name)
}

// leaseAge is how long ago the node's lease was last renewed, as the API
// has it now; known is false without a client or an answer.
func (o *Observer) leaseAge(node string) (age time.Duration, known bool) {
	renew, ok := o.apiRenewTime(node)
	if !ok {
		return 0, false
	}
	return time.Since(renew), true
}

// apiRenewTime reads the lease's renewTime from the API.
func (o *Observer) apiRenewTime(name string) (time.Time, bool) {
	if o.client == nil {
		return time.Time{}, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	l, err := o.client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{})
	if err != nil || l.Spec.RenewTime == nil {
		return time.Time{}, false
	}
	return l.Spec.RenewTime.Time, true
}

func ownedByReplicaSet(p *corev1.Pod) bool {
	for _, ref := range p.OwnerReferences {
		if ref.Kind == "ReplicaSet" && ref.Controller != nil && *ref.Controller {
			return true
		}
	}
	return false
}

func ptrValue[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func (o *Observer) lease(l *coordinationv1.Lease) {
	if !strings.HasPrefix(l.Name, o.nodePrefix) || l.Spec.RenewTime == nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if l.Spec.LeaseDurationSeconds != nil {
		o.duration[l.Name] = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	o.renewal(l.Name, l.Spec.RenewTime.Time, time.Now())
}

// renewal records a renewTime seen at now. A lapse ends only with a renewal
// that is still fresh when seen: a write that was held up (the API server
// waiting for etcd) and lands with a renewTime older than the duration
// leaves the lease lapsed, and is not a second lapse.
func (o *Observer) renewal(name string, renew, now time.Time) {
	d := o.duration[name]
	last, ok := o.renewed[name]
	if d <= 0 || ok && !renew.After(last) {
		return
	}
	o.renewed[name] = renew
	late := ok && renew.Sub(last) > d
	fresh := now.Sub(renew) <= d
	switch {
	case o.lapsed[name]:
	case late:
		o.count(&o.c.LeaseLapses, "lease %s: renewed %s after the last renewal", name, renew.Sub(last).Round(time.Millisecond))
	case !fresh:
		o.count(&o.c.LeaseLapses, "lease %s: renewed with a renewTime already %s old", name, now.Sub(renew).Round(time.Second))
	}
	o.lapsed[name] = !fresh
}

// watchLapses counts a lease as lapsed as soon as its duration has passed
// since its last renewal, without waiting for the late renewal. The watch
// may be behind the API (its reflector backs off after an API server
// restart): a lease that looks lapsed is read from the API first, and a
// renewal found there is taken as if the watch had shown it; one that
// cannot be read is looked at again at the next tick (its late renewal is
// judged when it is seen, by renewal).
func (o *Observer) watchLapses(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			o.lookForLapses(now)
		}
	}
}

// lookForLapses is one look of watchLapses at now.
func (o *Observer) lookForLapses(now time.Time) {
	o.mu.Lock()
	due := o.dueLapsesLocked(now)
	o.mu.Unlock()
	stale := map[string]bool{}
	for _, name := range due {
		if o.client == nil {
			stale[name] = true
			continue
		}
		renew, ok := o.apiRenewTime(name)
		if !ok {
			continue
		}
		o.mu.Lock()
		if renew.After(o.renewed[name]) {
			o.renewal(name, renew, now)
		} else {
			stale[name] = true
		}
		o.mu.Unlock()
	}
	o.mu.Lock()
	o.checkLapses(now, func(name string) bool { return stale[name] })
	o.mu.Unlock()
}

// dueLapsesLocked are the leases whose duration has passed by now since
// their last renewal, not yet counted.
func (o *Observer) dueLapsesLocked(now time.Time) []string {
	var out []string
	for name, last := range o.renewed {
		if d := o.duration[name]; d > 0 && now.Sub(last) > d && !o.lapsed[name] {
			out = append(out, name)
		}
	}
	return out
}

// checkLapses counts each lease whose duration has passed by now since its
// last renewal and that confirmed says is so in the API (nil: every one),
// once until it is renewed again.
func (o *Observer) checkLapses(now time.Time, confirmed func(name string) bool) {
	for _, name := range o.dueLapsesLocked(now) {
		if confirmed != nil && !confirmed(name) {
			continue
		}
		o.lapsed[name] = true
		o.count(&o.c.LeaseLapses, "lease %s: not renewed for %s", name, now.Sub(o.renewed[name]).Round(time.Second))
	}
}
