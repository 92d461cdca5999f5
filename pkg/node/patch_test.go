package node

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
)

var (
	hour1 = metav1.NewTime(time.Date(2026, 1, 1, 1, 0, 0, 0, time.UTC))
	hour2 = metav1.NewTime(time.Date(2026, 1, 1, 2, 0, 0, 0, time.UTC))
)

func cond(t corev1.NodeConditionType, s corev1.ConditionStatus, at metav1.Time) corev1.NodeCondition {
	return corev1.NodeCondition{Type: t, Status: s, Reason: string(t) + string(s), LastHeartbeatTime: at, LastTransitionTime: hour1}
}

// written is a Node as the API holds it after nodelet wrote status: the
// status with its record in the annotation, plus what others wrote.
func written(t *testing.T, status corev1.NodeStatus, others ...corev1.NodeCondition) *corev1.Node {
	t.Helper()
	record, err := json.Marshal(status)
	if err != nil {
		t.Fatal(err)
	}
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: "n", UID: "uid-1", ResourceVersion: "7",
			Labels:      map[string]string{"someone/label": "x"},
			Annotations: map[string]string{LastAppliedAnnotation: string(record), "someone/annotation": "y"},
		},
		Spec:   corev1.NodeSpec{PodCIDR: "10.0.0.0/24", Taints: []corev1.Taint{{Key: "someone/taint", Effect: corev1.TaintEffectNoSchedule}}},
		Status: *status.DeepCopy(),
	}
	n.Status.Conditions = append(n.Status.Conditions, others...)
	return n
}

// applyPatch applies a status patch to current the way the API server does.
func applyPatch(t *testing.T, current *corev1.Node, patch []byte) *corev1.Node {
	t.Helper()
	data, err := json.Marshal(current)
	if err != nil {
		t.Fatal(err)
	}
	out, err := strategicpatch.StrategicMergePatch(data, patch, corev1.Node{})
	if err != nil {
		t.Fatal(err)
	}
	n := &corev1.Node{}
	if err := json.Unmarshal(out, n); err != nil {
		t.Fatal(err)
	}
	return n
}

func conditionStatuses(n *corev1.Node) map[corev1.NodeConditionType]corev1.ConditionStatus {
	out := map[corev1.NodeConditionType]corev1.ConditionStatus{}
	for _, c := range n.Status.Conditions {
		out[c.Type] = c.Status
	}
	return out
}

