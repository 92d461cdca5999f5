package node

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
)

// The Ready condition that nodelet sets itself.
const (
	reasonReady      = "NodeletReady"
	messageReady     = "nodelet is posting ready status"
	reasonPingFailed = "ProviderPingFailed"
)

// errNodeGone says the registered Node no longer exists (NotFound, or a Node
// of the same name with another UID).
var errNodeGone = errors.New("node was deleted or replaced; registering it again")

// syncStatus is the status task. It registers the node if it is not yet,
// then writes its status when it changed since the last write, when a
// report is due, or when a write was asked for; otherwise it only checks.
// It runs again within a ping interval, so that a change a provider does
// not notify is still reported promptly.
func (c *Controller) syncStatus(ctx context.Context, n *nodeState) (time.Duration, error) {
	n.writeMu.Lock()
	defer n.writeMu.Unlock()
	desired := c.desiredNode(ctx, n)

	n.mu.Lock()
	uid, applied, appliedAt, forced, known := n.uid, n.applied, n.appliedAt, n.forceReport, n.known
	n.mu.Unlock()

	if uid == "" {
		var err error
		var created *corev1.NodeStatus
		var kept *keptFields
		var current *corev1.Node
		if n.takenOver {
			if uid, current, err = c.adopt(ctx, desired, known, true); err != nil {
				return 0, fmt.Errorf("adopt node: %w", err)
			}
			kept = keptFrom(current)
		} else if uid, created, err = c.register(ctx, desired); err != nil {
			return 0, fmt.Errorf("register node: %w", err)
		}
		n.mu.Lock()
		n.kept, n.known = kept, current
		n.uid, n.lease, n.applied = uid, nil, newAppliedStatus(created)
		n.appliedAt, n.forceReport = c.spread(c.opts.Clock.Now()), false
		n.mu.Unlock()
		if c.useLeases {
			c.queue.Add(n.key(taskLease))
		}
		if created != nil {
			// Created with its status: that was the first report.
			c.markReported(ctx, n)
			return min(c.reportInterval(), c.opts.PingInterval), nil
		}
		applied = nil
	}

	interval := c.reportInterval()
	check := min(interval, c.opts.PingInterval)
	if applied != nil && !forced && !statusChanged(applied, &desired.Status) {
		if wait := interval - c.opts.Clock.Since(appliedAt); wait > 0 {
			return min(wait, check), nil
		}
	}

	if err := c.report(ctx, n, uid, desired); err != nil {
		return 0, err
	}
	if applied == nil {
		// This agent's first report of the node.
		n.mu.Lock()
		n.appliedAt = c.spread(n.appliedAt)
		n.mu.Unlock()
	}
	return check, nil
}

// spread backdates the time of a node's first report by a random part of
// up to half the report interval. The nodes of an agent register, or are
// first reported, within seconds of each other; without it every one of
// them would report again within the same seconds at every interval, a
// burst of thousands of writes (and of memory for them) instead of a steady
// trickle. The next report still waits at least half an interval.
func (c *Controller) spread(reported time.Time) time.Time {
	half := int64(c.reportInterval() / 2)
	if half <= 0 {
		return reported
	}
	c.randMu.Lock()
	defer c.randMu.Unlock()
	return reported.Add(-time.Duration(c.rand.Int64N(half)))
}

// report writes desired as the status of n, registered with uid, and
// records it as applied. The caller holds n.writeMu.
func (c *Controller) report(ctx context.Context, n *nodeState, uid types.UID, desired *corev1.Node) error {
	written, err := c.writeStatus(ctx, n, uid, &desired.Status)
	if errors.Is(err, errNodeGone) {
		n.mu.Lock()
		n.uid, n.lease, n.applied = "", nil, nil
		n.mu.Unlock()
		return err
	}
	if err != nil {
		return fmt.Errorf("report node status: %w", err)
	}
	n.mu.Lock()
	n.applied, n.appliedAt, n.forceReport = newAppliedStatus(written), c.opts.Clock.Now(), false
	n.mu.Unlock()
	klog.FromContext(ctx).V(4).Info("Reported node status")
	c.markReported(ctx, n)
	return nil
}

