package node

import (
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
)

// LastAppliedAnnotation holds, as JSON, the node status nodelet last wrote.
// It is the "original" of the three-way status patch: what nodelet wrote
// before and no longer wants is removed, and what others wrote is kept.
const LastAppliedAnnotation = "nodelet.io/last-applied-node-status"

// nodePatchMeta is the strategic merge patch schema of a Node.
var nodePatchMeta = func() strategicpatch.LookupPatchMeta {
	meta, err := strategicpatch.NewPatchMetaFromStruct(&corev1.Node{})
	if err != nil {
		panic(fmt.Sprintf("strategic merge patch schema of a Node: %v", err))
	}
	return meta
}()

// statusPatch returns the strategic merge patch for the nodes/status
// subresource that takes current to the status want, or nil when it would
// change nothing. It is three-way: the original is the status recorded in
// current's LastAppliedAnnotation (none when absent), so it removes what
// nodelet applied before and no longer wants, and keeps what others wrote.
// The patch records want in the annotation, and carries current's
// resourceVersion so that it fails with a Conflict on a newer Node.
func statusPatch(want *corev1.NodeStatus, current *corev1.Node) ([]byte, error) {
	original := []byte("{}")
	if last := lastApplied(current); last != nil {
		var err error
		if original, err = appliedNode(last); err != nil {
			return nil, err
		}
	}
	modified, err := appliedNode(want)
	if err != nil {
		return nil, err
	}
	currentJSON, err := json.Marshal(current)
	if err != nil {
		return nil, fmt.Errorf("marshal current node: %w", err)
	}
	patch, err := strategicpatch.CreateThreeWayMergePatch(original, modified, currentJSON, nodePatchMeta, true)
	if err != nil {
		return nil, fmt.Errorf("create node status patch: %w", err)
	}

	// A patch can hold list order directives alone; it is empty when
	// applying it changes nothing.
	result, err := strategicpatch.StrategicMergePatchUsingLookupPatchMeta(currentJSON, patch, nodePatchMeta)
	if err != nil {
		return nil, fmt.Errorf("apply node status patch: %w", err)
	}
	var after corev1.Node
	if err := json.Unmarshal(result, &after); err != nil {
		return nil, fmt.Errorf("decode patched node: %w", err)
	}
	if equality.Semantic.DeepEqual(&after, current) {
		return nil, nil
	}

	var fields map[string]any
	if err := json.Unmarshal(patch, &fields); err != nil {
		return nil, fmt.Errorf("decode node status patch: %w", err)
	}
	meta, _ := fields["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		fields["metadata"] = meta
	}
	meta["resourceVersion"] = current.ResourceVersion
	return json.Marshal(fields)
}

// appliedNode is the JSON of the part of a Node that nodelet's status patch
// owns: the status, and the LastAppliedAnnotation recording it. Both travel
// in one patch of the nodes/status subresource, which keeps metadata
// changes: for Nodes the API server resets only the spec on a status write.
func appliedNode(status *corev1.NodeStatus) ([]byte, error) {
	record, err := json.Marshal(status)
	if err != nil {
		return nil, fmt.Errorf("marshal node status: %w", err)
	}
	data, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": map[string]string{LastAppliedAnnotation: string(record)}},
		"status":   status,
	})
	if err != nil {
		return nil, fmt.Errorf("marshal node status: %w", err)
	}
	return data, nil
}

// lastApplied is the status recorded in node's LastAppliedAnnotation, or
// nil when there is none or it cannot be read (nodelet then behaves as if it
// had never written the status).
func lastApplied(node *corev1.Node) *corev1.NodeStatus {
	record, ok := node.Annotations[LastAppliedAnnotation]
	if !ok {
		return nil
	}
	var status corev1.NodeStatus
	if err := json.Unmarshal([]byte(record), &status); err != nil {
		return nil
	}
	return &status
}
