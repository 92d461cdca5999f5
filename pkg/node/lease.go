package node

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// LeaseNamespace holds the node Leases.
const LeaseNamespace = corev1.NamespaceNodeLease

// renewLease renews the node's Lease with one write: an update of the copy
// kept from the last renewal, or, when there is none, a get and then an
// update or a create. Nothing is renewed before the node is registered or
// while the provider's ping fails.
func (c *Controller) renewLease(ctx context.Context, name string, n *nodeState) (time.Duration, error) {
	n.mu.Lock()
	uid, lease, pingErr := n.uid, n.lease, n.pingErr
	n.mu.Unlock()
	if uid == "" || pingErr != nil {
		return c.opts.RenewInterval, nil
	}
	leases := c.client.CoordinationV1().Leases(LeaseNamespace)
	if lease == nil {
		got, err := leases.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return 0, fmt.Errorf("get lease: %w", err)
		default:
			lease = got
		}
	}

	now := metav1.NewMicroTime(c.opts.Clock.Now())
	var renewed *coordinationv1.Lease
	var err error
	next := c.opts.RenewInterval
	if lease == nil {
		renewed, err = leases.Create(ctx, c.newLease(name, uid, now), metav1.CreateOptions{})
		if err == nil {
			klog.FromContext(ctx).V(2).Info("Created node lease")
			next = spread(next)
		}
	} else {
		want := lease.DeepCopy()
		c.fillLease(want, name, uid, now)
		renewed, err = leases.Update(ctx, want, metav1.UpdateOptions{})
	}
	if err != nil {
		// Start from a fresh copy next time: the lease may have been
		// deleted or written by someone else.
		n.mu.Lock()
		n.lease = nil
		n.mu.Unlock()
		return 0, fmt.Errorf("renew lease: %w", err)
	}
	n.mu.Lock()
	n.lease = renewed
	n.mu.Unlock()
	return next, nil
}

func (c *Controller) newLease(name string, uid types.UID, now metav1.MicroTime) *coordinationv1.Lease {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: LeaseNamespace}}
	c.fillLease(l, name, uid, now)
	return l
}

// fillLease sets what nodelet owns in a node Lease.
func (c *Controller) fillLease(l *coordinationv1.Lease, name string, uid types.UID, now metav1.MicroTime) {
	l.Spec.HolderIdentity = ptr.To(name)
	l.Spec.LeaseDurationSeconds = ptr.To(int32(c.opts.LeaseDuration / time.Second))
	l.Spec.RenewTime = &now
	l.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: corev1.SchemeGroupVersion.String(),
		Kind:       "Node",
		Name:       name,
		UID:        uid,
	}}
}