// SetVolumesAttached makes the node's status.volumesAttached list exactly
// volumes, and returns once the Node in the API says so. It is how the
// attach/detach controller reports (volume.AttachedVolumesWriter). A node
// not registered yet gets the list with its registration; a node this
// controller does not manage, or whose Node was deleted, gives NotFound.
func (c *Controller) SetVolumesAttached(ctx context.Context, node types.NodeName, volumes []corev1.AttachedVolume) error {
	n := c.node(string(node))
	if n == nil {
		return apierrors.NewNotFound(corev1.Resource("nodes"), string(node))
	}
	n.writeMu.Lock()
	defer n.writeMu.Unlock()
	n.mu.Lock()
	n.volumesAttached = slices.Clone(volumes)
	uid, applied := n.uid, n.applied
	n.mu.Unlock()
	if uid == "" {
		return nil // registered with them
	}
	desired := c.desiredNode(ctx, n)
	if applied != nil && !statusChanged(applied, &desired.Status) {
		return nil // written already: at start, the usual case for every node
	}
	err := c.report(klog.NewContext(ctx, klog.FromContext(ctx).WithValues("node", klog.KRef("", n.name))), n, uid, desired)
	if errors.Is(err, errNodeGone) {
		c.queue.Add(n.key(taskStatus))
		return apierrors.NewNotFound(corev1.Resource("nodes"), string(node))
	}
	return err
}

// reportInterval is how often an unchanged status is written.
func (c *Controller) reportInterval() time.Duration {
	if c.useLeases {
		return c.opts.StatusReportInterval
	}
	return c.opts.PingInterval
}

// forceReport makes the next status task write the status even when it did
// not change, and runs it now. The lease task uses it when the Lease
// vanished, which may mean the Node was deleted.
func (c *Controller) forceReport(n *nodeState) {
	n.mu.Lock()
	n.forceReport = true
	n.mu.Unlock()
	c.queue.Add(n.key(taskStatus))
}

// writeStatus writes desired onto the Node with a three-way patch, from a
// new copy of the Node each attempt, retrying on Conflict. It returns the
// status written, with its condition times. The first attempt takes the
// Node as its adoption left it, if it was just adopted, else, as the
// kubelet, reads it from the API server's cache (resourceVersion 0, no
// read from etcd); after a conflict it reads from etcd. The patch carries
// the resourceVersion read, so a stale copy is never written over.
func (c *Controller) writeStatus(ctx context.Context, n *nodeState, uid types.UID, desired *corev1.NodeStatus) (*corev1.NodeStatus, error) {
	nodes := c.client.CoreV1().Nodes()
	name := n.name
	var written *corev1.NodeStatus
	n.mu.Lock()
	known := n.known
	n.known = nil
	n.mu.Unlock()
	cached := known == nil
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		current, err := known, error(nil)
		known = nil
		if cached {
			cached = false
			current, err = nodes.Get(ctx, name, metav1.GetOptions{ResourceVersion: "0"})
			if apierrors.IsNotFound(err) || err == nil && current.UID != uid {
				// The cache may lag a Node just made or deleted: etcd
				// has the last word.
				current, err = nil, nil
			}
		}
		if current == nil && err == nil {
			current, err = nodes.Get(ctx, name, metav1.GetOptions{})
		}
		if apierrors.IsNotFound(err) {
			return errNodeGone
		}
		if err != nil {
			return fmt.Errorf("get node: %w", err)
		}
		if current.UID != uid {
			return errNodeGone
		}
		status := desired.DeepCopy()
		// A taken-over Node's creator may have changed what it keeps.
		n.mu.Lock()
		n.kept.refresh(current)
		n.kept.apply(status)
		n.mu.Unlock()
		previous := current.Status.Conditions
		if last := lastApplied(current); last != nil {
			previous = last.Conditions
		}
		setConditionTimes(status, previous, metav1.NewTime(c.opts.Clock.Now()))
		patch, err := statusPatch(status, current)
		if err != nil {
			return err
		}
		if patch != nil {
			_, err := nodes.Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
			if apierrors.IsNotFound(err) {
				return errNodeGone
			}
			if err != nil {
				return fmt.Errorf("patch node status: %w", err)
			}
		}
		written = status
		return nil
	})
	return written, err
}

