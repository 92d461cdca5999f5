package node

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"

	"github.com/nodelet/nodelet/internal/fuzzcheck"
)

// FuzzStatusPatch builds the three-way status patch from a Node the
// fuzzer makes (what nodelet last applied, recorded or not, garbled or
// not; what others wrote since) to a status the fuzzer makes as a provider
// would (conditions, resources and addresses unique by name). Applied to
// the Node as the API server applies it, the patch gives each condition,
// resource, address and node info field of the wanted status; removes what
// nodelet applied before and no longer wants; keeps what others wrote;
// records the wanted status; touches nothing but the status and that
// record; is guarded by the Node's resourceVersion; and leaves nothing to
// patch again.
func FuzzStatusPatch(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("\x01\x01\x01\x00\x01\x01\x01\x00\x01\x01\x00\x01\x01\x01\x00\x01\x01\x02\x01\x00"))
	f.Add([]byte("\x03\xff\xff\xff\x02\x01\x01\x01\x01\x01\x01\x03\x03\x03\x00\xff\x02\x01\x02\x03\x04\x05\x06"))
	f.Add([]byte("\x02\x07garbage\x01\x01\x01\x01\x02\x02\x02\x02\x02\x01\x01\x01\x01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c := fuzzcheck.NewChoices(data)
		mode := c.Intn(4)
		last := genStatus(c)
		record, err := json.Marshal(last)
		if err != nil {
			t.Fatal(err)
		}
		current := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{
				Name: "n", UID: "uid-1", ResourceVersion: "7",
				Labels:      map[string]string{"someone/label": "x"},
				Annotations: map[string]string{LastAppliedAnnotation: string(record), "someone/annotation": "y"},
			},
			Spec:   corev1.NodeSpec{PodCIDR: "10.0.0.0/24"},
			Status: *last.DeepCopy(),
		}
		lastKnown := true
		switch mode {
		case 0: // a Node nodelet never wrote, or whose record is gone
			delete(current.Annotations, LastAppliedAnnotation)
			current.Status = *genStatus(c)
			lastKnown = false
		case 1: // the record does not read
			current.Annotations[LastAppliedAnnotation] = c.String(16)
			lastKnown = lastApplied(current) != nil
			if lastKnown {
				last = lastApplied(current)
			}
		case 2: // others changed what nodelet wrote
			current.Status = *genStatus(c)
		}
		// Others' writes since.
		if c.Bool() {
			current.Status.Conditions = append(current.Status.Conditions, corev1.NodeCondition{Type: "example.com/Theirs", Status: corev1.ConditionTrue, Reason: c.Word("ab", 4)})
		}
		if c.Bool() {
			current.Status.VolumesInUse = []corev1.UniqueVolumeName{"kubernetes.io/csi/d^v"}
		}
		if c.Bool() {
			if current.Status.Capacity == nil {
				current.Status.Capacity = corev1.ResourceList{}
			}
			current.Status.Capacity["example.com/theirs"] = resource.MustParse("3")
		}
		want := genStatus(c)

		patch, err := statusPatch(want, current)
		if err != nil {
			t.Fatalf("statusPatch: %v", err)
		}
		after := current.DeepCopy()
		if patch != nil {
			var guard struct {
				Metadata struct {
					ResourceVersion string `json:"resourceVersion"`
				} `json:"metadata"`
			}
			if err := json.Unmarshal(patch, &guard); err != nil || guard.Metadata.ResourceVersion != "7" {
				t.Fatalf("patch %s is not guarded by resourceVersion 7 (%v)", patch, err)
			}
			after = applyNodePatch(t, current, patch)
		}
		if rec := lastApplied(after); rec == nil || !equality.Semantic.DeepEqual(rec, want) {
			t.Errorf("after the patch the record is %q, want the status written", after.Annotations[LastAppliedAnnotation])
		}
		if !reflect.DeepEqual(after.Labels, current.Labels) || after.Annotations["someone/annotation"] != "y" || !equality.Semantic.DeepEqual(after.Spec, current.Spec) {
			t.Errorf("patch %s changed what is not nodelet's: %+v %+v", patch, after.ObjectMeta, after.Spec)
		}

		checkConditions(t, current, last, lastKnown, want, after)
		checkResources(t, "capacity", current.Status.Capacity, last.Capacity, lastKnown, want.Capacity, after.Status.Capacity)
		checkResources(t, "allocatable", current.Status.Allocatable, last.Allocatable, lastKnown, want.Allocatable, after.Status.Allocatable)
		checkAddresses(t, last, lastKnown, want, after)
		if w, a := want.NodeInfo, after.Status.NodeInfo; w.KubeletVersion != "" && w.KubeletVersion != a.KubeletVersion || w.BootID != "" && w.BootID != a.BootID {
			t.Errorf("nodeInfo %+v after the patch, want %+v", a, w)
		}
		if got := after.Status.DaemonEndpoints.KubeletEndpoint.Port; want.DaemonEndpoints.KubeletEndpoint.Port != 0 && got != want.DaemonEndpoints.KubeletEndpoint.Port {
			t.Errorf("kubelet port %d after the patch, want %d", got, want.DaemonEndpoints.KubeletEndpoint.Port)
		}
		if !reflect.DeepEqual(after.Status.VolumesInUse, current.Status.VolumesInUse) {
			t.Errorf("volumesInUse %v after the patch, want %v kept", after.Status.VolumesInUse, current.Status.VolumesInUse)
		}
		if again, err := statusPatch(want, after); err != nil || again != nil {
			t.Errorf("after patch %s, patching again gives %s, %v", patch, again, err)
		}
	})
}

