package staticpod

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/podrules"
)

// DefaultCheckFrequency is how often the manifest directory and URL are
// read when Options leave it unset, as the kubelet's fileCheckFrequency
// and httpCheckFrequency.
const DefaultCheckFrequency = 20 * time.Second

// Runner is the node's pod lifecycle, which runs the static pods: the
// provider's pod calls.
type Runner interface {
	CreatePod(ctx context.Context, pod *corev1.Pod) error
	DeletePod(ctx context.Context, pod *corev1.Pod) error
	GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error)
	GetPods(ctx context.Context) ([]*corev1.Pod, error)
}

// Options configure a Controller. NodeName and at least one of
// ManifestDir and URL are required.
type Options struct {
	NodeName string
	// ManifestDir is the directory of pod manifests (the kubelet's
	// staticPodPath), read every FileCheckFrequency and, as the kubelet
	// reads it, as soon as a file in it changes.
	ManifestDir        string
	FileCheckFrequency time.Duration
	// URL serves pod manifests (the kubelet's staticPodURL), read every
	// HTTPCheckFrequency with HTTPClient (default: a 10 s timeout).
	URL                string
	HTTPCheckFrequency time.Duration
	HTTPClient         *http.Client
	// Clock drives the reads; default the real clock.
	Clock clock.WithTicker
}

