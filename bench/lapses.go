package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// lapseWatch counts lease lapses from a watch of the node Leases. A Lease
// lapses when its renewTime moves on by more than its duration (it was not
// renewed in time), or when at the end its renewTime is older than its
// duration (it has not been renewed since). Both times of a gap are the
// agent's own renewTimes, so a slow apiserver answer or a late watch event
// does not make a lapse that the agent did not let happen.
type lapseWatch struct {
	cancel   context.CancelFunc
	informer cache.SharedIndexInformer

	mu     sync.Mutex
	lapses int
}

// watchLapses starts counting lapses of the node Leases.
func (c *cluster) watchLapses(ctx context.Context) (*lapseWatch, error) {
	ctx, cancel := context.WithCancel(ctx)
	f := informers.NewSharedInformerFactoryWithOptions(c.client, 0, informers.WithNamespace(corev1.NamespaceNodeLease))
	w := &lapseWatch{cancel: cancel, informer: f.Coordination().V1().Leases().Informer()}
	_, _ = w.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: w.onUpdate})
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), w.informer.HasSynced) {
		cancel()
		return nil, fmt.Errorf("watch node leases: %w", context.Cause(ctx))
	}
	return w, nil
}

func (w *lapseWatch) onUpdate(oldObj, newObj any) {
	old, cur := oldObj.(*coordinationv1.Lease), newObj.(*coordinationv1.Lease)
	if old.Spec.RenewTime == nil || cur.Spec.RenewTime == nil || cur.Spec.LeaseDurationSeconds == nil {
		return
	}
	if cur.Spec.RenewTime.Sub(old.Spec.RenewTime.Time) > leaseDuration(cur) {
		w.mu.Lock()
		w.lapses++
		w.mu.Unlock()
	}
}

// count is the lapses that have ended so far.
func (w *lapseWatch) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lapses
}

// stop ends the watch and gives every lapse: those that ended and the
// Leases not renewed within their duration now.
func (w *lapseWatch) stop() int {
	now := time.Now()
	defer w.cancel()
	open := 0
	for _, obj := range w.informer.GetStore().List() {
		l := obj.(*coordinationv1.Lease)
		if l.Spec.RenewTime != nil && l.Spec.LeaseDurationSeconds != nil && now.Sub(l.Spec.RenewTime.Time) > leaseDuration(l) {
			open++
		}
	}
	return w.count() + open
}

func leaseDuration(l *coordinationv1.Lease) time.Duration {
	return time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
}
