// Package node owns the Node objects of the nodes nodelet manages and their
// Leases in the kube-node-lease namespace: it registers (creates or adopts)
// each Node, renews its Lease, pings its provider and reports its status
// with a three-way patch that leaves what other actors wrote alone.
//
// One Controller serves any number of nodes: every piece of work is a task
// (lease, status or ping) of one node in a single rate-limited delaying work
// queue, drained by a fixed pool of workers. A node therefore costs a few KB
// of state and no goroutine of its own.
//
// This package never touches pods, and never removes labels, annotations,
// taints or conditions that it did not write itself.
package node

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/provider"
)

// Defaults of Options.
const (
	defaultLeaseDuration        = 40 * time.Second
	defaultStatusReportInterval = 5 * time.Minute
	defaultPingInterval         = 10 * time.Second
	defaultWorkers              = 8
)

// WorkersFor is how many workers a controller of n nodes wants: one per 4
// nodes, at least the default and at most 1,024. A worker is an idle
// goroutine between tasks; enough of them keep every lease renewed when each
// request takes seconds (a node renews every lease duration/4, so n nodes at
// latency L need n·L/(duration/4) at once: 1,000 nodes at 2 s, 200).
func WorkersFor(n int) int { return min(max(n/4, defaultWorkers), 1024) }

const (
	// pingTimeout bounds one provider ping.
	pingTimeout = 5 * time.Second
	// Backoff of a failed task: doubling from retryBase up to retryMax.
	retryBase = 200 * time.Millisecond
	retryMax  = 7 * time.Second
)

// Options configures a Controller; zero fields take defaults (validate()).
type Options struct {
	// LeaseDuration is the node Lease's duration, in whole seconds (default 40s).
	LeaseDuration time.Duration
	// RenewInterval is how often the Lease is renewed (default LeaseDuration/4).
	RenewInterval time.Duration
	// StatusReportInterval is how often an unchanged status is reported while
	// Leases keep the node alive (default 5m).
	StatusReportInterval time.Duration
	// PingInterval is how often each provider is pinged (default 10s). When
	// the Lease API is missing it is also the status heartbeat interval.
	PingInterval time.Duration
	// Workers is how many tasks run at once, across all nodes (default 8).
	Workers int
	// GrowWorkers makes Workers the least: as nodes are added, the
	// workers grow to WorkersFor the nodes managed, and never shrink.
	// For a controller whose nodes come after it starts (taken over).
	GrowWorkers bool
	// Clock is the time source (default the real clock).
	Clock clock.WithTicker
	// Conditions, when set, gives conditions that other parts of the agent
	// own (the config controller's ConfigOK) to report in a node's status
	// with the provider's. Their times are set by the report. Call
	// ReportStatus when they change.
	Conditions func(node string) []corev1.NodeCondition
}

// validate fills in defaults and reports every invalid field.
func (o *Options) validate() error {
	var errs []error
	for name, d := range map[string]time.Duration{
		"LeaseDuration": o.LeaseDuration, "RenewInterval": o.RenewInterval,
		"StatusReportInterval": o.StatusReportInterval, "PingInterval": o.PingInterval,
	} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative, got %s", name, d))
		}
	}
	if o.Workers < 0 {
		errs = append(errs, fmt.Errorf("Workers must not be negative, got %d", o.Workers))
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}

	if o.LeaseDuration == 0 {
		o.LeaseDuration = defaultLeaseDuration
	}
	if o.RenewInterval == 0 {
		o.RenewInterval = o.LeaseDuration / 4
	}
	if o.StatusReportInterval == 0 {
		o.StatusReportInterval = defaultStatusReportInterval
	}
	if o.PingInterval == 0 {
		o.PingInterval = defaultPingInterval
	}
	if o.Workers == 0 {
		o.Workers = defaultWorkers
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}

	if o.LeaseDuration%time.Second != 0 {
		errs = append(errs, fmt.Errorf("LeaseDuration must be whole seconds, got %s", o.LeaseDuration))
	}
	if o.RenewInterval >= o.LeaseDuration {
		errs = append(errs, fmt.Errorf("RenewInterval %s must be shorter than LeaseDuration %s", o.RenewInterval, o.LeaseDuration))
	}
	return errors.Join(errs...)
}

