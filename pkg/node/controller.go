// Package node owns the Node objects of the nodes nodelet manages and their
// Leases in kube-node-lease: registration and adoption, lease renewal, and
// node status reports. One Controller serves any number of nodes with one
// work queue and a fixed pool of workers, so a node costs a few KB and no
// goroutine of its own. It never touches pods.
package node

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/provider"
)

// Options configures a Controller; zero fields take defaults.
type Options struct {
	// LeaseDuration is the Lease's duration (default 40s).
	LeaseDuration time.Duration
	// RenewInterval is how often the Lease is renewed (default LeaseDuration/4).
	RenewInterval time.Duration
	// StatusReportInterval is how often an unchanged status is reported
	// while leases keep the node alive (default 5m).
	StatusReportInterval time.Duration
	// PingInterval is how often providers are pinged (default 10s); without
	// the Lease API it is also the status heartbeat.
	PingInterval time.Duration
	// Workers is how many node tasks run at once (default 8).
	Workers int
	// Clock is the controller's time source (default the real clock).
	Clock clock.WithTicker
}

func (o *Options) validate() error {
	if o.LeaseDuration == 0 {
		o.LeaseDuration = 40 * time.Second
	}
	if o.RenewInterval == 0 {
		o.RenewInterval = o.LeaseDuration / 4
	}
	if o.StatusReportInterval == 0 {
		o.StatusReportInterval = 5 * time.Minute
	}
	if o.PingInterval == 0 {
		o.PingInterval = 10 * time.Second
	}
	if o.Workers == 0 {
		o.Workers = 8
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	var errs []error
	for name, d := range map[string]time.Duration{
		"lease duration": o.LeaseDuration, "renew interval": o.RenewInterval,
		"status report interval": o.StatusReportInterval, "ping interval": o.PingInterval,
	} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative, got %s", name, d))
		}
	}
	if o.LeaseDuration%time.Second != 0 {
		errs = append(errs, fmt.Errorf("lease duration must be whole seconds, got %s", o.LeaseDuration))
	}
	if o.RenewInterval >= o.LeaseDuration {
		errs = append(errs, fmt.Errorf("renew interval %s must be shorter than the lease duration %s", o.RenewInterval, o.LeaseDuration))
	}
	if o.Workers < 0 {
		errs = append(errs, fmt.Errorf("workers must not be negative, got %d", o.Workers))
	}
	return errors.Join(errs...)
}

// Node is one node to manage.
type Node struct {
	// Template holds the name, labels, annotations and taints to register
	// the node with.
	Template *corev1.Node
	// Provider describes the node; it may also be a provider.NodeNotifier.
	Provider provider.NodeProvider
}

type taskKind uint8

const (
	taskStatus taskKind = iota // register if needed, then report status
	taskLease                  // renew the Lease
	taskPing                   // ping the provider
)

func (t taskKind) String() string {
	return [...]string{"status", "lease", "ping"}[t]
}

type taskKey struct {
	node string
	task taskKind
}

// nodeState is what the controller keeps per node. Tasks of one node may
// run concurrently, so every field is guarded by mu.
type nodeState struct {
	mu         sync.Mutex
	template   *corev1.Node
	provider   provider.NodeProvider
	uid        types.UID // set once registered
	lease      *coordinationv1.Lease
	pingErr    error
	reported   *corev1.NodeStatus // last status written, without heartbeat times
	reportedAt time.Time
}

// Controller registers nodes and keeps their Lease and status current.
type Controller struct {
	client    kubernetes.Interface
	nodes     map[string]*nodeState
	opts      Options
	queue     workqueue.TypedRateLimitingInterface[taskKey]
	useLeases bool

	readyOnce  sync.Once
	ready      chan struct{}
	mu         sync.Mutex
	registered int
}

// NewController returns a controller for nodes. It does no I/O.
func NewController(client kubernetes.Interface, nodes []Node, opts Options) (*Controller, error) {
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("node controller options: %w", err)
	}
	if len(nodes) == 0 {
		return nil, errors.New("no nodes to manage")
	}
	c := &Controller{
		client:    client,
		nodes:     make(map[string]*nodeState, len(nodes)),
		opts:      opts,
		useLeases: true,
		ready:     make(chan struct{}),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			retryBackoff(),
			workqueue.TypedRateLimitingQueueConfig[taskKey]{Name: "nodes", Clock: opts.Clock},
		),
	}
	for i, n := range nodes {
		if n.Template == nil || n.Template.Name == "" {
			return nil, fmt.Errorf("node %d has no name", i)
		}
		if n.Provider == nil {
			return nil, fmt.Errorf("node %s has no provider", n.Template.Name)
		}
		if _, dup := c.nodes[n.Template.Name]; dup {
			return nil, fmt.Errorf("node %s is listed twice", n.Template.Name)
		}
		c.nodes[n.Template.Name] = &nodeState{template: n.Template.DeepCopy(), provider: n.Provider}
	}
	return c, nil
}