// genStatus makes a node status as a provider would: conditions,
// resources and addresses each unique by name.
func genStatus(c *fuzzcheck.Choices) *corev1.NodeStatus {
	s := &corev1.NodeStatus{}
	hour := func() metav1.Time {
		return metav1.NewTime(time.Date(2026, 1, 1, c.Intn(24), 0, 0, 0, time.UTC))
	}
	for _, typ := range []corev1.NodeConditionType{corev1.NodeReady, corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure, "ConfigOK", "example.com/Ours"} {
		if !c.Bool() {
			continue
		}
		s.Conditions = append(s.Conditions, corev1.NodeCondition{
			Type:   typ,
			Status: corev1.ConditionStatus(c.Pick("True", "False", "Unknown")),
			Reason: c.Word("ab", 3), Message: c.Word("a b", 5),
			LastHeartbeatTime: hour(), LastTransitionTime: hour(),
		})
	}
	resources := func() corev1.ResourceList {
		var l corev1.ResourceList
		for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourcePods, "example.com/gpu"} {
			if c.Bool() {
				if l == nil {
					l = corev1.ResourceList{}
				}
				l[name] = resource.MustParse(c.Pick("1", "2", "110", "4Gi", "500m", "0"))
			}
		}
		return l
	}
	s.Capacity, s.Allocatable = resources(), resources()
	for _, typ := range []corev1.NodeAddressType{corev1.NodeInternalIP, corev1.NodeExternalIP, corev1.NodeHostName, corev1.NodeInternalDNS} {
		if c.Bool() {
			s.Addresses = append(s.Addresses, corev1.NodeAddress{Type: typ, Address: c.Pick("10.0.0.1", "fd00::1", "n", "n.example")})
		}
	}
	if c.Bool() {
		// Order matters to no one, but providers may list them so.
		for i, j := 0, len(s.Addresses)-1; i < j; i, j = i+1, j-1 {
			s.Addresses[i], s.Addresses[j] = s.Addresses[j], s.Addresses[i]
		}
	}
	s.NodeInfo.KubeletVersion = c.Pick("", "v1.36.3", "v1.35.0")
	s.NodeInfo.BootID = c.Word("0123", 4)
	s.DaemonEndpoints.KubeletEndpoint.Port = int32(c.Intn(2) * 10250)
	return s
}