// Node is one node to manage.
type Node struct {
	// Template holds the name, labels, annotations and taints to register
	// the node with. The controller keeps it: the caller must not change
	// it afterwards.
	Template *corev1.Node
	// Provider describes the node; it may also implement provider.NodeNotifier.
	Provider provider.NodeProvider
	// TakenOver says that someone else created the Node and the agent
	// took it over: it is never created (a Node deleted stays deleted),
	// and it keeps what its creator wrote, as a kubelet keeps it. Only
	// labels and annotations it lacks are added (no taints, pod ranges or
	// provider ID), and its capacity, allocatable and addresses, where it
	// has them, stand in place of the provider's (see keptFields).
	TakenOver bool
	// Seen is a taken-over Node as the caller last saw it (a cache's
	// copy), read in place of the API's at adoption; the adoption's patch
	// carries its resourceVersion, so a stale copy is read again. The
	// controller does not change it and drops it once adopted. Optional.
	Seen *corev1.Node
}

// taskKind is one kind of periodic work on a node.
type taskKind uint8

const (
	taskLease  taskKind = iota // renew the node's Lease
	taskStatus                 // register the node if needed, then report its status when due
	taskPing                   // ping the provider
)

func (k taskKind) String() string {
	switch k {
	case taskLease:
		return "lease"
	case taskStatus:
		return "status"
	case taskPing:
		return "ping"
	}
	return fmt.Sprintf("task(%d)", uint8(k))
}

// taskKey is a work queue item: one task of one node. gen is the node's
// generation (nodeState.gen): the tasks of a node removed, or removed and
// added again, are dropped rather than run twice over.
type taskKey struct {
	node string
	gen  uint64
	task taskKind
}

// nodeState is everything the controller keeps about one node. The queue
// never runs two tasks with the same key at once, but the tasks of one node
// run concurrently, so the mutable fields are guarded by mu.
type nodeState struct {
	name      string
	gen       uint64
	template  *corev1.Node // never modified
	provider  provider.NodeProvider
	takenOver bool
	// known is the Node as the agent last had it without a GET: Node.Seen
	// until the node is adopted, read by the adoption, then the Node as the
	// adoption left it, read by the first status write, which drops it.
	// Guarded by mu.
	known *corev1.Node
	// stop ends what was started for the node (its provider's
	// notifications); set under the controller's mu once Run started.
	stop context.CancelFunc
	// reported is guarded by the controller's mu: the first status write
	// succeeded.
	reported bool

	// writeMu serializes the status writes of the node: a write computes
	// the desired status and patches it holding it, so that no write from
	// an older desired status lands after a newer one.
	writeMu sync.Mutex

	mu          sync.Mutex
	uid         types.UID             // of the registered Node; empty until registered
	lease       *coordinationv1.Lease // as last written; nil to GET it first
	pingErr     error                 // outcome of the last ping
	applied     *appliedStatus        // of the status last written
	appliedAt   time.Time             // when applied was written
	forceReport bool                  // write the status at the next check even if unchanged
	// kept are the fields of a taken-over Node that its creator wrote,
	// as last read; nil for the agent's own nodes.
	kept *keptFields
	// volumesAttached is status.volumesAttached as the attach/detach
	// controller last set it (SetVolumesAttached).
	volumesAttached []corev1.AttachedVolume
}

// Controller registers nodes and keeps their Lease and status current.
type Controller struct {
	client kubernetes.Interface
	opts   Options
	queue  workqueue.TypedRateLimitingInterface[taskKey]

	// mu guards the set of nodes, which changes at run time (Add,
	// Remove), how many of them have reported, and runCtx, Run's context
	// once it started the nodes it began with.
	mu       sync.RWMutex
	nodes    map[string]*nodeState
	reported int
	runCtx   context.Context
	gen      uint64

	// workers is how many workers run (guarded by mu); stopping, set by
	// Run before it waits for them, stops more from starting.
	workers  int
	stopping bool
	workerWG sync.WaitGroup

	// useLeases is decided once by Run before the workers start.
	useLeases bool
	started   atomic.Bool

	randMu sync.Mutex
	rand   *rand.Rand // for jitter

	readyOnce sync.Once
	ready     chan struct{}
}

