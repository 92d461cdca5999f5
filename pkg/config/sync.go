package config

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/cachetrim"
	"github.com/nodelet/nodelet/pkg/config/checkpoint"
)

// Event reasons on the Node when the config in use changes.
const (
	EventConfigChanged    = "ConfigChanged"
	EventConfigRolledBack = "ConfigRolledBack"
)

// syncKey is the one item of the work queue: the Node's annotation and the
// ConfigMap it names are synced as one.
const syncKey = "source"

// watcher is what Watch sets up: the Node to follow and the queue its
// changes go to.
type watcher struct {
	nodeName string
	nodes    corelisters.NodeLister
	queue    workqueue.TypedRateLimitingInterface[string]
	cm       *configMapWatch // owned by the worker
}

// Watch makes the controller follow SourceAnnotation on the Node named
// nodeName, seen through nodes (which may hold other Nodes too). Call it
// after Bootstrap and before the informer starts.
func (c *Controller) Watch(nodes coreinformers.NodeInformer, nodeName string) error {
	if c.w != nil {
		return errors.New("config controller: Watch called twice")
	}
	w := &watcher{
		nodeName: nodeName,
		nodes:    nodes.Lister(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](200*time.Millisecond, time.Minute),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "nodelet_config", Clock: c.opts.Clock}),
	}
	enqueue := func(obj any) {
		if n, ok := obj.(*corev1.Node); ok && n.Name == nodeName {
			w.queue.Add(syncKey)
		}
	}
	if _, err := nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	}); err != nil {
		return fmt.Errorf("config controller: watch nodes: %w", err)
	}
	c.w = w
	return nil
}

// Run follows the Node's SourceAnnotation until ctx is done or a new config
// is assigned, when it returns ErrRestart. It also records an Event on the
// Node when the config in use changed since the last run, counts the
// config on trial as started well once healthy reports true, and makes it
// the last-known-good once its trial has passed healthy. Call Bootstrap
// and Watch first.
func (c *Controller) Run(ctx context.Context, client kubernetes.Interface, recorder record.EventRecorder, healthy func() bool) error {
	if !c.bootstrapped || c.w == nil {
		return errors.New("config controller: Run before Bootstrap and Watch")
	}
	defer utilruntime.HandleCrashWithContext(ctx)
	logger := klog.FromContext(ctx).WithName("config")
	ctx = klog.NewContext(ctx, logger)
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	defer c.w.queue.ShutDown()

	if c.store == nil {
		<-ctx.Done()
		return nil
	}
	c.announce(ctx, recorder)
	wg.Go(func() { c.trial(ctx, healthy) })
	wg.Go(func() { <-ctx.Done(); c.w.queue.ShutDown() })

	c.w.queue.Add(syncKey)
	defer c.stopConfigMapWatch()
	for {
		key, quit := c.w.queue.Get()
		if quit {
			return nil
		}
		err := c.sync(ctx, client)
		c.w.queue.Done(key)
		switch {
		case errors.Is(err, ErrRestart):
			return err
		case err != nil && ctx.Err() == nil:
			logger.Error(err, "Config sync failed; retrying")
			c.w.queue.AddRateLimited(key)
		default:
			c.w.queue.Forget(key)
		}
	}
}

// announce records an Event on the Node when the config in use is not the
// one the last run used.
func (c *Controller) announce(ctx context.Context, recorder record.EventRecorder) {
	c.stateMu.Lock()
	defer c.stateMu.Unlock()
	if c.state.InUse.equal(c.inUse) {
		return
	}
	cond := c.condition()
	// As the kubelet does, the Node's name stands for its UID, so that
	// kubectl describe node shows the Event.
	ref := &corev1.ObjectReference{Kind: "Node", Name: c.w.nodeName, UID: types.UID(c.w.nodeName)}
	if c.inUse.LastKnownGood {
		recorder.Eventf(ref, corev1.EventTypeWarning, EventConfigRolledBack, "%s: %s", cond.Reason, cond.Message)
	} else {
		recorder.Event(ref, corev1.EventTypeNormal, EventConfigChanged, cond.Message)
	}
	c.state.InUse = c.inUse
	if err := writeState(c.store.Dir(), c.state); err != nil {
		klog.FromContext(ctx).Error(err, "Cannot record the config in use")
	}
}