func (o *Options) validate() error {
	var errs []error
	if o.NodeName == "" {
		errs = append(errs, errors.New("node name is required"))
	}
	if o.ManifestDir == "" && o.URL == "" {
		errs = append(errs, errors.New("a manifest directory or URL is required"))
	}
	if o.FileCheckFrequency < 0 || o.HTTPCheckFrequency < 0 {
		errs = append(errs, errors.New("check frequencies must not be negative"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("static pods: %w", err)
	}
	if o.FileCheckFrequency == 0 {
		o.FileCheckFrequency = DefaultCheckFrequency
	}
	if o.HTTPCheckFrequency == 0 {
		o.HTTPCheckFrequency = DefaultCheckFrequency
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	return nil
}

// Controller runs the node's static pods and keeps their mirror pods.
type Controller struct {
	client     kubernetes.Interface
	runner     Runner
	pods       corelisters.PodLister
	nodes      corelisters.NodeLister
	apiSources []cache.InformerSynced
	recorder   record.EventRecorder
	queue      workqueue.TypedRateLimitingInterface[string]
	opts       Options
	nodeRef    *corev1.ObjectReference

	// apiSynced is set once the pod and node caches have synced: mirror
	// pods are kept from then on. The static pods run before that.
	apiSynced atomic.Bool
	// filesRead and urlRead are set once each configured source has been
	// read: until then a pod the node runs that no source has named yet
	// may still be wanted (an agent restarted before its first read), so
	// nothing is stopped.
	filesRead, urlRead atomic.Bool

	mu sync.Mutex
	// files and urls are the manifests last read from each source.
	files, urls []manifest
	// desired are the static pods to run, by namespace/name. They are
	// never modified once stored.
	desired map[string]*corev1.Pod
	// seen is when each static pod (by UID) was first seen by this run.
	seen map[types.UID]string
	// stopping are the UIDs of the static pods this run has asked the node
	// to stop, by namespace/name, until they are gone: one whose manifest
	// comes back meanwhile starts again once it has stopped.
	stopping map[string]types.UID
	// removed are the UIDs of the static pods whose manifest file was
	// removed (the watch said so), by namespace/name, until they are asked
	// to stop: the file may be back before the pod's sync, which must stop
	// it all the same, as the kubelet acts on each removal.
	removed map[string]types.UID
	// warned is the last warning given about a subject (a manifest, a
	// pod), so that a problem that lasts is reported once.
	warned map[string]string
}

// New returns a controller that runs the static pods of opts' sources
// through runner and keeps their mirror pods in the API, reading mirror
// pods from pods (an informer of the node's pods) and the Node from nodes.
// It registers handlers on both informers, which the caller starts.
func New(client kubernetes.Interface, runner Runner, pods coreinformers.PodInformer, nodes coreinformers.NodeInformer,
	recorder record.EventRecorder, opts Options) (*Controller, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	c := &Controller{
		client: client, runner: runner, recorder: recorder, opts: opts,
		pods: pods.Lister(), nodes: nodes.Lister(),
		apiSources: []cache.InformerSynced{pods.Informer().HasSynced, nodes.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](200*time.Millisecond, 30*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "static-pods"},
		),
		nodeRef:  &corev1.ObjectReference{Kind: "Node", Name: opts.NodeName, UID: types.UID(opts.NodeName)},
		desired:  map[string]*corev1.Pod{},
		seen:     map[types.UID]string{},
		stopping: map[string]types.UID{},
		removed:  map[string]types.UID{},
		warned:   map[string]string{},
	}
	_, err := pods.Informer().AddEventHandler(cache.FilteringResourceEventHandler{
		FilterFunc: c.isOurMirror,
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    c.enqueue,
			UpdateFunc: func(_, obj any) { c.enqueue(obj) },
			DeleteFunc: c.enqueue,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("static pods: add pod event handler: %w", err)
	}
	// A Node registered (again) changes the owner of every mirror pod.
	_, err = nodes.Informer().AddEventHandler(cache.FilteringResourceEventHandler{
		FilterFunc: func(obj any) bool {
			n, ok := obj.(*corev1.Node)
			return ok && n.Name == opts.NodeName
		},
		Handler: cache.ResourceEventHandlerFuncs{AddFunc: func(any) { c.enqueueDesired() }},
	})
	if err != nil {
		return nil, fmt.Errorf("static pods: add node event handler: %w", err)
	}
	return c, nil
}

// isOurMirror tells whether an informer object is a mirror pod on our node.
func (c *Controller) isOurMirror(obj any) bool {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	return ok && pod.Spec.NodeName == c.opts.NodeName && podrules.IsMirrorPod(pod)
}

func (c *Controller) enqueue(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	c.queue.Add(key)
}

func (c *Controller) enqueueDesired() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for key := range c.desired {
		c.queue.Add(key)
	}
}

// Run reads the sources and runs their pods until ctx is done: at once,
// without waiting for the API server, which only the mirror pods need.
func (c *Controller) Run(ctx context.Context) error {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	logger := klog.FromContext(ctx).WithValues("node", c.opts.NodeName)
	ctx = klog.NewContext(ctx, logger)

	var wg sync.WaitGroup
	wg.Go(func() {
		for c.processNext(ctx) {
		}
	})
	wg.Go(func() {
		if !cache.WaitForCacheSync(ctx.Done(), c.apiSources...) {
			return
		}
		c.apiSynced.Store(true)
		c.enqueueAll(ctx)
	})
	if c.opts.ManifestDir != "" {
		changed := make(chan struct{}, 1)
		w := &dirWatch{dir: c.opts.ManifestDir, changed: changed, removed: c.manifestRemoved}
		defer w.close()
		wg.Go(func() {
			c.poll(ctx, c.opts.FileCheckFrequency, changed, func(ctx context.Context) {
				w.ensure(ctx)
				c.readFiles(ctx)
			})
		})
	}
	if c.opts.URL != "" {
		wg.Go(func() { c.poll(ctx, c.opts.HTTPCheckFrequency, nil, c.readURL) })
	}
	logger.Info("Static pods started", "manifestDir", c.opts.ManifestDir, "url", c.opts.URL)
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
	return nil
}

// poll calls read at once, then every period and whenever changed says
// the source changed, and has every static pod synced after each read: a
// resync that also retries what failed.
func (c *Controller) poll(ctx context.Context, period time.Duration, changed <-chan struct{}, read func(context.Context)) {
	t := c.opts.Clock.NewTicker(period)
	defer t.Stop()
	for {
		read(ctx)
		c.enqueueAll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-changed:
		}
	}
}

func (c *Controller) readFiles(ctx context.Context) {
	files, err := readDir(c.opts.ManifestDir, c.opts.NodeName)
	if err != nil {
		c.warn(ctx, "dir:"+c.opts.ManifestDir, "FailedStaticPodManifest", fmt.Sprintf("static pod manifests in %s: %v", c.opts.ManifestDir, err))
		return // keep what was read before
	}
	c.forget("dir:" + c.opts.ManifestDir)
	c.mu.Lock()
	c.files = keepLastGood(c.files, files)
	c.mu.Unlock()
	c.update(ctx)
	c.filesRead.Store(true)
}

func (c *Controller) readURL(ctx context.Context) {
	urls, err := fetchURL(ctx, c.opts.HTTPClient, c.opts.URL, c.opts.NodeName)
	if err != nil {
		if ctx.Err() == nil {
			c.warn(ctx, "url:"+c.opts.URL, "FailedStaticPodManifest", fmt.Sprintf("static pod manifest %s: %v", c.opts.URL, err))
		}
		return // keep what was read before
	}
	c.forget("url:" + c.opts.URL)
	c.mu.Lock()
	c.urls = keepLastGood(c.urls, urls)
	c.mu.Unlock()
	c.update(ctx)
	c.urlRead.Store(true)
}

// manifestRemoved notes that the manifest file at path was removed: the
// pod it named stops, even if the file is back before the next read.
func (c *Controller) manifestRemoved(path string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.files {
		if m.origin == path && m.pod != nil {
			c.removed[m.pod.Namespace+"/"+m.pod.Name] = m.pod.UID
		}
	}
}

// sourcesRead tells whether every configured source has been read once.
func (c *Controller) sourcesRead() bool {
	return (c.opts.ManifestDir == "" || c.filesRead.Load()) && (c.opts.URL == "" || c.urlRead.Load())
}

// update recomputes the static pods to run from what the sources last
// gave, and reports the manifests that cannot run.
func (c *Controller) update(ctx context.Context) {
	c.mu.Lock()
	pods, bad := merge(c.files, c.urls)
	now := c.opts.Clock.Now().UTC().Format(time.RFC3339Nano)
	desired := make(map[string]*corev1.Pod, len(pods))
	seen := make(map[types.UID]string, len(pods))
	for key, m := range pods {
		pod := m.pod.DeepCopy()
		at, ok := c.seen[pod.UID]
		if !ok {
			at = now
		}
		seen[pod.UID] = at
		pod.Annotations[podrules.ConfigSeenAnnotation] = at
		desired[key] = pod
	}
	c.desired, c.seen = desired, seen
	for subject := range c.warned {
		if origin, ok := strings.CutPrefix(subject, "manifest:"); ok && bad[origin] == nil {
			delete(c.warned, subject) // fixed or gone
		}
	}
	c.mu.Unlock()
	for _, origin := range sortedKeys(bad) {
		c.warn(ctx, "manifest:"+origin, "FailedStaticPodManifest", fmt.Sprintf("static pod manifest %s: %v", origin, bad[origin]))
	}
}

// enqueueAll queues every static pod there is or was: those to run, those
// the node runs, and the mirror pods in the API.
func (c *Controller) enqueueAll(ctx context.Context) {
	c.enqueueDesired()
	running, err := c.runner.GetPods(ctx)
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Listing the node's pods failed; static pods left over are looked at later", "err", err)
	}
	for _, pod := range running {
		if podrules.IsStaticPod(pod) {
			c.queue.Add(pod.Namespace + "/" + pod.Name)
		}
	}
	if !c.apiSynced.Load() {
		return
	}
	pods, err := c.pods.List(labels.Everything())
	if err != nil {
		return
	}
	for _, pod := range pods {
		if c.isOurMirror(pod) {
			c.queue.Add(pod.Namespace + "/" + pod.Name)
		}
	}
}

func (c *Controller) processNext(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	if err := c.sync(ctx, key); err != nil {
		if errors.Is(err, errWaiting) {
			klog.FromContext(ctx).V(3).Info("Static pod sync waits", "pod", key, "reason", err)
		} else {
			klog.FromContext(ctx).Error(err, "Static pod sync failed; will retry", "pod", key)
		}
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	return true
}

// warn logs a problem and records it as a Warning Event on the Node, once
// for as long as it lasts.
func (c *Controller) warn(ctx context.Context, subject, reason, msg string) {
	c.mu.Lock()
	same := c.warned[subject] == msg
	c.warned[subject] = msg
	c.mu.Unlock()
	if same {
		return
	}
	klog.FromContext(ctx).Error(nil, msg, "reason", reason)
	c.recorder.Event(c.nodeRef, corev1.EventTypeWarning, reason, msg)
}

// forget ends a problem warn reported.
func (c *Controller) forget(subject string) {
	c.mu.Lock()
	delete(c.warned, subject)
	c.mu.Unlock()
}