// NewController returns a controller for nodes, which may be none when
// nodes are added later (Add). It does no I/O.
func NewController(client kubernetes.Interface, nodes []Node, opts Options) (*Controller, error) {
	if client == nil {
		return nil, errors.New("node controller: no API client")
	}
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("node controller options: %w", err)
	}
	seed := uint64(opts.Clock.Now().UnixNano())
	c := &Controller{
		client:    client,
		opts:      opts,
		nodes:     make(map[string]*nodeState, len(nodes)),
		useLeases: true,
		rand:      rand.New(rand.NewPCG(seed, uint64(len(nodes)))),
		ready:     make(chan struct{}),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(retryBackoff(),
			workqueue.TypedRateLimitingQueueConfig[taskKey]{Name: "nodelet_nodes", Clock: opts.Clock}),
	}
	for i, n := range nodes {
		if n.Template == nil || n.Template.Name == "" {
			return nil, fmt.Errorf("node controller: node %d has no name", i)
		}
		if _, dup := c.nodes[n.Template.Name]; dup {
			return nil, fmt.Errorf("node controller: node %s is listed twice", n.Template.Name)
		}
		state, err := c.newState(n)
		if err != nil {
			return nil, fmt.Errorf("node controller: %w", err)
		}
		c.nodes[state.name] = state
	}
	return c, nil
}

// newState checks n and makes its state, of a new generation.
func (c *Controller) newState(n Node) (*nodeState, error) {
	if n.Template == nil || n.Template.Name == "" {
		return nil, errors.New("a node has no name")
	}
	name := n.Template.Name
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return nil, fmt.Errorf("invalid node name %q: %s", name, strings.Join(msgs, "; "))
	}
	if n.Provider == nil {
		return nil, fmt.Errorf("node %s has no provider", name)
	}
	c.gen++
	return &nodeState{name: name, gen: c.gen, template: n.Template, provider: n.Provider, takenOver: n.TakenOver, known: n.Seen}, nil
}

// retryBackoff is the per-task delay after failures: 200ms, doubling on
// each further failure up to 7s, back to 200ms after a success (Forget).
func retryBackoff() workqueue.TypedRateLimiter[taskKey] {
	return workqueue.NewTypedItemExponentialFailureRateLimiter[taskKey](retryBase, retryMax)
}

// Ready is closed the first time every node managed then has been
// registered and has written its status once (at once when Run starts
// with none). AllReported tells it for the nodes managed now.
func (c *Controller) Ready() <-chan struct{} { return c.ready }

// ReportStatus asks for the node's status to be checked now: it is written
// if it changed since the last report (or a report is due). Unknown names
// are ignored.
func (c *Controller) ReportStatus(nodeName string) {
	if n := c.node(nodeName); n != nil {
		c.queue.Add(n.key(taskStatus))
	}
}

// ReportAllStatus asks for every node's status to be checked now, as
// ReportStatus does for one.
func (c *Controller) ReportAllStatus() {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, n := range c.nodes {
		c.queue.Add(n.key(taskStatus))
	}
}