// trial waits until the agent is healthy, then clears the failed starts of
// the config on trial and, once the trial has passed, makes the config in
// use the last-known-good.
func (c *Controller) trial(ctx context.Context, healthy func() bool) {
	logger := klog.FromContext(ctx)
	if !c.waitHealthy(ctx, healthy) {
		return
	}
	logger.Info("The agent is healthy", "config", sourceName(c.inUse.Source), "onTrial", c.onTrial)
	if c.onTrial {
		c.stateMu.Lock()
		c.state.Trial.FailedStarts = 0
		err := writeState(c.store.Dir(), c.state)
		c.stateMu.Unlock()
		if err != nil {
			logger.Error(err, "Cannot record that the config on trial started well")
		}
	}
	src := c.inUse.Source
	if src == nil || c.inUse.LastKnownGood {
		return // the local config, or already the last-known-good
	}
	if lkg, err := c.store.LastKnownGood(); err == nil && lkg.Source != nil && *lkg.Source == *src {
		return
	}
	for {
		if wait := c.trialEnd.Sub(c.opts.Clock.Now()); wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-c.opts.Clock.After(wait):
			}
		}
		// It must be healthy at the end of its trial, not only once.
		if !c.waitHealthy(ctx, healthy) {
			return
		}
		if err := c.store.SetLastKnownGood(src); err != nil {
			logger.Error(err, "Cannot make the config that passed its trial the last-known-good; retrying")
			select {
			case <-ctx.Done():
				return
			case <-c.opts.Clock.After(10 * time.Second):
			}
			continue
		}
		if err := c.store.GC(); err != nil {
			logger.Error(err, "Cannot remove unused checkpoints")
		}
		logger.Info("The assigned config passed its trial; it is the last-known-good now", "source", src)
		return
	}
}

// waitHealthy polls healthy until it is true (true) or ctx is done (false).
func (c *Controller) waitHealthy(ctx context.Context, healthy func() bool) bool {
	if healthy == nil {
		return ctx.Err() == nil
	}
	t := c.opts.Clock.NewTicker(c.opts.HealthInterval)
	defer t.Stop()
	for !healthy() {
		select {
		case <-ctx.Done():
			return false
		case <-t.C():
		}
	}
	return true
}

// sync brings the assigned config in line with the Node's annotation and
// the ConfigMap it names. It returns ErrRestart when the assigned config
// changed and the agent must restart to use it.
func (c *Controller) sync(ctx context.Context, client kubernetes.Interface) error {
	node, err := c.w.nodes.Get(c.w.nodeName)
	if apierrors.IsNotFound(err) {
		return nil // not registered yet: the informer tells when it is
	}
	if err != nil {
		return fmt.Errorf("get node %s from the informer: %w", c.w.nodeName, err)
	}
	value, ok := node.Annotations[SourceAnnotation]
	if !ok {
		c.stopConfigMapWatch()
		return c.resetToLocal(ctx)
	}
	namespace, name, err := parseSource(value)
	if err != nil {
		c.stopConfigMapWatch()
		c.setSyncFailure(fmt.Sprintf(reasonFailSync, fmt.Sprintf(descInvalidAnnotation, SourceAnnotation, value)+": "+err.Error()))
		return nil
	}

	w := c.watchConfigMap(ctx, client, namespace, name)
	if !w.informer.HasSynced() {
		if err := w.lastError(); err != nil {
			c.setSyncFailure(fmt.Sprintf(reasonFailSync, fmt.Sprintf(descDownload, err)))
		}
		return nil // the informer's sync or error queues another sync
	}
	obj, exists, err := w.informer.GetStore().GetByKey(namespace + "/" + name)
	if err != nil {
		return err
	}
	if !exists {
		c.setSyncFailure(fmt.Sprintf(reasonFailSync, fmt.Sprintf(descDownload, fmt.Sprintf("ConfigMap %s/%s not found", namespace, name))))
		return nil
	}
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return fmt.Errorf("informer holds a %T, not a ConfigMap", obj)
	}
	data, ok := cm.Data[ConfigMapKey]
	if !ok {
		c.setSyncFailure(fmt.Sprintf(reasonFailSync, fmt.Sprintf(descDownload, fmt.Sprintf("ConfigMap %s/%s has no key %q", namespace, name, ConfigMapKey))))
		return nil
	}
	src := checkpoint.SourceOf(cm)
	if rec, err := c.store.Assigned(); err == nil && rec.Source != nil && *rec.Source == src {
		c.setSyncFailure("")
		return nil // assigned already; Bootstrap decided what runs
	}
	if err := c.store.Save(src, []byte(data)); err != nil {
		c.setSyncFailure(fmt.Sprintf(reasonFailSync, fmt.Sprintf(descSaveCheckpoint, src)))
		return err
	}
	if err := c.store.SetAssigned(&src); err != nil {
		c.setSyncFailure(fmt.Sprintf(reasonFailSync, fmt.Sprintf(descSetAssigned, src)))
		return err
	}
	if err := c.store.GC(); err != nil {
		klog.FromContext(ctx).Error(err, "Cannot remove unused checkpoints")
	}
	klog.FromContext(ctx).Info("A new config is assigned; restarting to use it", "source", src)
	return ErrRestart
}