func TestStatusPatch(t *testing.T) {
	ready := cond(corev1.NodeReady, corev1.ConditionTrue, hour1)
	memory := cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, hour1)
	others := cond("example.com/Other", corev1.ConditionTrue, hour1)
	last := corev1.NodeStatus{
		Conditions: []corev1.NodeCondition{ready, memory},
		Capacity:   corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110")},
	}
	heartbeat := *last.DeepCopy()
	for i := range heartbeat.Conditions {
		heartbeat.Conditions[i].LastHeartbeatTime = hour2
	}
	notReady := *last.DeepCopy()
	notReady.Conditions[0] = cond(corev1.NodeReady, corev1.ConditionFalse, hour2)
	onlyReady := corev1.NodeStatus{Conditions: []corev1.NodeCondition{ready}, Capacity: last.Capacity}
	withVolumes := written(t, last, others)
	withVolumes.Status.VolumesInUse = []corev1.UniqueVolumeName{"kubernetes.io/csi/x^vol"}

	tests := []struct {
		name    string
		current *corev1.Node
		want    corev1.NodeStatus
		// expect are the condition statuses after the patch; nil: no patch.
		expect map[corev1.NodeConditionType]corev1.ConditionStatus
	}{{
		name:    "unchanged status gives no patch",
		current: written(t, last, others),
		want:    last,
	}, {
		name:    "another writer's condition survives a change",
		current: written(t, last, others),
		want:    notReady,
		expect:  map[corev1.NodeConditionType]corev1.ConditionStatus{corev1.NodeReady: "False", corev1.NodeMemoryPressure: "False", "example.com/Other": "True"},
	}, {
		name:    "a condition nodelet applied and no longer wants is removed",
		current: written(t, last, others),
		want:    onlyReady,
		expect:  map[corev1.NodeConditionType]corev1.ConditionStatus{corev1.NodeReady: "True", "example.com/Other": "True"},
	}, {
		name:    "a new heartbeat is written",
		current: written(t, last),
		want:    heartbeat,
		expect:  map[corev1.NodeConditionType]corev1.ConditionStatus{corev1.NodeReady: "True", corev1.NodeMemoryPressure: "False"},
	}, {
		name:    "another writer's status field survives",
		current: withVolumes,
		want:    notReady,
		expect:  map[corev1.NodeConditionType]corev1.ConditionStatus{corev1.NodeReady: "False", corev1.NodeMemoryPressure: "False", "example.com/Other": "True"},
	}, {
		name: "a node without the annotation keeps others' conditions",
		current: func() *corev1.Node {
			n := written(t, last, others)
			delete(n.Annotations, LastAppliedAnnotation)
			return n
		}(),
		want:   onlyReady,
		expect: map[corev1.NodeConditionType]corev1.ConditionStatus{corev1.NodeReady: "True", corev1.NodeMemoryPressure: "False", "example.com/Other": "True"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.current.DeepCopy()
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

			var fields struct {
				Metadata struct {
					ResourceVersion string            `json:"resourceVersion"`
					Labels          map[string]string `json:"labels"`
				} `json:"metadata"`
				Spec *json.RawMessage `json:"spec"`
			}
			if err := json.Unmarshal(patch, &fields); err != nil {
				t.Fatal(err)
			}
			if fields.Metadata.ResourceVersion != "7" {
				t.Errorf("patch resourceVersion = %q, want the current node's 7", fields.Metadata.ResourceVersion)
			}
			if fields.Spec != nil || fields.Metadata.Labels != nil {
				t.Errorf("patch %s touches spec or labels", patch)
			}

			got := applyPatch(t, tt.current, patch)
			if statuses := conditionStatuses(got); len(statuses) != len(tt.expect) {
				t.Errorf("conditions after patch = %v, want %v", statuses, tt.expect)
			} else {
				for k, v := range tt.expect {
					if statuses[k] != v {
						t.Errorf("conditions after patch = %v, want %v", statuses, tt.expect)
						break
					}
				}
			}
			if rec := lastApplied(got); rec == nil || !equalStatus(rec, &tt.want) {
				t.Errorf("last-applied annotation = %q, want the status written", got.Annotations[LastAppliedAnnotation])
			}
			if got.Annotations["someone/annotation"] != "y" || got.Labels["someone/label"] != "x" ||
				got.Spec.PodCIDR != "10.0.0.0/24" || len(got.Spec.Taints) != 1 {
				t.Errorf("patch changed what others own: %+v", got.ObjectMeta)
			}
			if len(got.Status.VolumesInUse) != len(before.Status.VolumesInUse) {
				t.Errorf("volumesInUse = %v, want %v kept", got.Status.VolumesInUse, before.Status.VolumesInUse)
			}
			if again, err := statusPatch(&tt.want, got); err != nil || again != nil {
				t.Errorf("second patch = %s, %v; want none once applied", again, err)
			}
		})
	}
}

func equalStatus(a, b *corev1.NodeStatus) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