// applyNodePatch applies a status patch to a node as the API server does.
func applyNodePatch(t *testing.T, current *corev1.Node, patch []byte) *corev1.Node {
	t.Helper()
	data, err := json.Marshal(current)
	if err != nil {
		t.Fatal(err)
	}
	out, err := strategicpatch.StrategicMergePatch(data, patch, corev1.Node{})
	if err != nil {
		t.Fatalf("apply patch %s: %v", patch, err)
	}
	n := &corev1.Node{}
	if err := json.Unmarshal(out, n); err != nil {
		t.Fatalf("patched node %s: %v", out, err)
	}
	return n
}

func checkConditions(t *testing.T, current *corev1.Node, last *corev1.NodeStatus, lastKnown bool, want *corev1.NodeStatus, after *corev1.Node) {
	t.Helper()
	byType := func(conds []corev1.NodeCondition) map[corev1.NodeConditionType][]corev1.NodeCondition {
		m := map[corev1.NodeConditionType][]corev1.NodeCondition{}
		for _, c := range conds {
			m[c.Type] = append(m[c.Type], c)
		}
		return m
	}
	got, wanted, before, applied := byType(after.Status.Conditions), byType(want.Conditions), byType(current.Status.Conditions), byType(last.Conditions)
	for typ, w := range wanted {
		if g := got[typ]; len(g) != 1 || !equality.Semantic.DeepEqual(g[0], w[0]) {
			t.Errorf("condition %s after the patch is %+v, want %+v", typ, g, w[0])
		}
	}
	for typ, b := range before {
		if _, ok := wanted[typ]; ok {
			continue
		}
		_, ours := applied[typ]
		switch g := got[typ]; {
		case ours && lastKnown && len(g) > 0:
			t.Errorf("condition %s, which nodelet applied and no longer wants, is still there: %+v", typ, g)
		case (!ours || !lastKnown) && !equality.Semantic.DeepEqual(g, b):
			t.Errorf("condition %s, which others wrote, is %+v after the patch, want %+v kept", typ, g, b)
		}
	}
}

func checkResources(t *testing.T, what string, current, last corev1.ResourceList, lastKnown bool, want, after corev1.ResourceList) {
	t.Helper()
	for name, q := range want {
		if got, ok := after[name]; !ok || got.Cmp(q) != 0 {
			t.Errorf("%s %s after the patch is %v, want %v", what, name, after[name], q)
		}
	}
	for name, q := range after {
		if _, ok := want[name]; ok {
			continue
		}
		before, theirs := current[name]
		_, ours := last[name]
		if !theirs || ours && lastKnown || before.Cmp(q) != 0 {
			t.Errorf("%s %s=%v after the patch, neither wanted nor kept from others", what, name, q.String())
		}
	}
}

func checkAddresses(t *testing.T, last *corev1.NodeStatus, lastKnown bool, want *corev1.NodeStatus, after *corev1.Node) {
	t.Helper()
	got := map[corev1.NodeAddressType][]string{}
	for _, a := range after.Status.Addresses {
		got[a.Type] = append(got[a.Type], a.Address)
	}
	wanted := map[corev1.NodeAddressType]bool{}
	for _, a := range want.Addresses {
		wanted[a.Type] = true
		if g := got[a.Type]; len(g) != 1 || g[0] != a.Address {
			t.Errorf("addresses of type %s after the patch are %v, want [%s]", a.Type, g, a.Address)
		}
	}
	if !lastKnown {
		return
	}
	for _, a := range last.Addresses {
		if !wanted[a.Type] && len(got[a.Type]) > 0 {
			t.Errorf("address type %s, which nodelet applied and no longer wants, is still there: %v", a.Type, got[a.Type])
		}
	}
}
