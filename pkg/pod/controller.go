// Package pod owns the pods bound to the nodes nodelet manages: it makes each
// node's provider run what the API says should run there, reports what the
// provider says back as pod status, and finishes graceful deletions. It
// writes only pods (status and the final delete) and Events; it never
// touches Node objects. Static pods (which a provider runs from manifests
// on the node) are not its to run or stop: of their mirror pods in the API
// it writes only the status.
package pod

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/provider"
)

// NodeNameIndex indexes the pod informer by spec.nodeName.
const NodeNameIndex = "nodeName"

// Options configures a Controller; zero fields take defaults.
type Options struct {
	// Workers is how many pods are synced with their providers at once,
	// and how many pod statuses are written at once.
	Workers int
	// StatusPollInterval is how often pods of providers that cannot push
	// their status (no provider.PodNotifier) are re-synced, which reads
	// their status.
	StatusPollInterval time.Duration
	// Clock is used for polling; tests inject a fake one.
	Clock clock.WithTicker
}

func (o *Options) validate() error {
	if o.Workers == 0 {
		o.Workers = 16
	}
	if o.StatusPollInterval == 0 {
		o.StatusPollInterval = 5 * time.Second
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Workers < 0 {
		return fmt.Errorf("workers must not be negative, got %d", o.Workers)
	}
	if o.StatusPollInterval < 0 {
		return fmt.Errorf("status poll interval must not be negative, got %s", o.StatusPollInterval)
	}
	return nil
}

// Controller syncs the pods of every managed node with that node's provider.
// Two queues keyed by pod serve it: the spec queue (queue, sync) makes the
// provider match the API; the status queue (statusQueue, syncStatus) writes
// the newest status reported for a pod, kept in reports, to the API.
type Controller struct {
	client      kubernetes.Interface
	informer    cache.SharedIndexInformer
	lister      corelisters.PodLister
	recorder    record.EventRecorder
	queue       workqueue.TypedRateLimitingInterface[string]
	statusQueue workqueue.TypedRateLimitingInterface[string]
	opts        Options

	// records keeps a record of each pod the controller handles, so that
	// a pod gone from the API can still be found and stopped.
	records *records
	// reports keeps the newest status reported for each pod.
	reports *reports

	metrics *metrics
	synced  chan struct{}

	// mu guards the nodes: the set grows and shrinks at run time
	// (AddNode, RemoveNode). runCtx is Run's context once Run has taken
	// the nodes it started with; a node added later starts on its own.
	mu        sync.RWMutex
	providers map[string]provider.PodLifecycleHandler
	runCtx    context.Context
}

// NewController returns a controller for the pods bound to the nodes in
// providers (node name → provider); AddNode and RemoveNode change the set
// later. The informer must see at least those pods; pods on other nodes
// are ignored. It adds NodeNameIndex to the informer, so it must be
// called before the informer starts.
func NewController(client kubernetes.Interface, pods coreinformers.PodInformer, providers map[string]provider.PodLifecycleHandler, recorder record.EventRecorder, opts Options) (*Controller, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	informer := pods.Informer()
	if _, ok := informer.GetIndexer().GetIndexers()[NodeNameIndex]; !ok {
		if err := informer.AddIndexers(cache.Indexers{NodeNameIndex: indexByNodeName}); err != nil {
			return nil, fmt.Errorf("add pod index: %w", err)
		}
	}
	c := &Controller{
		client:      client,
		informer:    informer,
		lister:      pods.Lister(),
		providers:   make(map[string]provider.PodLifecycleHandler, len(providers)),
		recorder:    recorder,
		queue:       newQueue("pods"),
		statusQueue: newQueue("pod_status"),
		opts:        opts,
		records:     newRecords(),
		reports:     newReports(),
		metrics:     newMetrics(),
		synced:      make(chan struct{}),
	}
	maps.Copy(c.providers, providers)
	_, err := informer.AddEventHandler(cache.FilteringResourceEventHandler{
		FilterFunc: c.ours,
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    c.enqueue,
			UpdateFunc: func(_, obj any) { c.enqueue(obj) },
			DeleteFunc: c.enqueue,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("add pod event handler: %w", err)
	}
	return c, nil
}

// newQueue returns a pod queue whose keys are retried with per-item
// exponential backoff, 10 ms doubling to a minute.
func newQueue(name string) workqueue.TypedRateLimitingInterface[string] {
	return workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](10*time.Millisecond, time.Minute),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: name},
	)
}

func indexByNodeName(obj any) ([]string, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.Spec.NodeName == "" {
		return nil, nil
	}
	return []string{pod.Spec.NodeName}, nil
}

// ours tells whether an informer object is a pod on one of our nodes.
func (c *Controller) ours(obj any) bool {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return false
	}
	_, ok = c.provider(pod.Spec.NodeName)
	return ok
}

// provider is the provider of a managed node.
func (c *Controller) provider(node string) (provider.PodLifecycleHandler, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	p, ok := c.providers[node]
	return p, ok
}

// AddNode makes the controller run the pods bound to node with p, from now
// on: a node taken over at run time. Its pods already bound are synced
// (created, or restored where they ran before on another agent) once Run
// has started. Adding a node that is managed already replaces its provider.
func (c *Controller) AddNode(node string, p provider.PodLifecycleHandler) {
	c.mu.Lock()
	c.providers[node] = p
	ctx := c.runCtx
	c.mu.Unlock()
	if ctx != nil {
		go c.startNode(ctx, node, p)
	}
}

// RemoveNode lets node go: its pods are no longer synced and their status
// no longer written, and nothing is stopped; whoever manages the node next
// takes them over.
func (c *Controller) RemoveNode(node string) {
	c.mu.Lock()
	delete(c.providers, node)
	c.mu.Unlock()
	c.records.forgetNode(node)
}

