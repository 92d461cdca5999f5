// Package stagewatch keeps a stage.Set to kwok's Stage objects in the
// cluster (the CRD stages.kwok.x-k8s.io, v1alpha1), beside the stages of
// files: the stages the sim provider plays, changed live as Stages are
// applied, changed and deleted. A Stage that does not compile is left out,
// logged, and reported by an Event on it; the others are kept.
//
// It only reads Stages and writes Events; it never touches pods or nodes.
package stagewatch

import (
	"context"
	"fmt"
	"slices"
	"strings"
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

	"github.com/nodelet/nodelet/pkg/stage"
)

// Resource is kwok's Stage resource.
var Resource = kwokv1alpha1.GroupVersion.WithResource("stages")

// DefaultDiscoveryInterval is how often a Watcher looks for the Stage
// resource while the API does not serve it (kwok's CRDs not installed).
const DefaultDiscoveryInterval = 30 * time.Second

// Watcher keeps a Set to the files' stages and the cluster's.
type Watcher struct {
	client    dynamic.Interface
	discovery discovery.DiscoveryInterface
	set       *stage.Set
	files     stage.Lifecycle
	// Recorder, when set, records an Event on each Stage that does not
	// compile.
	Recorder record.EventRecorder
	// DiscoveryInterval is how often the resource is looked for while it
	// is not served; default DefaultDiscoveryInterval.
	DiscoveryInterval time.Duration

	// reported is the resource version of each Stage reported bad, so
	// that it is reported once.
	reported map[types.UID]string
}

// New returns a Watcher that stores in set the stages of files followed
// by those of the cluster. It does no I/O.
func New(client dynamic.Interface, disc discovery.DiscoveryInterface, set *stage.Set, files stage.Lifecycle) *Watcher {
	return &Watcher{client: client, discovery: disc, set: set, files: files, reported: map[types.UID]string{}}
}

// Run waits until the API serves Stages, then keeps the set to them until
// ctx is done.
func (w *Watcher) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("stages")
	ctx = klog.NewContext(ctx, logger)
	if err := WaitServed(ctx, w.discovery, Resource, w.DiscoveryInterval); err != nil {
		return nil // stopped
	}
	inf := dynamicinformer.NewFilteredDynamicInformer(w.client, Resource, metav1.NamespaceAll, 0, cache.Indexers{}, nil).Informer()
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
		return fmt.Errorf("watch stages: %w", err)
	}
	go inf.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil
	}
	logger.Info("Watching kwok's Stage objects")
	for {
		w.sync(ctx, inf.GetStore().List())
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
	}
}

// WaitServed returns once the API serves resource, looking every
// interval (default DefaultDiscoveryInterval), or ctx's error. It logs
// once that it waits.
func WaitServed(ctx context.Context, d discovery.DiscoveryInterface, resource schema.GroupVersionResource, interval time.Duration) error {
	if interval <= 0 {
		interval = DefaultDiscoveryInterval
	}
	logged := false
	for {
		if served(d, resource) {
			return nil
		}
		if !logged {
			klog.FromContext(ctx).Info("kwok's resource is not served; looking again periodically", "resource", resource.String(), "interval", interval)
			logged = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}

func served(d discovery.DiscoveryInterface, resource schema.GroupVersionResource) bool {
	list, err := d.ServerResourcesForGroupVersion(resource.GroupVersion().String())
	if err != nil || list == nil {
		return false
	}
	for _, r := range list.APIResources {
		if r.Name == resource.Resource {
			return true
		}
	}
	return false
}

// sync compiles the cluster's Stages (in name order) and stores them after
// the files'.
func (w *Watcher) sync(ctx context.Context, objs []any) {
	logger := klog.FromContext(ctx)
	var stages []*kwokv1alpha1.Stage
	for _, o := range objs {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		s := &kwokv1alpha1.Stage{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, s); err != nil {
			w.report(logger, u, s, fmt.Errorf("stage %q: %w", u.GetName(), err))
			continue
		}
		stages = append(stages, s)
	}
	slices.SortFunc(stages, func(a, b *kwokv1alpha1.Stage) int { return strings.Compare(a.Name, b.Name) })
	out := append(stage.Lifecycle(nil), w.files...)
	seen := map[types.UID]bool{}
	for _, s := range stages {
		seen[s.UID] = true
		c, err := stage.Compile(s)
		if err != nil {
			w.report(logger, nil, s, err)
			continue
		}
		delete(w.reported, s.UID)
		if c != nil {
			out = append(out, c)
		}
	}
	for uid := range w.reported {
		if !seen[uid] {
			delete(w.reported, uid)
		}
	}
	w.set.Store(out)
	logger.V(2).Info("Stages in force", "files", len(w.files), "cluster", len(out)-len(w.files))
}

// report logs a Stage left out, and records an Event on it once per
// version.
func (w *Watcher) report(logger klog.Logger, u *unstructured.Unstructured, s *kwokv1alpha1.Stage, err error) {
	meta := s.ObjectMeta
	if u != nil {
		meta = metav1.ObjectMeta{Name: u.GetName(), UID: u.GetUID(), ResourceVersion: u.GetResourceVersion()}
	}
	if w.reported[meta.UID] == meta.ResourceVersion && meta.UID != "" {
		return
	}
	w.reported[meta.UID] = meta.ResourceVersion
	logger.Error(err, "Stage left out", "stage", meta.Name)
	if w.Recorder != nil {
		ref := &kwokv1alpha1.Stage{
			TypeMeta:   metav1.TypeMeta{APIVersion: kwokv1alpha1.GroupVersion.String(), Kind: kwokv1alpha1.StageKind},
			ObjectMeta: meta,
		}
		w.Recorder.Event(ref, "Warning", "InvalidStage", err.Error())
	}
}