// NodeReady tells whether the node's last written status had the Ready
// condition True.
func (c *Controller) NodeReady(nodeName string) bool {
	n := c.node(nodeName)
	if n == nil {
		return false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.applied == nil {
		return false
	}
	for _, cond := range n.applied.conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Run registers every node and keeps its Lease and status current until ctx
// is done. It returns nil on a clean shutdown. It may be called once.
func (c *Controller) Run(ctx context.Context) error {
	if !c.started.CompareAndSwap(false, true) {
		return errors.New("node controller: Run called twice")
	}
	defer utilruntime.HandleCrashWithContext(ctx)
	defer c.queue.ShutDown()
	logger := klog.FromContext(ctx)

	served, err := c.leaseAPIServed(ctx)
	switch {
	case ctx.Err() != nil:
		return nil
	case err != nil:
		logger.Info("Could not discover the Lease API; assuming it is served", "err", err)
	case !served:
		logger.Info("The Lease API is not served; reporting node status every ping interval instead", "interval", c.opts.PingInterval)
	}
	c.useLeases = served

	c.mu.Lock()
	c.runCtx = ctx
	starts := make(map[*nodeState]context.Context, len(c.nodes))
	for _, n := range c.nodes {
		starts[n] = c.prepareLocked(n)
	}
	count := len(c.nodes)
	c.checkReadyLocked(ctx)
	c.mu.Unlock()
	for n, nctx := range starts {
		c.start(nctx, n)
	}

	c.mu.Lock()
	c.startWorkersLocked(ctx)
	workers := c.workers
	c.mu.Unlock()
	logger.Info("Node controller started", "nodes", count, "workers", workers, "leases", c.useLeases)
	<-ctx.Done()
	c.mu.Lock()
	c.stopping = true
	c.mu.Unlock()
	c.queue.ShutDown()
	c.workerWG.Wait()
	logger.Info("Node controller stopped")
	return nil
}

// startWorkersLocked starts workers up to Workers or, with GrowWorkers,
// up to WorkersFor the nodes managed now if that is more.
func (c *Controller) startWorkersLocked(ctx context.Context) {
	want := c.opts.Workers
	if c.opts.GrowWorkers {
		want = max(want, WorkersFor(len(c.nodes)))
	}
	if c.stopping || c.workers >= want {
		return
	}
	if c.workers > 0 {
		klog.FromContext(ctx).V(2).Info("More node workers", "nodes", len(c.nodes), "workers", want)
	}
	for ; c.workers < want; c.workers++ {
		c.workerWG.Go(func() {
			for c.processNext(ctx) {
			}
		})
	}
}

// leaseAPIServed asks the API server whether it serves
// coordination.k8s.io/v1. It returns true with the error when the answer is
// unknown, and returns early when ctx is done (the request then finishes in
// the background).
func (c *Controller) leaseAPIServed(ctx context.Context) (bool, error) {
	answer := make(chan error, 1)
	go func() {
		_, err := c.client.Discovery().ServerResourcesForGroupVersion(coordinationv1.SchemeGroupVersion.String())
		answer <- err
	}()
	select {
	case <-ctx.Done():
		return true, ctx.Err()
	case err := <-answer:
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return true, err
	}
}

// processNext runs one task. A task returns when it wants to run next (0:
// not on its own) or an error, which retries it with backoff.
func (c *Controller) processNext(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	n := c.node(key.node)
	if n == nil || n.gen != key.gen {
		c.queue.Forget(key) // the node was let go
		return true
	}
	logger := klog.FromContext(ctx).WithValues("node", klog.KRef("", key.node), "task", key.task)
	ctx = klog.NewContext(ctx, logger)

	var next time.Duration
	var err error
	switch key.task {
	case taskLease:
		next, err = c.renewLease(ctx, n)
	case taskStatus:
		next, err = c.syncStatus(ctx, n)
	case taskPing:
		next = c.ping(ctx, n)
	}
	if ctx.Err() != nil {
		return true // shutting down
	}
	if err != nil {
		// With thousands of nodes failing together (API server down) an
		// error line per retry would flood the log: log the first failure
		// and every tenth retry, the rest at a higher verbosity.
		if retries := c.queue.NumRequeues(key); retries%10 == 0 {
			logger.Error(err, "Node task failed; retrying with backoff", "retries", retries)
		} else {
			logger.V(4).Info("Node task failed; retrying with backoff", "err", err, "retries", retries)
		}
		c.queue.AddRateLimited(key)
		return true
	}
	if retries := c.queue.NumRequeues(key); retries > 0 {
		// Its first failure was logged: say when it ended.
		logger.Info("Node task succeeded again", "retries", retries)
	}
	c.queue.Forget(key)
	if next > 0 {
		c.queue.AddAfter(key, c.jitter(next))
	}
	return true
}

// jitter lengthens d by a random amount up to 10% of it, so that the tasks
// of thousands of nodes started together drift apart.
func (c *Controller) jitter(d time.Duration) time.Duration {
	if d < 10 {
		return d
	}
	c.randMu.Lock()
	defer c.randMu.Unlock()
	return d + time.Duration(c.rand.Int64N(int64(d)/10+1))
}

// ping runs the provider's health check. When its outcome changes the
// status is reported at once, and a recovered node renews its Lease at once.
func (c *Controller) ping(ctx context.Context, n *nodeState) time.Duration {
	pctx, cancel := context.WithTimeout(ctx, pingTimeout)
	err := n.provider.Ping(pctx)
	cancel()
	if ctx.Err() != nil {
		return 0
	}
	n.mu.Lock()
	changed := errorText(err) != errorText(n.pingErr)
	n.pingErr = err
	n.mu.Unlock()
	if changed {
		logger := klog.FromContext(ctx)
		if err != nil {
			logger.Info("Provider ping failed; node is not ready and its Lease is not renewed", "err", err)
		} else {
			logger.Info("Provider ping succeeds again")
			if c.useLeases {
				c.queue.Add(n.key(taskLease))
			}
		}
		c.ReportStatus(n.name)
	}
	return c.opts.PingInterval
}

// errorText is err's message, or "" for nil.
func errorText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
