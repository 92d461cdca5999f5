package simrules

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	kwokv1alpha1 "sigs.k8s.io/kwok/pkg/apis/v1alpha1"

	"github.com/nodelet/nodelet/pkg/stagewatch"
)

// GroupVersionResource is the kind's resource in the cluster.
func (k Kind) GroupVersionResource() schema.GroupVersionResource {
	return kwokv1alpha1.GroupVersion.WithResource(k.Resource)
}

// Watcher keeps the cluster's rules of some kinds in a Set, live: each
// kind is watched once the API serves it (kwok's CRD installed). An
// object that does not compile is left out, logged, and reported by a
// Warning Event "Invalid<Kind>" on it, once per version.
type Watcher struct {
	client    dynamic.Interface
	discovery discovery.DiscoveryInterface
	set       *Set
	kinds     []Kind
	env       *CEL
	// Recorder, when set, records the Events on objects left out.
	Recorder record.EventRecorder
	// DiscoveryInterval is how often a kind not served is looked for
	// (default stagewatch.DefaultDiscoveryInterval).
	DiscoveryInterval time.Duration

	mu       sync.Mutex
	reported map[types.UID]reportedVersion // objects reported bad, until they go
}

// reportedVersion is the kind and resource version of an object reported
// bad.
type reportedVersion struct {
	kind, version string
}

// NewWatcher returns a Watcher of kinds into set, compiling CEL
// expressions in env (nil: kwok's on the wall clock). It does no I/O.
func NewWatcher(client dynamic.Interface, disc discovery.DiscoveryInterface, set *Set, kinds []Kind, env *CEL) *Watcher {
	return &Watcher{client: client, discovery: disc, set: set, kinds: kinds, env: env, reported: map[types.UID]reportedVersion{}}
}

// Run watches every kind until ctx is done.
func (w *Watcher) Run(ctx context.Context) error {
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithName("kwok-rules"))
	var wg sync.WaitGroup
	for _, k := range w.kinds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.watch(ctx, k)
		}()
	}
	wg.Wait()
	return nil
}

// watch keeps the set to the objects of one kind.
func (w *Watcher) watch(ctx context.Context, k Kind) {
	logger := klog.FromContext(ctx).WithValues("kind", k.Name)
	ctx = klog.NewContext(ctx, logger)
	gvr := k.GroupVersionResource()
	if err := stagewatch.WaitServed(ctx, w.discovery, gvr, w.DiscoveryInterval); err != nil {
		return // stopped
	}
	inf := dynamicinformer.NewFilteredDynamicInformer(w.client, gvr, metav1.NamespaceAll, 0, cache.Indexers{}, nil).Informer()
	changed := make(chan struct{}, 1)
	poke := func(any) {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    poke,
		UpdateFunc: func(_, obj any) { poke(obj) },
		DeleteFunc: poke,
	}); err != nil {
		logger.Error(err, "Cannot watch kwok's objects")
		return
	}
	go inf.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return
	}
	logger.Info("Watching kwok's objects")
	for {
		w.sync(ctx, k, inf.GetStore().List())
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

// sync compiles the objects of one kind (in namespace and name order)
// and stores them in the set.
func (w *Watcher) sync(ctx context.Context, k Kind, objs []any) {
	logger := klog.FromContext(ctx)
	us := make([]*unstructured.Unstructured, 0, len(objs))
	for _, o := range objs {
		if u, ok := o.(*unstructured.Unstructured); ok {
			us = append(us, u)
		}
	}
	slices.SortFunc(us, func(a, b *unstructured.Unstructured) int {
		return strings.Compare(a.GetNamespace()+"/"+a.GetName(), b.GetNamespace()+"/"+b.GetName())
	})
	var rules []*Rule
	w.forgetGone(k, us)
	for _, u := range us {
		obj := k.New()
		r, err := func() (*Rule, error) {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, obj); err != nil {
				return nil, fmt.Errorf("%s %q: %w", k.Name, u.GetName(), err)
			}
			return Compile(obj, w.env)
		}()
		if err != nil {
			w.report(logger, k, u, err)
			continue
		}
		w.forget(u.GetUID())
		rules = append(rules, r)
	}
	w.set.StoreCluster(k.Name, rules)
	logger.V(2).Info("kwok's objects in force", "count", len(rules))
}

func (w *Watcher) forget(uid types.UID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.reported, uid)
}

// forgetGone forgets the objects of kind k reported bad that are no
// longer among us, its objects now.
func (w *Watcher) forgetGone(k Kind, us []*unstructured.Unstructured) {
	present := make(map[types.UID]bool, len(us))
	for _, u := range us {
		present[u.GetUID()] = true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for uid, r := range w.reported {
		if r.kind == k.Name && !present[uid] {
			delete(w.reported, uid)
		}
	}
}

// report logs an object left out and records an Event on it, once per
// version.
func (w *Watcher) report(logger klog.Logger, k Kind, u *unstructured.Unstructured, err error) {
	w.mu.Lock()
	r := reportedVersion{kind: k.Name, version: u.GetResourceVersion()}
	seen := w.reported[u.GetUID()] == r && u.GetUID() != ""
	w.reported[u.GetUID()] = r
	w.mu.Unlock()
	if seen {
		return
	}
	logger.Error(err, "kwok object left out", "object", klog.KObj(u))
	if w.Recorder != nil {
		ref := &unstructured.Unstructured{}
		ref.SetAPIVersion(kwokv1alpha1.GroupVersion.String())
		ref.SetKind(k.Name)
		ref.SetNamespace(u.GetNamespace())
		ref.SetName(u.GetName())
		ref.SetUID(u.GetUID())
		ref.SetResourceVersion(u.GetResourceVersion())
		w.Recorder.Event(ref, "Warning", "Invalid"+k.Name, err.Error())
	}
}
