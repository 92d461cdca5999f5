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

// renewLease is the lease task. A renewal is one write: an update of the
// Lease as last written. After any failure the Lease is read afresh first;
// a Lease that is missing (deleted, or never made) is created. Nothing is
// renewed before the Node is registered (the owner reference needs its UID)
// or while the provider's ping fails, so that the Lease keeps the node alive
// only while its provider answers.
func (c *Controller) renewLease(ctx context.Context, n *nodeState) (time.Duration, error) {
	n.mu.Lock()
	uid, lease, pingErr := n.uid, n.lease, n.pingErr
	n.mu.Unlock()
	if uid == "" {
		return 0, nil // registration starts the lease task again
	}
	if pingErr != nil {
		return c.opts.RenewInterval, nil
	}

	// A renewal gets one renew interval, as the kubelet's heartbeat client
	// gets its status update frequency: one held up (a connection the
	// API server's restart left hanging, the API server waiting for etcd)
	// is abandoned and retried afresh, rather than landing late with a
	// renewTime that has expired, or never.
	ctx, cancel := context.WithTimeout(ctx, c.opts.RenewInterval)
	defer cancel()
	leases := c.client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(c.opts.Clock.Now())
	if lease == nil {
		// Create first: a new node's Lease takes one write; an existing
		// Lease is read and updated below.
		fresh := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: n.name, Namespace: corev1.NamespaceNodeLease}}
		c.setLease(fresh, n.name, uid, now)
		created, err := leases.Create(ctx, fresh, metav1.CreateOptions{})
		if err == nil {
			n.mu.Lock()
			n.lease = withoutManagedFields(created)
			n.mu.Unlock()
			return c.opts.RenewInterval, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return 0, fmt.Errorf("create lease: %w", err)
		}
		got, err := leases.Get(ctx, n.name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return 0, fmt.Errorf("get lease: %w", err)
		}
		if err == nil {
			lease = got
		}
	}

	var renewed *coordinationv1.Lease
	var err error
	if lease != nil {
		want := lease.DeepCopy()
		c.setLease(want, n.name, uid, now)
		renewed, err = leases.Update(ctx, want, metav1.UpdateOptions{})
		if apierrors.IsNotFound(err) {
			// Deleted since: the GC removes the Lease of a deleted Node,
			// so make sure the Node is still there too.
			klog.FromContext(ctx).V(2).Info("Node lease is gone; creating it again")
			c.forceReport(n)
			lease = nil
		}
	}
	if lease == nil {
		fresh := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: n.name, Namespace: corev1.NamespaceNodeLease}}
		c.setLease(fresh, n.name, uid, now)
		renewed, err = leases.Create(ctx, fresh, metav1.CreateOptions{})
	}

	n.mu.Lock()
	defer n.mu.Unlock()
	if err != nil {
		n.lease = nil
		return 0, fmt.Errorf("renew lease: %w", err)
	}
	n.lease = withoutManagedFields(renewed)
	return c.opts.RenewInterval, nil
}

// withoutManagedFields drops l's managedFields, which can be larger than the
// rest of a Lease, before it is kept for the next renewal: an update that
// leaves them out keeps the API's.
func withoutManagedFields(l *coordinationv1.Lease) *coordinationv1.Lease {
	l.ManagedFields = nil
	return l
}

// setLease sets what nodelet owns in a node's Lease: holder, duration,
// renew time and the owner reference to the Node.
func (c *Controller) setLease(l *coordinationv1.Lease, name string, uid types.UID, now metav1.MicroTime) {
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
