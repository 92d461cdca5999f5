package node

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
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
	n.mu.Lock()
	n.kept.apply(&node.Status)
	n.mu.Unlock()
	return node
}

// keptFields are the parts of a taken-over Node's status that its creator
// wrote and the agent keeps, as a kubelet keeps them on a Node it did not
// create: capacity, allocatable and addresses, each where the Node had it
// when it was adopted (nil: the provider's stands; addresses without an
// InternalIP get the provider's). Conditions, nodeInfo,
// daemonEndpoints and the rest are the agent's to report.
type keptFields struct {
	capacity, allocatable corev1.ResourceList
	addresses             []corev1.NodeAddress
}

// keptFrom is what of current's status the agent keeps: the fields its
// creator set.
func keptFrom(current *corev1.Node) *keptFields {
	return &keptFields{
		capacity:    maps.Clone(current.Status.Capacity),
		allocatable: maps.Clone(current.Status.Allocatable),
		addresses:   slices.Clone(current.Status.Addresses),
	}
}

// refresh takes the newest values of the kept fields from current, so
// that a creator who changes them later is followed too.
func (k *keptFields) refresh(current *corev1.Node) {
	if k == nil {
		return
	}
	if k.capacity != nil && current.Status.Capacity != nil {
		k.capacity = maps.Clone(current.Status.Capacity)
	}
	if k.allocatable != nil && current.Status.Allocatable != nil {
		k.allocatable = maps.Clone(current.Status.Allocatable)
	}
	if k.addresses != nil && current.Status.Addresses != nil {
		k.addresses = slices.Clone(current.Status.Addresses)
	}
}

// apply puts the kept fields into status in place of the provider's.
func (k *keptFields) apply(status *corev1.NodeStatus) {
	if k == nil {
		return
	}
	if k.capacity != nil {
		status.Capacity = maps.Clone(k.capacity)
	}
	if k.allocatable != nil {
		status.Allocatable = maps.Clone(k.allocatable)
	}
	if k.addresses != nil {
		status.Addresses = keptAddresses(k.addresses, status.Addresses)
	}
}

// keptAddresses are a taken-over Node's addresses as its creator wrote
// them and, when they hold no InternalIP, the provider's InternalIPs (the
// agent's address), as a kubelet adds its node IP: the API server reaches
// the kubelet API at a node's InternalIP.
func keptAddresses(kept, provider []corev1.NodeAddress) []corev1.NodeAddress {
	out := slices.Clone(kept)
	isInternal := func(a corev1.NodeAddress) bool { return a.Type == corev1.NodeInternalIP }
	if slices.ContainsFunc(kept, isInternal) {
		return out
	}
	for _, a := range provider {
		if isInternal(a) {
			out = append(out, a)
		}
	}
	return out
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
	uid, current, err := c.adopt(ctx, desired, nil, false)
	if err != nil {
		return "", nil, err
	}
	logKeptSpec(logger, desired, current)
	return uid, nil, nil
}

// adopt adds to the existing Node what it lacks of desired (adoptPatch)
// and returns its UID and the Node: as the API answered the patch, or as
// it was read when nothing was missing (seen, when given, else from the
// API). A taken-over Node that is missing gives errNodeGone: it is never
// created.
func (c *Controller) adopt(ctx context.Context, desired, seen *corev1.Node, takenOver bool) (types.UID, *corev1.Node, error) {
	nodes := c.client.CoreV1().Nodes()
	current := seen
	var uid types.UID
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if current == nil {
			var err error
			if current, err = nodes.Get(ctx, desired.Name, metav1.GetOptions{}); err != nil {
				return err
			}
		}
		patch, err := adoptPatch(desired, current, takenOver)
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
		uid, current = adopted.UID, adopted
		return nil
	})
	if takenOver && apierrors.IsNotFound(err) {
		return "", nil, errNodeGone
	}
	if err != nil {
		return "", nil, fmt.Errorf("adopt existing node: %w", err)
	}
	klog.FromContext(ctx).V(2).Info("Adopted existing node", "uid", uid, "takenOver", takenOver)
	return uid, current, nil
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
//
// A taken-over Node keeps what its creator wrote: only the labels and
// annotations whose keys it lacks are added, and nothing of its spec.
func adoptPatch(desired, current *corev1.Node, takenOver bool) ([]byte, error) {
	labels := missingEntries(desired.Labels, current.Labels)
	annotations := missingEntries(desired.Annotations, current.Annotations)
	if takenOver {
		labels = missingKeys(desired.Labels, current.Labels)
		annotations = missingKeys(desired.Annotations, current.Annotations)
		desired = &corev1.Node{ObjectMeta: desired.ObjectMeta}
	}
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

// missingKeys are the entries of want whose keys have lacks.
func missingKeys(want, have map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range want {
		if _, ok := have[k]; !ok {
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