// startNode hooks a node's provider up and reconciles it with the API, as
// Run does for the nodes it starts with.
func (c *Controller) startNode(ctx context.Context, node string, p provider.PodLifecycleHandler) {
	if n, ok := p.(provider.PodNotifier); ok {
		n.NotifyPods(ctx, func(pod *corev1.Pod) { c.pushed(ctx, pod) })
	}
	if _, err := c.reconcileNode(ctx, node, p); err != nil && ctx.Err() == nil {
		klog.FromContext(ctx).Error(err, "Reconciling a node taken over failed", "node", node)
	}
}

// nodes are the managed nodes and their providers, as they are now.
func (c *Controller) nodes() map[string]provider.PodLifecycleHandler {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return maps.Clone(c.providers)
}

// enqueue queues an informer object's pod in both queues: a change in the
// API may need the provider to act, and may change the status to write
// (a readiness gate, another writer's condition).
func (c *Controller) enqueue(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	c.queue.Add(key)
	c.statusQueue.Add(key)
}

// Synced is closed once the cache has synced and the start-up reconcile
// has run.
func (c *Controller) Synced() <-chan struct{} { return c.synced }

// Run waits for the pod cache, reconciles what the providers run with what
// the API holds, then syncs pods and writes their statuses until ctx is
// done.
func (c *Controller) Run(ctx context.Context) error {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	defer c.statusQueue.ShutDown()
	logger := klog.FromContext(ctx)

	logger.Info("Waiting for pod cache to sync")
	if !cache.WaitForCacheSync(ctx.Done(), c.informer.HasSynced) {
		return fmt.Errorf("pod cache did not sync: %w", ctx.Err())
	}
	// From here, a node added starts on its own (AddNode).
	c.mu.Lock()
	start := maps.Clone(c.providers)
	c.runCtx = ctx
	c.mu.Unlock()
	for _, p := range start {
		if n, ok := p.(provider.PodNotifier); ok {
			n.NotifyPods(ctx, func(pod *corev1.Pod) { c.pushed(ctx, pod) })
		}
	}
	if err := c.reconcileStartup(ctx, start); err != nil {
		return err
	}
	close(c.synced)

	var wg sync.WaitGroup
	for range c.opts.Workers {
		wg.Go(func() {
			for c.processNext(ctx, "spec", c.queue, c.timedSync) {
			}
		})
		wg.Go(func() {
			for c.processNext(ctx, "status", c.statusQueue, c.syncStatus) {
			}
		})
	}
	wg.Go(func() { c.pollStatus(ctx) })
	logger.Info("Pod controller started", "nodes", len(start), "workers", c.opts.Workers)
	<-ctx.Done()
	c.queue.ShutDown()
	c.statusQueue.ShutDown()
	wg.Wait()
	return nil
}

// processNext takes a key from q, the queue named name, and hands it to
// handle: Forget on success, AddRateLimited on error. It returns false once
// q is shut down.
func (c *Controller) processNext(ctx context.Context, name string, q workqueue.TypedRateLimitingInterface[string], handle func(context.Context, string) error) bool {
	key, quit := q.Get()
	if quit {
		return false
	}
	defer q.Done(key)
	if err := handle(ctx, key); err != nil {
		klog.FromContext(ctx).Error(err, "Pod sync failed; will retry", "pod", key, "queue", name)
		q.AddRateLimited(key)
		return true
	}
	q.Forget(key)
	return true
}

// timedSync is sync, timed for kubelet_pod_worker_duration_seconds.
func (c *Controller) timedSync(ctx context.Context, key string) error {
	start := c.opts.Clock.Now()
	err := c.sync(ctx, key)
	c.metrics.syncDuration.WithLabelValues("sync").Observe(c.opts.Clock.Since(start).Seconds())
	return err
}

// pollStatus re-syncs the pods of providers that cannot push status: the
// spec worker reads their status from the provider and queues it.
func (c *Controller) pollStatus(ctx context.Context) {
	t := c.opts.Clock.NewTicker(c.opts.StatusPollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		for node, p := range c.nodes() {
			if _, pushes := p.(provider.PodNotifier); pushes {
				continue
			}
			pods, err := c.informer.GetIndexer().ByIndex(NodeNameIndex, node)
			if err != nil {
				continue
			}
			for _, obj := range pods {
				if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
					c.queue.Add(key)
				}
			}
		}
	}
}

// waitPollInterval is how often start-up reconcile retries a provider that
// cannot list its pods yet.
const waitPollInterval = time.Second

// listProviderPods lists a provider's pods, retrying until it answers: a
// provider that cannot list yet must not make every API pod look lost.
func listProviderPods(ctx context.Context, node string, p provider.PodLifecycleHandler) ([]*corev1.Pod, error) {
	var pods []*corev1.Pod
	err := wait.PollUntilContextCancel(ctx, waitPollInterval, true, func(ctx context.Context) (bool, error) {
		var err error
		pods, err = p.GetPods(ctx)
		if err != nil {
			klog.FromContext(ctx).Error(err, "Listing provider pods failed; retrying", "node", node)
			return false, nil
		}
		return true, nil
	})
	return pods, err
}

// apiPod looks a pod up in the cache and, when the cache does not have it,
// in the API itself, so that a cache that is behind never makes a live pod
// look dangling.
func (c *Controller) apiPod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	pod, err := c.lister.Pods(namespace).Get(name)
	if err == nil {
		return pod, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, err
	}
	return c.client.CoreV1().Pods(namespace).Get(ctx, name, metav1GetOptions)
}
