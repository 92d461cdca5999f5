package node

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
// The conditions nodelet wants are its own whole: their original is as
// current has them, so that a field someone added to one, or that a lost
// record hid, is removed too. The patch records want in the annotation, and
// carries current's resourceVersion so that it fails with a Conflict on a
// newer Node.
func statusPatch(want *corev1.NodeStatus, current *corev1.Node) ([]byte, error) {
	base := lastApplied(current)
	if patch, ok, err := heartbeatPatch(want, current, base); ok || err != nil {
		return patch, err
	}
	return threeWayStatusPatch(want, current, base)
}

// threeWayStatusPatch is statusPatch computed in full, from the applied
// status base (nil when none is recorded).
func threeWayStatusPatch(want *corev1.NodeStatus, current *corev1.Node, base *corev1.NodeStatus) ([]byte, error) {
	if base == nil {
		base = &corev1.NodeStatus{}
	}
	base.Conditions = ownConditions(base.Conditions, current.Status.Conditions, want.Conditions)
	original, err := appliedNode(base)
	if err != nil {
		return nil, err
	}
	modified, err := appliedNode(want)
	if err != nil {
		return nil, err
	}
	if modified, err = keepEmptied(original, modified); err != nil {
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

// heartbeatPatch is the patch of a periodic report, when that is all it
// is: the status nodelet wants, the one it recorded (applied) and the
// Node's current one are the same apart from condition times, the
// conditions' transition times are current's and only heartbeats moved.
// The three-way patch would then set the heartbeats and the record, and
// so does this one, without the JSON round trips of computing it (most
// of a report's cost, every node every report interval). ok is false when
// it does not apply.
func heartbeatPatch(want *corev1.NodeStatus, current *corev1.Node, applied *corev1.NodeStatus) (patch []byte, ok bool, err error) {
	if applied == nil || len(want.Conditions) != len(current.Status.Conditions) {
		return nil, false, nil
	}
	sum := statusSum(want)
	if sum == 0 || statusSum(applied) != sum || statusSum(&current.Status) != sum {
		return nil, false, nil
	}
	type heartbeat struct {
		Type              corev1.NodeConditionType `json:"type"`
		LastHeartbeatTime metav1.Time              `json:"lastHeartbeatTime"`
	}
	beats := make([]heartbeat, len(want.Conditions))
	moved := false
	for i, c := range want.Conditions {
		// The same types in the same order, as the sums agree; times
		// compared as the API keeps them, to the second.
		cur := current.Status.Conditions[i]
		if !sameSecond(cur.LastTransitionTime, c.LastTransitionTime) {
			return nil, false, nil
		}
		moved = moved || !sameSecond(cur.LastHeartbeatTime, c.LastHeartbeatTime)
		beats[i] = heartbeat{Type: c.Type, LastHeartbeatTime: c.LastHeartbeatTime}
	}
	if !moved {
		return nil, false, nil
	}
	record, err := appliedRecord(want)
	if err != nil {
		return nil, false, err
	}
	patch, err = json.Marshal(map[string]any{
		"metadata": map[string]any{
			"annotations":     map[string]string{LastAppliedAnnotation: record},
			"resourceVersion": current.ResourceVersion,
		},
		"status": map[string]any{"conditions": beats},
	})
	if err != nil {
		return nil, false, fmt.Errorf("marshal node status patch: %w", err)
	}
	return patch, true, nil
}

func sameSecond(a, b metav1.Time) bool {
	return a.Time.Truncate(time.Second).Equal(b.Time.Truncate(time.Second))
}

// appliedNode is the JSON of the part of a Node that nodelet's status patch
// owns: the status, and the LastAppliedAnnotation recording it. Both travel
// in one patch of the nodes/status subresource, which keeps metadata
// changes: for Nodes the API server resets only the spec on a status write.
func appliedNode(status *corev1.NodeStatus) ([]byte, error) {
	record, err := appliedRecord(status)
	if err != nil {
		return nil, err
	}
	data, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": map[string]string{LastAppliedAnnotation: record}},
		"status":   status,
	})
	if err != nil {
		return nil, fmt.Errorf("marshal node status: %w", err)
	}
	return data, nil
}

// ownConditions is the original of the conditions: those applied last
// that nodelet no longer wants, and those it wants as current has them.
func ownConditions(applied, current, wanted []corev1.NodeCondition) []corev1.NodeCondition {
	wants := map[corev1.NodeConditionType]bool{}
	for _, c := range wanted {
		wants[c.Type] = true
	}
	var out []corev1.NodeCondition
	for _, c := range applied {
		if !wants[c.Type] {
			out = append(out, c)
		}
	}
	for _, c := range current {
		if wants[c.Type] {
			out = append(out, c)
			delete(wants, c.Type) // the first of a type is the one a patch finds
		}
	}
	return out
}

// keepEmptied writes into modified, empty, each status list or map that
// original has and modified leaves out. A three-way patch removes a field
// the original has and the modified lacks as a whole, with what others
// wrote in it (their conditions, their extended resources); an empty one
// makes it remove only the entries nodelet applied.
func keepEmptied(original, modified []byte) ([]byte, error) {
	var orig struct {
		Status map[string]json.RawMessage `json:"status"`
	}
	if err := json.Unmarshal(original, &orig); err != nil {
		return nil, fmt.Errorf("decode applied node status: %w", err)
	}
	var fields map[string]any
	dec := json.NewDecoder(bytes.NewReader(modified))
	dec.UseNumber() // int64s stay exact
	if err := dec.Decode(&fields); err != nil {
		return nil, fmt.Errorf("decode node status: %w", err)
	}
	status, ok := fields["status"].(map[string]any)
	if !ok {
		return modified, nil
	}
	changed := false
	for key, value := range orig.Status {
		if _, ok := status[key]; ok {
			continue
		}
		switch {
		case bytes.HasPrefix(value, []byte("[")):
			status[key], changed = []any{}, true
		case bytes.HasPrefix(value, []byte("{")):
			status[key], changed = map[string]any{}, true
		}
	}
	if !changed {
		return modified, nil
	}
	return json.Marshal(fields)
}

// appliedRecord is status as LastAppliedAnnotation records it (lastApplied
// reads it back).
func appliedRecord(status *corev1.NodeStatus) (string, error) {
	record, err := json.Marshal(status)
	if err != nil {
		return "", fmt.Errorf("marshal node status: %w", err)
	}
	return string(record), nil
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
