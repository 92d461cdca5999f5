package node

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
)

// desiredNode is the node as nodelet wants it: the template, described by
// the provider, with nodelet's say on the Ready condition, the volumes the
// attach/detach controller reports attached, and the conditions of
// Options.Conditions. Condition times are left for the
// status report to set.
func (c *Controller) desiredNode(ctx context.Context, n *nodeState) *corev1.Node {
	node := n.template.DeepCopy()
	n.provider.ConfigureNode(ctx, node)
	n.mu.Lock()
	pingErr := n.pingErr
	node.Status.VolumesAttached = slices.Clone(n.volumesAttached)
	n.mu.Unlock()
	setReady(&node.Status, pingErr)
	if c.opts.Conditions != nil {
		setConditions(&node.Status, c.opts.Conditions(n.name))
	}
	return node
}

// setConditions puts each of extra into status, in place of the condition
// of its type if there is one.
func setConditions(status *corev1.NodeStatus, extra []corev1.NodeCondition) {
	for _, e := range extra {
		replaced := false
		for i := range status.Conditions {
			if status.Conditions[i].Type == e.Type {
				status.Conditions[i], replaced = e, true
				break
			}
		}
		if !replaced {
			status.Conditions = append(status.Conditions, e)
		}
	}
}

// register makes sure the Node exists and carries nodelet's labels,
// annotations and taints, and returns its UID. A missing Node is created
// with the template and its status in one write; the status so written is
// returned too (nil when an existing Node was adopted, whose status is
// still to be written).
func (c *Controller) register(ctx context.Context, desired *corev1.Node) (types.UID, *corev1.NodeStatus, error) {
	logger := klog.FromContext(ctx)
	nodes := c.client.CoreV1().Nodes()
	// Create first: on a fresh start that is the only write; on a restart
	// it costs one refused request before the adoption below.
	create := desired.DeepCopy()
	setConditionTimes(&create.Status, nil, metav1.NewTime(c.opts.Clock.Now()))
	record, err := appliedRecord(&create.Status)
	if err != nil {
		return "", nil, err
	}
	if create.Annotations == nil {
		create.Annotations = map[string]string{}
	}
	create.Annotations[LastAppliedAnnotation] = record
	created, err := nodes.Create(ctx, create, metav1.CreateOptions{})
	if err == nil {
		logger.V(2).Info("Registered node")
		return created.UID, &create.Status, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return "", nil, fmt.Errorf("create node: %w", err)
	}
	var current *corev1.Node

	var uid types.UID
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if current == nil {
			if current, err = nodes.Get(ctx, desired.Name, metav1.GetOptions{}); err != nil {
				return err
			}
		}
		patch, err := adoptPatch(desired, current)
		if err != nil {
			return err
		}
		if patch == nil {
			uid = current.UID
			return nil
		}
		adopted, err := nodes.Patch(ctx, desired.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
		if err != nil {
			current = nil
			return err
		}
		uid = adopted.UID
		return nil
	})
	if err != nil {
		return "", nil, fmt.Errorf("adopt existing node: %w", err)
	}
	logger.V(2).Info("Adopted existing node", "uid", uid)
	logKeptSpec(logger, desired, current)
	return uid, nil, nil
}

// adoptPatch is the strategic merge patch that adds to current the labels,
// annotations and taints of desired that it lacks, and its pod ranges and
// provider ID where current has none, or nil when nothing is missing. A
// label or annotation with another value is set to desired's; a taint
// counts as present when one with its key and effect exists. Nothing is
// removed, and pod ranges or a provider ID already set are never changed
// (the API refuses it). Taints are a list replaced as a whole, so the patch
// carries current's resourceVersion and fails with a Conflict on a newer
// node.
func adoptPatch(desired, current *corev1.Node) ([]byte, error) {
	labels := missingEntries(desired.Labels, current.Labels)
	annotations := missingEntries(desired.Annotations, current.Annotations)
	spec := map[string]any{}
	taints := append([]corev1.Taint(nil), current.Spec.Taints...)
	for _, t := range desired.Spec.Taints {
		if !hasTaint(taints, t) {
			taints = append(taints, t)
		}
	}
	if len(taints) > len(current.Spec.Taints) {
		spec["taints"] = taints
	}
	if want := podCIDRs(&desired.Spec); len(want) > 0 && len(podCIDRs(&current.Spec)) == 0 {
		spec["podCIDR"], spec["podCIDRs"] = want[0], want
	}
	if desired.Spec.ProviderID != "" && current.Spec.ProviderID == "" {
		spec["providerID"] = desired.Spec.ProviderID
	}
	if len(labels) == 0 && len(annotations) == 0 && len(spec) == 0 {
		return nil, nil
	}

	meta := map[string]any{"resourceVersion": current.ResourceVersion}
	if len(labels) > 0 {
		meta["labels"] = labels
	}
	if len(annotations) > 0 {
		meta["annotations"] = annotations
	}
	patch := map[string]any{"metadata": meta}
	if len(spec) > 0 {
		patch["spec"] = spec
	}
	data, err := json.Marshal(patch)
	if err != nil {
		return nil, fmt.Errorf("marshal adoption patch: %w", err)
	}
	return data, nil
}

// podCIDRs are the pod ranges of spec: podCIDRs, or podCIDR alone when
// only it is set.
func podCIDRs(spec *corev1.NodeSpec) []string {
	if len(spec.PodCIDRs) > 0 {
		return spec.PodCIDRs
	}
	if spec.PodCIDR != "" {
		return []string{spec.PodCIDR}
	}
	return nil
}

// logKeptSpec tells when an adopted node keeps pod ranges or a provider ID
// other than desired's: set before, they cannot change.
func logKeptSpec(logger klog.Logger, desired, current *corev1.Node) {
	if want, have := podCIDRs(&desired.Spec), podCIDRs(&current.Spec); len(want) > 0 && len(have) > 0 && !slices.Equal(want, have) {
		logger.Info("Existing node keeps its pod ranges, which cannot change", "podCIDRs", have, "wanted", want)
	}
	if want, have := desired.Spec.ProviderID, current.Spec.ProviderID; want != "" && have != "" && want != have {
		logger.Info("Existing node keeps its provider ID, which cannot change", "providerID", have, "wanted", want)
	}
}

// missingEntries are the entries of want that have is missing or holds with
// another value.
func missingEntries(want, have map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			out[k] = v
		}
	}
	return out
}

func hasTaint(taints []corev1.Taint, t corev1.Taint) bool {
	for _, have := range taints {
		if have.Key == t.Key && have.Effect == t.Effect {
			return true
		}
	}
	return false
}
