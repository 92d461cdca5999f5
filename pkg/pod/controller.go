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
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
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

	"github.com/nodelet/nodelet/pkg/podrules"
	"github.com/nodelet/nodelet/pkg/provider"
)

// NodeNameIndex indexes the pod informer by spec.nodeName.
const NodeNameIndex = "nodeName"

// Options configures a Controller; zero fields take defaults.
type Options struct {
	// Workers is how many pods are synced at once.
	Workers int
	// StatusPollInterval is how often pods of providers that cannot push
	// their status (no provider.PodNotifier) are re-synced.
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
type Controller struct {
	client    kubernetes.Interface
	informer  cache.SharedIndexInformer
	lister    corelisters.PodLister
	providers map[string]provider.PodLifecycleHandler
	recorder  record.EventRecorder
	queue     workqueue.TypedRateLimitingInterface[string]
	opts      Options

	// known maps a pod key to its *podRecord, so that a pod gone from the
	// API can still be found and stopped.
	known sync.Map
	// finals maps a pod key to the final status (*corev1.Pod) its provider
	// reported when the pod terminated, which is written before the pod is
	// deleted from the API: the provider may have forgotten the pod by
	// the time it is synced.
	finals sync.Map

	metrics *metrics
	synced  chan struct{}
}

// podRecord is what the controller remembers of a pod: the node whose
// provider was last asked to run it, a hash of the status last written,
// so that a cache that has not caught up with that write does not make the
// same write again, and whether its final delete was sent, so that it is
// sent once. Only the worker syncing the pod touches it.
type podRecord struct {
	node    string
	uid     types.UID
	written uint64
	deleted bool
}

// record returns the pod's record, starting a new one when the pod moved or
// was replaced.
func (c *Controller) record(key, node string, uid types.UID) *podRecord {
	if v, ok := c.known.Load(key); ok {
		if r := v.(*podRecord); r.node == node && (r.uid == uid || r.uid == "") {
			r.uid = uid
			return r
		}
	}
	r := &podRecord{node: node, uid: uid}
	c.known.Store(key, r)
	return r
}

// NewController returns a controller for the pods bound to the nodes in
// providers (node name → provider). The informer must see at least those
// pods; pods on other nodes are ignored. It adds NodeNameIndex to the
// informer, so it must be called before the informer starts.
func NewController(client kubernetes.Interface, pods coreinformers.PodInformer, providers map[string]provider.PodLifecycleHandler, recorder record.EventRecorder, opts Options) (*Controller, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if len(providers) == 0 {
		return nil, errors.New("no providers: a pod controller needs at least one node")
	}
	informer := pods.Informer()
	if _, ok := informer.GetIndexer().GetIndexers()[NodeNameIndex]; !ok {
		if err := informer.AddIndexers(cache.Indexers{NodeNameIndex: indexByNodeName}); err != nil {
			return nil, fmt.Errorf("add pod index: %w", err)
		}
	}
	c := &Controller{
		client:    client,
		informer:  informer,
		lister:    pods.Lister(),
		providers: providers,
		recorder:  recorder,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](10*time.Millisecond, time.Minute),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "pods"},
		),
		opts:    opts,
		metrics: newMetrics(),
		synced:  make(chan struct{}),
	}
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
	_, ok = c.providers[pod.Spec.NodeName]
	return ok
}

func (c *Controller) enqueue(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	c.queue.Add(key)
}

// Synced is closed once the cache has synced and the start-up reconcile
// has run.
func (c *Controller) Synced() <-chan struct{} { return c.synced }

// Run waits for the pod cache, reconciles what the providers run with what
// the API holds, then syncs pods until ctx is done.
func (c *Controller) Run(ctx context.Context) error {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	logger := klog.FromContext(ctx)

	for _, p := range c.providers {
		if n, ok := p.(provider.PodNotifier); ok {
			n.NotifyPods(ctx, func(pod *corev1.Pod) {
				logger.V(4).Info("Provider reported a status", "pod", klog.KObj(pod), "phase", pod.Status.Phase)
				key := pod.Namespace + "/" + pod.Name
				if !podrules.IsStaticPod(pod) && (pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed) {
					c.finals.Store(key, pod)
				}
				c.queue.Add(key)
			})
		}
	}
	logger.Info("Waiting for pod cache to sync")
	if !cache.WaitForCacheSync(ctx.Done(), c.informer.HasSynced) {
		return fmt.Errorf("pod cache did not sync: %w", ctx.Err())
	}
	if err := c.reconcileStartup(ctx); err != nil {
		return err
	}
	close(c.synced)

	var wg sync.WaitGroup
	for range c.opts.Workers {
		wg.Go(func() {
			for c.processNext(ctx) {
			}
		})
	}
	wg.Go(func() { c.pollStatus(ctx) })
	logger.Info("Pod controller started", "nodes", len(c.providers), "workers", c.opts.Workers)
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
	return nil
}

func (c *Controller) processNext(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	start := c.opts.Clock.Now()
	err := c.sync(ctx, key)
	c.metrics.syncDuration.WithLabelValues("sync").Observe(c.opts.Clock.Since(start).Seconds())
	if err != nil {
		klog.FromContext(ctx).Error(err, "Pod sync failed; will retry", "pod", key)
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	return true
}

// pollStatus re-syncs the pods of providers that cannot push status.
func (c *Controller) pollStatus(ctx context.Context) {
	var polled []string
	for node, p := range c.providers {
		if _, ok := p.(provider.PodNotifier); !ok {
			polled = append(polled, node)
		}
	}
	if len(polled) == 0 {
		return
	}
	t := c.opts.Clock.NewTicker(c.opts.StatusPollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		for _, node := range polled {
			pods, err := c.informer.GetIndexer().ByIndex(NodeNameIndex, node)
			if err != nil {
				continue
			}
			for _, obj := range pods {
				c.enqueue(obj)
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
