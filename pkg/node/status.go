package node

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
)

// syncStatus registers the node if it is not yet, then reports its status
// when it changed or when the report interval has passed.
func (c *Controller) syncStatus(ctx context.Context, name string, n *nodeState) (time.Duration, error) {
	interval := c.opts.StatusReportInterval
	if !c.useLeases {
		interval = c.opts.PingInterval
	}
	desired := c.desiredNode(ctx, n)

	n.mu.Lock()
	registered := n.uid != ""
	unchanged := n.reported != nil && equality.Semantic.DeepEqual(n.reported, withoutConditionTimes(&desired.Status))
	recent := c.opts.Clock.Since(n.reportedAt) < interval*9/10
	n.mu.Unlock()
	if registered && unchanged && recent {
		// A report was made lately and its timer is pending.
		return 0, nil
	}

	if !registered {
		uid, err := c.register(ctx, desired)
		if err != nil {
			return 0, err
		}
		n.mu.Lock()
		n.uid = uid
		n.mu.Unlock()
		if c.useLeases {
			c.queue.Add(taskKey{node: name, task: taskLease})
		}
	}

	var written *corev1.NodeStatus
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		current, err := c.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if current.UID != n.uidLocked() {
			return errNodeReplaced
		}
		written, err = c.patchStatus(ctx, desired, current)
		return err
	})
	if err == errNodeReplaced || apierrors.IsNotFound(err) {
		// Someone deleted the node: register it again.
		n.mu.Lock()
		n.uid, n.lease, n.reported = "", nil, nil
		n.mu.Unlock()
		return 0, fmt.Errorf("node was deleted; registering it again")
	}
	if err != nil {
		return 0, fmt.Errorf("report node status: %w", err)
	}
	n.mu.Lock()
	first := n.reported == nil
	n.reported = withoutConditionTimes(written)
	n.reportedAt = c.opts.Clock.Now()
	n.mu.Unlock()
	if first && !registered {
		klog.FromContext(ctx).V(2).Info("Node registered")
		c.markRegistered()
		return spread(interval), nil
	}
	return interval, nil
}

var errNodeReplaced = fmt.Errorf("node was replaced")

func (n *nodeState) uidLocked() types.UID {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.uid
}

// desiredNode is the node as nodelet wants it: the template, described by
// the provider, with nodelet's Ready condition.
func (c *Controller) desiredNode(ctx context.Context, n *nodeState) *corev1.Node {
	n.mu.Lock()
	node := n.template.DeepCopy()
	pingErr := n.pingErr
	n.mu.Unlock()
	if node.Labels == nil {
		node.Labels = map[string]string{}
	}
	n.provider.ConfigureNode(ctx, node)
	setReady(&node.Status, pingErr)
	return node
}

// setReady makes the Ready condition say what the ping says: False with the
// ping's error while it fails, else the provider's own (or True).
func setReady(status *corev1.NodeStatus, pingErr error) {
	ready := corev1.NodeCondition{
		Type:    corev1.NodeReady,
		Status:  corev1.ConditionTrue,
		Reason:  "NodeletReady",
		Message: "nodelet is posting ready status",
	}
	if pingErr != nil {
		ready.Status = corev1.ConditionFalse
		ready.Reason = "ProviderPingFailed"
		ready.Message = "provider ping failed: " + pingErr.Error()
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

// register creates the node, or adopts the one that exists: our labels,
// annotations and taints are added, and whatever others wrote is kept.
func (c *Controller) register(ctx context.Context, desired *corev1.Node) (types.UID, error) {
	nodes := c.client.CoreV1().Nodes()
	current, err := nodes.Get(ctx, desired.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		created, err := nodes.Create(ctx, desired, metav1.CreateOptions{})
		if err == nil {
			klog.FromContext(ctx).V(2).Info("Created node")
			return created.UID, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return "", fmt.Errorf("create node: %w", err)
		}
		current, err = nodes.Get(ctx, desired.Name, metav1.GetOptions{})
	}
	if err != nil {
		return "", fmt.Errorf("get node: %w", err)
	}
	patch, err := adoptPatch(desired, current)
	if err != nil {
		return "", err
	}
	if patch == nil {
		klog.FromContext(ctx).V(2).Info("Adopted existing node")
		return current.UID, nil
	}
	adopted, err := nodes.Patch(ctx, desired.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return "", fmt.Errorf("adopt node: %w", err)
	}
	klog.FromContext(ctx).V(2).Info("Adopted existing node; added our labels, annotations and taints")
	return adopted.UID, nil
}

// adoptPatch is a merge patch adding desired's labels, annotations and
// taints that current lacks, guarded by current's resourceVersion; nil when
// nothing is missing.
func adoptPatch(desired, current *corev1.Node) ([]byte, error) {
	missing := func(want, have map[string]string) map[string]string {
		out := map[string]string{}
		for k, v := range want {
			if got, ok := have[k]; !ok || got != v {
				out[k] = v
			}
		}
		return out
	}
	labels := missing(desired.Labels, current.Labels)
	annotations := missing(desired.Annotations, current.Annotations)
	taints := append([]corev1.Taint(nil), current.Spec.Taints...)
	added := false
	for _, t := range desired.Spec.Taints {
		found := false
		for _, have := range current.Spec.Taints {
			found = found || (have.Key == t.Key && have.Effect == t.Effect)
		}
		if !found {
			taints = append(taints, t)
			added = true
		}
	}
	if len(labels) == 0 && len(annotations) == 0 && !added {
		return nil, nil
	}
	patch := map[string]any{"metadata": map[string]any{
		"labels": labels, "annotations": annotations, "resourceVersion": current.ResourceVersion,
	}}
	if added {
		patch["spec"] = map[string]any{"taints": taints}
	}
	data, err := json.Marshal(patch)
	if err != nil {
		return nil, fmt.Errorf("marshal adoption patch: %w", err)
	}
	return data, nil
}

// patchStatus writes desired's status onto current with a three-way patch
// and returns the status it wrote.
func (c *Controller) patchStatus(ctx context.Context, desired, current *corev1.Node) (*corev1.NodeStatus, error) {
	now := metav1.NewTime(c.opts.Clock.Now())
	status := desired.Status.DeepCopy()
	setConditionTimes(status, current.Status.Conditions, now)
	patch, err := statusPatch(status, current)
	if err != nil {
		return nil, err
	}
	if patch == nil {
		return status, nil
	}
	_, err = c.client.CoreV1().Nodes().Patch(ctx, current.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		return nil, err
	}
	klog.FromContext(ctx).V(4).Info("Reported node status")
	return status, nil
}

// setConditionTimes stamps each condition's heartbeat with now, and keeps
// its transition time when its status did not change since the last report.
func setConditionTimes(status *corev1.NodeStatus, previous []corev1.NodeCondition, now metav1.Time) {
	for i := range status.Conditions {
		cond := &status.Conditions[i]
		cond.LastHeartbeatTime = now
		cond.LastTransitionTime = now
		for _, prev := range previous {
			if prev.Type == cond.Type && prev.Status == cond.Status && !prev.LastTransitionTime.IsZero() {
				cond.LastTransitionTime = prev.LastTransitionTime
			}
		}
	}
}

// withoutConditionTimes returns a copy of status without condition times,
// for telling a changed status from a merely newer one.
func withoutConditionTimes(status *corev1.NodeStatus) *corev1.NodeStatus {
	out := status.DeepCopy()
	for i := range out.Conditions {
		out.Conditions[i].LastHeartbeatTime = metav1.Time{}
		out.Conditions[i].LastTransitionTime = metav1.Time{}
	}
	return out
}
