package node

import (
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
)

func cond(t corev1.NodeConditionType, s corev1.ConditionStatus) corev1.NodeCondition {
	return corev1.NodeCondition{Type: t, Status: s, Reason: string(t) + string(s)}
}

// applied returns current as the API would have it after nodelet wrote
// status: the status and its last-applied annotation.
func applied(t *testing.T, status corev1.NodeStatus, extra ...corev1.NodeCondition) *corev1.Node {
	t.Helper()
	data, err := json.Marshal(status)
	if err != nil {
		t.Fatal(err)
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: "n", ResourceVersion: "7",
		Annotations: map[string]string{LastAppliedAnnotation: string(data)},
	}}
	n.Status = *status.DeepCopy()
	n.Status.Conditions = append(n.Status.Conditions, extra...)
	return n
}

// patched applies a status patch to current the way the API server does.
func patched(t *testing.T, current *corev1.Node, patch []byte) *corev1.Node {
	t.Helper()
	cur, err := json.Marshal(current)
	if err != nil {
		t.Fatal(err)
	}
	out, err := strategicpatch.StrategicMergePatch(cur, patch, corev1.Node{})
	if err != nil {
		t.Fatal(err)
	}
	n := &corev1.Node{}
	if err := json.Unmarshal(out, n); err != nil {
		t.Fatal(err)
	}
	return n
}

func conditionTypes(n *corev1.Node) map[corev1.NodeConditionType]corev1.ConditionStatus {
	out := map[corev1.NodeConditionType]corev1.ConditionStatus{}
	for _, c := range n.Status.Conditions {
		out[c.Type] = c.Status
	}
	return out
}

func TestStatusPatch(t *testing.T) {
	ready := cond(corev1.NodeReady, corev1.ConditionTrue)
	memory := cond(corev1.NodeMemoryPressure, corev1.ConditionFalse)
	other := cond("ExampleCondition", corev1.ConditionTrue)
	last := corev1.NodeStatus{Conditions: []corev1.NodeCondition{ready, memory}}

	tests := []struct {
		name    string
		current *corev1.Node
		want    corev1.NodeStatus
		expect  map[corev1.NodeConditionType]corev1.ConditionStatus // nil: no patch
	}{
		{
			name:    "another writer's condition survives",
			current: applied(t, last, other),
			want:    corev1.NodeStatus{Conditions: []corev1.NodeCondition{cond(corev1.NodeReady, corev1.ConditionFalse), memory}},
			expect:  map[corev1.NodeConditionType]corev1.ConditionStatus{corev1.NodeReady: "False", corev1.NodeMemoryPressure: "False", "ExampleCondition": "True"},
		},
		{
			name:    "a condition nodelet no longer wants is removed",
			current: applied(t, last, other),
			want:    corev1.NodeStatus{Conditions: []corev1.NodeCondition{ready}},
			expect:  map[corev1.NodeConditionType]corev1.ConditionStatus{corev1.NodeReady: "True", "ExampleCondition": "True"},
		},
		{
			name:    "an unchanged status gives no patch",
			current: applied(t, last, other),
			want:    last,
		},
		{
			name:    "a new node without annotation gets everything",
			current: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", ResourceVersion: "1"}},
			want:    last,
			expect:  map[corev1.NodeConditionType]corev1.ConditionStatus{corev1.NodeReady: "True", corev1.NodeMemoryPressure: "False"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			patch, err := statusPatch(&tt.want, tt.current)
			if err != nil {
				t.Fatal(err)
			}
			if tt.expect == nil {
				if patch != nil {
					t.Fatalf("patch = %s, want none", patch)
				}
				return
			}
			if patch == nil {
				t.Fatal("no patch, want one")
			}
			var m struct {
				Metadata struct {
					ResourceVersion string            `json:"resourceVersion"`
					Annotations     map[string]string `json:"annotations"`
				} `json:"metadata"`
			}
			if err := json.Unmarshal(patch, &m); err != nil {
				t.Fatal(err)
			}
			if m.Metadata.ResourceVersion != tt.current.ResourceVersion {
				t.Errorf("patch resourceVersion = %q, want %q (never write from a stale base)", m.Metadata.ResourceVersion, tt.current.ResourceVersion)
			}
			got := patched(t, tt.current, patch)
			if gotTypes := conditionTypes(got); len(gotTypes) != len(tt.expect) {
				t.Errorf("conditions after patch = %v, want %v", gotTypes, tt.expect)
			} else {
				for k, v := range tt.expect {
					if gotTypes[k] != v {
						t.Errorf("conditions after patch = %v, want %v", gotTypes, tt.expect)
					}
				}
			}
			var rec corev1.NodeStatus
			if err := json.Unmarshal([]byte(got.Annotations[LastAppliedAnnotation]), &rec); err != nil || len(rec.Conditions) != len(tt.want.Conditions) {
				t.Errorf("last-applied annotation = %q, want the status written", got.Annotations[LastAppliedAnnotation])
			}
		})
	}
}

func TestSetConditionTimes(t *testing.T) {
	past := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	previous := []corev1.NodeCondition{
		{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastTransitionTime: past, LastHeartbeatTime: past},
		{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, LastTransitionTime: past, LastHeartbeatTime: past},
	}
	status := &corev1.NodeStatus{Conditions: []corev1.NodeCondition{
		{Type: corev1.NodeReady, Status: corev1.ConditionTrue},
		{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionTrue},
		{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse},
	}}
	setConditionTimes(status, previous, now)
	for _, c := range status.Conditions {
		if !c.LastHeartbeatTime.Equal(&now) {
			t.Errorf("%s heartbeat = %v, want now", c.Type, c.LastHeartbeatTime)
		}
	}
	wantTransition := map[corev1.NodeConditionType]metav1.Time{
		corev1.NodeReady:          past, // unchanged
		corev1.NodeMemoryPressure: now,  // changed
		corev1.NodeDiskPressure:   now,  // new
	}
	for _, c := range status.Conditions {
		w := wantTransition[c.Type]
		if !c.LastTransitionTime.Equal(&w) {
			t.Errorf("%s transition = %v, want %v", c.Type, c.LastTransitionTime, w)
		}
	}
}

func TestSetReady(t *testing.T) {
	s := &corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}}}
	setReady(s, nil)
	if s.Conditions[0].Reason != "KubeletReady" {
		t.Errorf("a passing ping changed the provider's Ready: %+v", s.Conditions[0])
	}
	setReady(s, errTest)
	if c := s.Conditions[0]; c.Status != corev1.ConditionFalse || c.Reason != "ProviderPingFailed" {
		t.Errorf("a failing ping left Ready %+v", c)
	}
	empty := &corev1.NodeStatus{}
	setReady(empty, nil)
	if len(empty.Conditions) != 1 || empty.Conditions[0].Status != corev1.ConditionTrue {
		t.Errorf("no provider Ready: got %+v, want nodelet's Ready True", empty.Conditions)
	}
}