// retryBackoff is the per-task backoff after a failure: 200ms doubling to 7s.
func retryBackoff() workqueue.TypedRateLimiter[taskKey] {
	return workqueue.NewTypedItemExponentialFailureRateLimiter[taskKey](200*time.Millisecond, 7*time.Second)
}

// Ready is closed once every node has been registered and its status written.
func (c *Controller) Ready() <-chan struct{} { return c.ready }

// ReportStatus asks for the node's status to be reported now.
func (c *Controller) ReportStatus(nodeName string) {
	if _, ok := c.nodes[nodeName]; ok {
		c.queue.Add(taskKey{node: nodeName, task: taskStatus})
	}
}

// Run registers every node and keeps them alive until ctx is done.
func (c *Controller) Run(ctx context.Context) error {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	logger := klog.FromContext(ctx)

	c.useLeases = c.leaseAPIServed(ctx)
	if !c.useLeases {
		logger.Info("The Lease API is not served; reporting node status every ping interval instead", "interval", c.opts.PingInterval)
	}
	for name, n := range c.nodes {
		if notifier, ok := n.provider.(provider.NodeNotifier); ok {
			notifier.NotifyNodeStatus(ctx, func() { c.ReportStatus(name) })
		}
		c.queue.Add(taskKey{node: name, task: taskPing})
		c.queue.Add(taskKey{node: name, task: taskStatus})
	}

	var wg sync.WaitGroup
	for range c.opts.Workers {
		wg.Go(func() {
			for c.processNext(ctx) {
			}
		})
	}
	logger.Info("Node controller started", "nodes", len(c.nodes), "leases", c.useLeases)
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
	return nil
}

// leaseAPIServed tells whether coordination.k8s.io/v1 is served. When the
// answer is unknown (the API server is down), it assumes it is.
func (c *Controller) leaseAPIServed(ctx context.Context) bool {
	_, err := c.client.Discovery().ServerResourcesForGroupVersion(coordinationv1.SchemeGroupVersion.String())
	if apierrors.IsNotFound(err) {
		return false
	}
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Could not discover the Lease API; assuming it is served", "err", err)
	}
	return true
}

func (c *Controller) processNext(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	n := c.nodes[key.node]
	logger := klog.FromContext(ctx).WithValues("node", klog.KRef("", key.node))
	ctx = klog.NewContext(ctx, logger)

	var next time.Duration
	var err error
	switch key.task {
	case taskStatus:
		next, err = c.syncStatus(ctx, key.node, n)
	case taskLease:
		next, err = c.renewLease(ctx, key.node, n)
	case taskPing:
		next = c.ping(ctx, key.node, n)
	}
	if err != nil {
		if ctx.Err() == nil {
			logger.Error(err, "Node task failed; will retry with backoff", "task", key.task, "retries", c.queue.NumRequeues(key))
		}
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	if next > 0 {
		c.queue.AddAfter(key, jitter(next))
	}
	return true
}

// spread picks a first delay uniformly in (0, d], so that nodes registered
// together renew and report evenly over the interval from then on.
func spread(d time.Duration) time.Duration {
	return time.Duration(rand.Int64N(int64(d))) + 1
}

// jitter spreads d by up to 10% earlier, so that thousands of nodes do not
// report in lockstep.
func jitter(d time.Duration) time.Duration {
	return d - time.Duration(rand.Int64N(int64(d)/10+1))
}

// ping runs the provider's health check and reports status at once when
// its outcome changed.
func (c *Controller) ping(ctx context.Context, name string, n *nodeState) time.Duration {
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err := n.provider.Ping(pctx)
	cancel()
	n.mu.Lock()
	changed := (err == nil) != (n.pingErr == nil) || (err != nil && err.Error() != n.pingErr.Error())
	n.pingErr = err
	n.mu.Unlock()
	if changed {
		if err != nil {
			klog.FromContext(ctx).Info("Provider ping failed; node is not ready", "err", err)
		}
		c.ReportStatus(name)
	}
	return c.opts.PingInterval
}

// markRegistered counts a node's first status write and closes Ready once
// every node has one.
func (c *Controller) markRegistered() {
	c.mu.Lock()
	c.registered++
	all := c.registered == len(c.nodes)
	c.mu.Unlock()
	if all {
		c.readyOnce.Do(func() { close(c.ready) })
	}
}