// resetToLocal assigns the local config, which is its own last-known-good:
// the annotation was removed. The agent restarts unless it runs the local
// config already.
func (c *Controller) resetToLocal(ctx context.Context) error {
	assigned, aErr := c.store.Assigned()
	lkg, lErr := c.store.LastKnownGood()
	if aErr == nil && lErr == nil && assigned.Source == nil && lkg.Source == nil {
		c.setSyncFailure("")
		return nil
	}
	if err := c.store.SetLastKnownGood(nil); err != nil {
		c.setSyncFailure(fmt.Sprintf(reasonFailSync, descResetLocal))
		return err
	}
	if err := c.store.SetAssigned(nil); err != nil {
		c.setSyncFailure(fmt.Sprintf(reasonFailSync, descResetLocal))
		return err
	}
	if err := c.store.GC(); err != nil {
		klog.FromContext(ctx).Error(err, "Cannot remove unused checkpoints")
	}
	if c.inUse.Source != nil {
		klog.FromContext(ctx).Info("The config source annotation was removed; restarting to use the local config")
		return ErrRestart
	}
	// The local config runs already: it is now the assigned one.
	klog.FromContext(ctx).Info("The config source annotation was removed; the local config in use is now the assigned one")
	c.mu.Lock()
	c.syncFailure = ""
	c.mu.Unlock()
	c.setStatus(configOK{corev1.ConditionTrue, reasonCurrentLocalOK, msgCurrentLocal})
	return nil
}

// parseSource parses "<namespace>/<name>".
func parseSource(value string) (namespace, name string, err error) {
	namespace, name, ok := strings.Cut(value, "/")
	if !ok || namespace == "" || name == "" {
		return "", "", errors.New("not <namespace>/<name>")
	}
	var problems []string
	for _, msg := range utilvalidation.IsDNS1123Label(namespace) {
		problems = append(problems, "namespace "+msg)
	}
	for _, msg := range utilvalidation.IsDNS1123Subdomain(name) {
		problems = append(problems, "name "+msg)
	}
	if len(problems) > 0 {
		return "", "", errors.New(strings.Join(problems, "; "))
	}
	return namespace, name, nil
}

// configMapWatch is an informer on one ConfigMap, by field selector.
type configMapWatch struct {
	namespace, name string
	informer        cache.SharedIndexInformer
	cancel          context.CancelFunc
	done            chan struct{}

	mu  sync.Mutex
	err error // the last list or watch error, until the informer syncs
}

func (w *configMapWatch) lastError() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

func (w *configMapWatch) setError(err error) {
	w.mu.Lock()
	w.err = err
	w.mu.Unlock()
}

// watchConfigMap returns the informer on namespace/name, starting it (and
// stopping the one on another ConfigMap) if needed.
func (c *Controller) watchConfigMap(ctx context.Context, client kubernetes.Interface, namespace, name string) *configMapWatch {
	if w := c.w.cm; w != nil && w.namespace == namespace && w.name == name {
		return w
	}
	c.stopConfigMapWatch()
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	informer := coreinformers.NewFilteredConfigMapInformer(client, namespace, 0, cache.Indexers{},
		func(o *metav1.ListOptions) { o.FieldSelector = selector })
	_ = informer.SetTransform(cachetrim.Transform) // fails only once started
	w := &configMapWatch{
		namespace: namespace,
		name:      name,
		informer:  informer,
		done:      make(chan struct{}),
	}
	queue := c.w.queue
	enqueue := func(any) { queue.Add(syncKey) }
	_, _ = w.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	})
	_ = w.informer.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		w.setError(err)
		queue.Add(syncKey)
		cache.DefaultWatchErrorHandler(ctx, r, err)
	})
	wctx, cancel := context.WithCancel(ctx)
	w.cancel = cancel
	go func() {
		defer close(w.done)
		w.informer.RunWithContext(wctx)
	}()
	go func() {
		if cache.WaitForCacheSync(wctx.Done(), w.informer.HasSynced) {
			w.setError(nil)
			queue.Add(syncKey)
		}
	}()
	klog.FromContext(ctx).V(2).Info("Watching the config source", "configMap", klog.KRef(namespace, name))
	c.w.cm = w
	return w
}

func (c *Controller) stopConfigMapWatch() {
	if w := c.w.cm; w != nil {
		w.cancel()
		<-w.done
		c.w.cm = nil
	}
}
