package node

import (
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
)

// LastAppliedAnnotation holds, as JSON, the node status nodelet last wrote.
// It is the "original" of the three-way patch: what nodelet wrote before and
// no longer wants is removed, and what others wrote is left alone.
const LastAppliedAnnotation = "nodelet.io/last-applied-node-status"

var nodePatchMeta = mustPatchMeta()

func mustPatchMeta() strategicpatch.LookupPatchMeta {
	meta, err := strategicpatch.NewPatchMetaFromStruct(&corev1.Node{})
	if err != nil {
		panic(fmt.Sprintf("node patch metadata: %v", err))
	}
	return meta
}

// statusPatch returns the strategic merge patch that takes current to the
// status want, recording want in LastAppliedAnnotation, or nil when there
// is nothing to write. The patch carries current's resourceVersion, so it
// fails with a Conflict rather than land on a newer node.
func statusPatch(want *corev1.NodeStatus, current *corev1.Node) ([]byte, error) {
	applied, err := json.Marshal(want)
	if err != nil {
		return nil, fmt.Errorf("marshal node status: %w", err)
	}
	original := []byte("{}")
	if last, ok := current.Annotations[LastAppliedAnnotation]; ok {
		var lastStatus corev1.NodeStatus
		if json.Unmarshal([]byte(last), &lastStatus) == nil {
			if original, err = json.Marshal(map[string]any{"status": lastStatus}); err != nil {
				return nil, fmt.Errorf("marshal last applied node status: %w", err)
			}
		}
	}
	modified, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": map[string]string{LastAppliedAnnotation: string(applied)}},
		"status":   want,
	})
	if err != nil {
		return nil, fmt.Errorf("marshal node status: %w", err)
	}
	currentJSON, err := json.Marshal(current)
	if err != nil {
		return nil, fmt.Errorf("marshal current node: %w", err)
	}
	patch, err := strategicpatch.CreateThreeWayMergePatch(original, modified, currentJSON, nodePatchMeta, true)
	if err != nil {
		return nil, fmt.Errorf("create node status patch: %w", err)
	}
	// The patch may hold only list-order directives; what matters is
	// whether applying it changes anything.
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
	var m map[string]any
	if err := json.Unmarshal(patch, &m); err != nil {
		return nil, fmt.Errorf("decode node status patch: %w", err)
	}
	md, _ := m["metadata"].(map[string]any)
	if md == nil {
		md = map[string]any{}
		m["metadata"] = md
	}
	md["resourceVersion"] = current.ResourceVersion
	return json.Marshal(m)
}