func TestAdoptPatch(t *testing.T) {
	ours := corev1.Taint{Key: "nodelet.io/dedicated", Value: "yes", Effect: corev1.TaintEffectNoSchedule}
	theirs := corev1.Taint{Key: "node.kubernetes.io/unreachable", Effect: corev1.TaintEffectNoExecute}
	desired := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"role": "sim"}, Annotations: map[string]string{"ours": "1"}},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{ours}},
	}
	tests := []struct {
		name    string
		current corev1.Node
		noPatch bool
	}{
		{name: "bare node gets ours", current: corev1.Node{}},
		{name: "others' metadata and taints are kept", current: corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"theirs": "a"}, Annotations: map[string]string{"theirs": "b"}},
			Spec:       corev1.NodeSpec{Taints: []corev1.Taint{theirs}},
		}},
		{name: "our label with another value is set", current: corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"role": "other"}, Annotations: map[string]string{"ours": "1"}},
			Spec:       corev1.NodeSpec{Taints: []corev1.Taint{ours}},
		}},
		{name: "nothing missing gives no patch", noPatch: true, current: corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"role": "sim", "theirs": "a"}, Annotations: map[string]string{"ours": "1"}},
			Spec:       corev1.NodeSpec{Taints: []corev1.Taint{theirs, {Key: ours.Key, Value: "other", Effect: ours.Effect}}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			current := tt.current.DeepCopy()
			current.Name, current.ResourceVersion = "n", "3"
			patch, err := adoptPatch(desired, current, false)
			if err != nil {
				t.Fatal(err)
			}
			if tt.noPatch {
				if patch != nil {
					t.Errorf("patch = %s, want none", patch)
				}
				return
			}
			if !strings.Contains(string(patch), `"resourceVersion":"3"`) {
				t.Errorf("patch %s lacks the current resourceVersion", patch)
			}
			got := applyPatch(t, current, patch)
			for k, v := range tt.current.Labels {
				if k != "role" && got.Labels[k] != v {
					t.Errorf("label %s lost: %v", k, got.Labels)
				}
			}
			for k, v := range tt.current.Annotations {
				if got.Annotations[k] != v {
					t.Errorf("annotation %s lost: %v", k, got.Annotations)
				}
			}
			if got.Labels["role"] != "sim" || got.Annotations["ours"] != "1" {
				t.Errorf("ours not added: labels %v annotations %v", got.Labels, got.Annotations)
			}
			if !hasTaint(got.Spec.Taints, ours) || len(got.Spec.Taints) != len(tt.current.Spec.Taints)+boolToInt(!hasTaint(tt.current.Spec.Taints, ours)) {
				t.Errorf("taints = %v, want %v plus ours", got.Spec.Taints, tt.current.Spec.Taints)
			}
		})
	}
}

func boolToInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// An adopted node gets our pod ranges and provider ID only where it has
// none: the API lets them be set once, from empty, and never changed.
func TestAdoptPatchSetsSpecOnce(t *testing.T) {
	ours := corev1.NodeSpec{PodCIDR: "10.0.1.0/24", PodCIDRs: []string{"10.0.1.0/24"}, ProviderID: "nodelet://n"}
	theirs := corev1.NodeSpec{PodCIDR: "10.9.0.0/24", PodCIDRs: []string{"10.9.0.0/24"}, ProviderID: "aws:///zone/i-1"}
	tests := []struct {
		name    string
		desired corev1.NodeSpec
		current corev1.NodeSpec
		want    corev1.NodeSpec
		noPatch bool
	}{
		{name: "bare node gets ours", desired: ours, want: ours},
		{name: "podCIDR alone stands for podCIDRs", desired: corev1.NodeSpec{PodCIDR: "10.0.1.0/24"},
			want: corev1.NodeSpec{PodCIDR: "10.0.1.0/24", PodCIDRs: []string{"10.0.1.0/24"}}},
		{name: "ours already", desired: ours, current: ours, want: ours, noPatch: true},
		{name: "theirs is kept", desired: ours, current: theirs, want: theirs, noPatch: true},
		{name: "their provider ID is kept, our pod range added", desired: ours, current: corev1.NodeSpec{ProviderID: theirs.ProviderID},
			want: corev1.NodeSpec{PodCIDR: ours.PodCIDR, PodCIDRs: ours.PodCIDRs, ProviderID: theirs.ProviderID}},
		{name: "their pod range is kept, our provider ID added", desired: ours, current: corev1.NodeSpec{PodCIDR: theirs.PodCIDR, PodCIDRs: theirs.PodCIDRs},
			want: corev1.NodeSpec{PodCIDR: theirs.PodCIDR, PodCIDRs: theirs.PodCIDRs, ProviderID: ours.ProviderID}},
		{name: "nothing wanted", current: theirs, want: theirs, noPatch: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			desired := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Spec: tt.desired}
			current := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", ResourceVersion: "3"}, Spec: tt.current}
			patch, err := adoptPatch(desired, current, false)
			if err != nil {
				t.Fatal(err)
			}
			if tt.noPatch != (patch == nil) {
				t.Fatalf("patch = %s, want a patch: %v", patch, !tt.noPatch)
			}
			got := current
			if patch != nil {
				got = applyPatch(t, current, patch)
			}
			if !reflect.DeepEqual(got.Spec, tt.want) {
				t.Errorf("spec after adoption = %+v, want %+v", got.Spec, tt.want)
			}
		})
	}
}