// setReady gives nodelet's say on the Ready condition: while the ping fails
// it is False with the ping's error; otherwise the provider's Ready stands,
// or, when the provider gave none, Ready is True.
func setReady(status *corev1.NodeStatus, pingErr error) {
	ready := corev1.NodeCondition{
		Type:    corev1.NodeReady,
		Status:  corev1.ConditionTrue,
		Reason:  reasonReady,
		Message: messageReady,
	}
	if pingErr != nil {
		ready.Status = corev1.ConditionFalse
		ready.Reason = reasonPingFailed
		ready.Message = pingErr.Error()
	}
	for i := range status.Conditions {
		if status.Conditions[i].Type == corev1.NodeReady {
			if pingErr != nil {
				status.Conditions[i] = ready
			}
			return
		}
	}
	status.Conditions = append(status.Conditions, ready)
}

// setConditionTimes stamps every condition's heartbeat with now. A
// condition keeps the transition time of the previous condition of its type
// when its status is the same; otherwise it transitioned now.
func setConditionTimes(status *corev1.NodeStatus, previous []corev1.NodeCondition, now metav1.Time) {
	for i := range status.Conditions {
		cond := &status.Conditions[i]
		cond.LastHeartbeatTime = now
		cond.LastTransitionTime = now
		for _, prev := range previous {
			if prev.Type == cond.Type {
				if prev.Status == cond.Status && !prev.LastTransitionTime.IsZero() {
					cond.LastTransitionTime = prev.LastTransitionTime
				}
				break
			}
		}
	}
}

// appliedStatus is what the controller keeps of the status it last wrote
// to a node: a fingerprint, to tell whether a new status differs, and the
// status of each condition, to tell whether another writer overwrote one
// and whether the node was Ready. The status itself is not kept (thousands
// of nodes would each hold a copy): a write reads the Node fresh.
type appliedStatus struct {
	sum        uint64 // statusSum of the status
	conditions []appliedCondition
}

type appliedCondition struct {
	Type   corev1.NodeConditionType
	Status corev1.ConditionStatus
}

func newAppliedStatus(status *corev1.NodeStatus) *appliedStatus {
	if status == nil {
		return nil
	}
	a := &appliedStatus{sum: statusSum(status), conditions: make([]appliedCondition, len(status.Conditions))}
	for i, c := range status.Conditions {
		a.conditions[i] = appliedCondition{Type: c.Type, Status: c.Status}
	}
	return a
}

// statusChanged tells whether desired differs from the applied status in
// more than condition times.
func statusChanged(applied *appliedStatus, desired *corev1.NodeStatus) bool {
	sum := statusSum(desired)
	return sum == 0 || sum != applied.sum
}

// statusSum fingerprints a status apart from its condition times: the FNV
// hash of its protobuf encoding, in which maps are in key order and
// quantities in their canonical form. It is 0 when the status cannot be
// encoded, which counts as changed.
func statusSum(status *corev1.NodeStatus) uint64 {
	s := *status
	s.Conditions = slices.Clone(status.Conditions)
	for i := range s.Conditions {
		s.Conditions[i].LastHeartbeatTime = metav1.Time{}
		s.Conditions[i].LastTransitionTime = metav1.Time{}
	}
	data, err := s.Marshal()
	if err != nil {
		return 0
	}
	h := fnv.New64a()
	h.Write(data)
	return max(h.Sum64(), 1)
}