// TestHeartbeatPatch checks the short cut of a periodic report: taken only
// when the heartbeats are all that moved, and then the same Node as the
// three-way patch gives.
func TestHeartbeatPatch(t *testing.T) {
	last := corev1.NodeStatus{
		Conditions: []corev1.NodeCondition{cond(corev1.NodeReady, corev1.ConditionTrue, hour1), cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, hour1)},
		Capacity:   corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110"), corev1.ResourceCPU: resource.MustParse("4")},
		Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}},
	}
	heartbeat := last.DeepCopy()
	for i := range heartbeat.Conditions {
		heartbeat.Conditions[i].LastHeartbeatTime = hour2
	}
	transitioned := written(t, last)
	transitioned.Status.Conditions[0].LastTransitionTime = hour2
	noRecord := written(t, last)
	delete(noRecord.Annotations, LastAppliedAnnotation)
	otherCapacity := written(t, last)
	otherCapacity.Status.Capacity["example.com/device"] = resource.MustParse("1")
	notReady := heartbeat.DeepCopy()
	notReady.Conditions[0].Status = corev1.ConditionFalse

	tests := []struct {
		name    string
		current *corev1.Node
		want    *corev1.NodeStatus
		taken   bool
	}{
		{"only the heartbeats moved", written(t, last), heartbeat, true},
		{"nothing moved", written(t, last), &last, false},
		{"a condition changed", written(t, last), notReady, false},
		{"another writer's condition", written(t, last, cond("example.com/Other", corev1.ConditionTrue, hour1)), heartbeat, false},
		{"another writer's capacity", otherCapacity, heartbeat, false},
		{"a transition time differs", transitioned, heartbeat, false},
		{"no record", noRecord, heartbeat, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			patch, taken, err := heartbeatPatch(tt.want, tt.current, lastApplied(tt.current))
			if err != nil || taken != tt.taken {
				t.Fatalf("heartbeatPatch taken = %v, %v; want %v", taken, err, tt.taken)
			}
			if !taken {
				return
			}
			full, err := threeWayStatusPatch(tt.want, tt.current, lastApplied(tt.current))
			if err != nil || full == nil {
				t.Fatalf("three-way patch = %s, %v", full, err)
			}
			got, want := applyPatch(t, tt.current, patch), applyPatch(t, tt.current, full)
			if !reflect.DeepEqual(got, want) {
				gotJSON, _ := json.Marshal(got)
				wantJSON, _ := json.Marshal(want)
				t.Errorf("short-cut patch %s gives\n%s\nthe three-way patch %s gives\n%s", patch, gotJSON, full, wantJSON)
			}
			if !strings.Contains(string(patch), `"resourceVersion":"7"`) {
				t.Errorf("patch %s does not carry the current resourceVersion", patch)
			}
		})
	}
}
