package stage

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kwokv1alpha1 "sigs.k8s.io/kwok/pkg/apis/v1alpha1"
)

func loadSet(t *testing.T, set string) Lifecycle {
	t.Helper()
	l, err := LoadLifecycle(filepath.Join("testdata", "kwok", set))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

var testEnv = &Env{
	Now:      time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
	NodeName: "node-0", NodeIPs: []string{"10.0.0.1"}, NodePort: 10250,
	PodIPs: []string{"10.1.0.7"}, Version: "v0.0.0-test",
}

// walkStep is one stage played in a walk, and the pod after it.
type walkStep struct {
	stage   string
	phase   string
	events  []string
	deleted bool
}

// walk plays l on pod as a player does: match, play, apply the status
// patches, again, until no stage matches, the object is deleted, or a
// stage changes nothing.
func walk(t *testing.T, l Lifecycle, kind string, obj any, max int) ([]walkStep, map[string]any) {
	t.Helper()
	o, err := NewObject(obj)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var out []walkStep
	for range max {
		s := l.Match(o, rng)
		if s == nil {
			break
		}
		actions, err := s.Next(o, testEnv)
		if err != nil {
			t.Fatal(err)
		}
		st := walkStep{stage: s.Name()}
		before, _ := o.JSON()
		data := before
		for _, a := range actions {
			switch {
			case a.Event != nil:
				st.events = append(st.events, a.Event.Reason)
			case a.Delete:
				st.deleted = true
			case a.Patch != nil:
				if data, err = Apply(data, kind, a.Patch); err != nil {
					t.Fatalf("stage %s: apply: %v", s.Name(), err)
				}
			}
		}
		if o, err = NewObject(data); err != nil {
			t.Fatal(err)
		}
		st.phase, _ = o.data["status"].(map[string]any)["phase"].(string)
		out = append(out, st)
		if st.deleted || string(before) == string(data) {
			break
		}
	}
	return out, o.data
}

func testPod(mutate ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-1"},
		Spec: corev1.PodSpec{
			NodeName:   "node-0",
			Containers: []corev1.Container{{Name: "c", Image: "img"}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
	for _, m := range mutate {
		m(p)
	}
	return p
}

func withDeletion(p *corev1.Pod) {
	p.DeletionTimestamp = &metav1.Time{Time: testEnv.Now.Add(30 * time.Second)}
}

func withJob(p *corev1.Pod) {
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "j", UID: "j"}}
}

func withInit(p *corev1.Pod) {
	p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "img"}}
}

func TestWalkKwokPodSets(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  string
		pod  *corev1.Pod
		want []walkStep
	}{{
		name: "fast: pending to running",
		set:  "pod/fast", pod: testPod(),
		want: []walkStep{{stage: "pod-ready", phase: "Running"}},
	}, {
		name: "fast: a job's pod completes",
		set:  "pod/fast", pod: testPod(withJob),
		want: []walkStep{{stage: "pod-ready", phase: "Running"}, {stage: "pod-complete", phase: "Succeeded"}},
	}, {
		name: "fast: deleted",
		set:  "pod/fast", pod: testPod(withDeletion),
		want: []walkStep{{stage: "pod-delete", phase: "Pending", deleted: true}},
	}, {
		name: "general: created, ready",
		set:  "pod/general", pod: testPod(),
		want: []walkStep{
			{stage: "pod-create", phase: "Pending", events: []string{"Created"}},
			{stage: "pod-ready", phase: "Running"},
		},
	}, {
		name: "general: init containers, then a job's pod completes",
		set:  "pod/general", pod: testPod(withInit, withJob),
		want: []walkStep{
			{stage: "pod-create", phase: "Pending", events: []string{"Created"}},
			{stage: "pod-init-container-running", phase: "Pending"},
			{stage: "pod-init-container-completed", phase: "Pending"},
			{stage: "pod-ready", phase: "Running"},
			{stage: "pod-complete", phase: "Succeeded"},
		},
	}, {
		name: "general: deleted without finalizers",
		set:  "pod/general", pod: testPod(withDeletion),
		want: []walkStep{{stage: "pod-delete", phase: "Pending", deleted: true}},
	}, {
		name: "general: deleted with a finalizer: no stage",
		set:  "pod/general", pod: testPod(withDeletion, func(p *corev1.Pod) { p.Finalizers = []string{"x"} }),
		want: nil,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, _ := walk(t, loadSet(t, tc.set), "Pod", tc.pod, 10)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(walkStep{})); diff != "" {
				t.Errorf("walk (-want +got):\n%s", diff)
			}
		})
	}
}

// The pod at the end of pod/general's walk is the one kwok reports: its
// containers' states, its conditions (merged by type) and its IPs.
func TestWalkKwokPodGeneralStatus(t *testing.T) {
	_, data := walk(t, loadSet(t, "pod/general"), "Pod", testPod(withInit), 10)
	b, _ := json.Marshal(data)
	var pod corev1.Pod
	if err := json.Unmarshal(b, &pod); err != nil {
		t.Fatal(err)
	}
	s := pod.Status
	if s.Phase != corev1.PodRunning || s.PodIP != "10.1.0.7" || s.HostIP != "10.0.0.1" {
		t.Errorf("phase %s podIP %s hostIP %s, want Running 10.1.0.7 10.0.0.1", s.Phase, s.PodIP, s.HostIP)
	}
	conds := map[corev1.PodConditionType]corev1.ConditionStatus{}
	for _, c := range s.Conditions {
		conds[c.Type] = c.Status
	}
	wantConds := map[corev1.PodConditionType]corev1.ConditionStatus{
		corev1.PodInitialized: corev1.ConditionTrue, corev1.PodReady: corev1.ConditionTrue, corev1.ContainersReady: corev1.ConditionTrue,
	}
	if diff := cmp.Diff(wantConds, conds); diff != "" {
		t.Errorf("conditions (-want +got):\n%s", diff)
	}
	if len(s.InitContainerStatuses) != 1 || s.InitContainerStatuses[0].State.Terminated == nil || s.InitContainerStatuses[0].State.Terminated.Reason != "Completed" {
		t.Errorf("init container statuses %+v, want one Completed", s.InitContainerStatuses)
	}
	if len(s.ContainerStatuses) != 1 || s.ContainerStatuses[0].State.Running == nil || !s.ContainerStatuses[0].Ready {
		t.Errorf("container statuses %+v, want one running and ready", s.ContainerStatuses)
	}
	if s.StartTime == nil || !s.StartTime.Time.Equal(testEnv.Now) {
		t.Errorf("start time %v, want %v", s.StartTime, testEnv.Now)
	}
}

func TestWalkKwokNodeFast(t *testing.T) {
	node := &corev1.Node{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{Name: "node-0"},
	}
	steps, data := walk(t, loadSet(t, "node/fast"), "Node", node, 5)
	if len(steps) != 1 || steps[0].stage != "node-initialize" || steps[0].phase != "Running" {
		t.Fatalf("steps %+v, want node-initialize once, Running", steps)
	}
	b, _ := json.Marshal(data)
	var n corev1.Node
	if err := json.Unmarshal(b, &n); err != nil {
		t.Fatal(err)
	}
	if len(n.Status.Conditions) != 5 || n.Status.DaemonEndpoints.KubeletEndpoint.Port != 10250 {
		t.Errorf("conditions %d, port %d; want 5, 10250", len(n.Status.Conditions), n.Status.DaemonEndpoints.KubeletEndpoint.Port)
	}
	want := []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}, {Type: corev1.NodeHostName, Address: "node-0"}}
	if diff := cmp.Diff(want, n.Status.Addresses); diff != "" {
		t.Errorf("addresses (-want +got):\n%s", diff)
	}
	if v := n.Status.NodeInfo.KubeletVersion; v != "kwok-v0.0.0-test" {
		t.Errorf("kubelet version %q", v)
	}
}

func mustStage(t *testing.T, y string) *Stage {
	t.Helper()
	stages, err := Decode([]byte(y))
	if err != nil || len(stages) != 1 {
		t.Fatalf("decode: %v (%d stages)", err, len(stages))
	}
	s, err := Compile(stages[0])
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestCompileErrors(t *testing.T) {
	for _, tc := range []struct {
		name, spec string
		want       []string // substrings of the error
	}{{
		name: "bad jq key",
		spec: `selector: {matchExpressions: [{key: '.status.[', operator: In, values: [x]}]}`,
		want: []string{`stage "bad"`, "spec.selector.matchExpressions[0]", `key ".status.["`},
	}, {
		name: "bad operator",
		spec: `selector: {matchExpressions: [{key: '.status.phase', operator: Equals, values: [x]}]}`,
		want: []string{`stage "bad"`, "spec.selector.matchExpressions[0]", `operator: "Equals"`},
	}, {
		name: "In without values",
		spec: `selector: {matchExpressions: [{key: '.status.phase', operator: In}]}`,
		want: []string{"spec.selector.matchExpressions[0]", "values: must not be empty"},
	}, {
		name: "cel that does not compile",
		spec: `selector: {matchExpressions: [{cel: {expression: 'self.status.phase =='}}]}`,
		want: []string{"spec.selector.matchExpressions[0]", "cel: expression", "Syntax error"},
	}, {
		name: "cel on a field a Pod does not have",
		spec: `selector: {}
  weightFrom: {cel: {expression: 'self.spec.noSuchField'}}`,
		want: []string{"spec.weightFrom", "cel: expression"},
	}, {
		name: "bad label",
		spec: `selector: {matchLabels: {"a b": x}}`,
		want: []string{"spec.selector.matchLabels"},
	}, {
		name: "negative duration",
		spec: `selector: {}
  delay: {durationMilliseconds: -1}`,
		want: []string{`stage "bad"`, "spec.delay.durationMilliseconds", "-1"},
	}, {
		name: "bad durationFrom",
		spec: `selector: {}
  delay: {durationFrom: {expressionFrom: '.metadata.annotations[}'}}`,
		want: []string{"spec.delay.durationFrom"},
	}, {
		name: "bad template",
		spec: `selector: {}
  next: {statusTemplate: '{{ .status.phase '}`,
		want: []string{`stage "bad"`, "spec.next (as steps)[0].statusTemplate"},
	}, {
		name: "unknown function",
		spec: `selector: {}
  next: {statusTemplate: '{{ Nope }}'}`,
		want: []string{"statusTemplate", `"Nope" not defined`},
	}, {
		name: "sprig's env is left out",
		spec: `selector: {}
  next: {statusTemplate: 'message: {{ env "HOME" }}'}`,
		want: []string{"statusTemplate", `"env" not defined`},
	}, {
		name: "bad event type",
		spec: `selector: {}
  next: {event: {type: Info, reason: R}}`,
		want: []string{"spec.next (as steps)[0].event.type", `"Info"`},
	}, {
		name: "two faults, both reported",
		spec: `selector: {matchExpressions: [{key: '.a', operator: Bad}]}
  weight: -2`,
		want: []string{"matchExpressions[0]", "spec.weight"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			y := "apiVersion: kwok.x-k8s.io/v1alpha1\nkind: Stage\nmetadata: {name: bad}\nspec:\n  resourceRef: {apiGroup: v1, kind: Pod}\n  " + tc.spec + "\n"
			stages, err := Decode([]byte(y))
			if err != nil {
				t.Fatal(err)
			}
			_, err = Compile(stages[0])
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	_, err := Decode([]byte("apiVersion: kwok.x-k8s.io/v1alpha1\nkind: Stage\nmetadata: {name: typo}\nspec: {resourceRef: {kind: Pod}, selectr: {}}\n"))
	if err == nil || !strings.Contains(err.Error(), `stage "typo"`) || !strings.Contains(err.Error(), "selectr") {
		t.Errorf("error %v, want one naming the stage and the unknown field", err)
	}
	// Other kinds in a kwok config file are skipped.
	stages, err := Decode([]byte("apiVersion: config.kwok.x-k8s.io/v1alpha1\nkind: KwokConfiguration\n---\n" + delayStage))
	if err != nil || len(stages) != 1 {
		t.Errorf("got %d stages, %v; want 1", len(stages), err)
	}
}

func TestLoadLifecycleNamesFile(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "bad.yaml")
	writeFile(t, f, "apiVersion: kwok.x-k8s.io/v1alpha1\nkind: Stage\nmetadata: {name: broken}\nspec:\n  resourceRef: {kind: Pod}\n  selector: {}\n  next: {statusTemplate: '{{ if }}'}\n")
	_, err := LoadLifecycle(dir)
	if err == nil || !strings.Contains(err.Error(), f) || !strings.Contains(err.Error(), `stage "broken"`) {
		t.Errorf("error %v, want one naming %s and the stage", err, f)
	}
}

const delayStage = `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: delayed}
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector: {}
  delay:
    durationMilliseconds: 1000
    durationFrom: {expressionFrom: '.metadata.annotations["delay"]'}
    jitterDurationMilliseconds: 5000
    jitterDurationFrom: {expressionFrom: '.metadata.deletionTimestamp'}
`

func TestDelay(t *testing.T) {
	s := mustStage(t, delayStage)
	now := testEnv.Now
	for _, tc := range []struct {
		name   string
		pod    *corev1.Pod
		lo, hi time.Duration
	}{
		{"fixed and jitter", testPod(), time.Second, 5 * time.Second},
		{"duration from annotation", testPod(func(p *corev1.Pod) { p.Annotations = map[string]string{"delay": "3s"} }), 3 * time.Second, 5 * time.Second},
		{"unparsable annotation: fixed", testPod(func(p *corev1.Pod) { p.Annotations = map[string]string{"delay": "soon"} }), time.Second, 5 * time.Second},
		{"jitter until deletion", testPod(withDeletion), time.Second, 30 * time.Second},
		{"jitter below duration: jitter alone", testPod(func(p *corev1.Pod) {
			p.DeletionTimestamp = &metav1.Time{Time: now.Add(-time.Second)}
		}), -time.Second, -time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := NewObject(tc.pod)
			if err != nil {
				t.Fatal(err)
			}
			lo, hi := s.DelayRange(o, now)
			if lo != tc.lo || hi != tc.hi {
				t.Errorf("range [%v, %v], want [%v, %v]", lo, hi, tc.lo, tc.hi)
			}
			rng := rand.New(rand.NewPCG(3, 4))
			for range 100 {
				d := s.Delay(o, now, rng)
				if d < lo || d > hi || (hi > lo && d == hi) {
					t.Fatalf("delay %v outside [%v, %v)", d, lo, hi)
				}
			}
		})
	}
}

func TestMatchWeights(t *testing.T) {
	mk := func(name string, weight int, from string) *kwokv1alpha1.Stage {
		s := &kwokv1alpha1.Stage{ObjectMeta: metav1.ObjectMeta{Name: name}}
		s.Spec.ResourceRef.Kind = "Pod"
		s.Spec.Selector = &kwokv1alpha1.StageSelector{}
		s.Spec.Weight = weight
		if from != "" {
			s.Spec.WeightFrom = &kwokv1alpha1.ExpressionFrom{ExpressionFrom: from}
		}
		return s
	}
	for _, tc := range []struct {
		name   string
		stages []*kwokv1alpha1.Stage
		pod    *corev1.Pod
		want   map[string]bool // the stages that may be chosen
	}{
		{"weights", []*kwokv1alpha1.Stage{mk("a", 1, ""), mk("b", 0, ""), mk("c", 3, "")}, testPod(), map[string]bool{"a": true, "c": true}},
		{"no weights: any", []*kwokv1alpha1.Stage{mk("a", 0, ""), mk("b", 0, "")}, testPod(), map[string]bool{"a": true, "b": true}},
		{"weightFrom an annotation", []*kwokv1alpha1.Stage{mk("a", 1, `.metadata.annotations["w"]`), mk("b", 1, "")},
			testPod(func(p *corev1.Pod) { p.Annotations = map[string]string{"w": "0"} }), map[string]bool{"b": true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := CompileAll(tc.stages)
			if err != nil {
				t.Fatal(err)
			}
			o, _ := NewObject(tc.pod)
			rng := rand.New(rand.NewPCG(5, 6))
			got := map[string]bool{}
			for range 200 {
				got[l.Match(o, rng).Name()] = true
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("chosen (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSelectors(t *testing.T) {
	s := mustStage(t, `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: sel}
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchLabels: {app: web}
    matchAnnotations: {tier: front}
    matchExpressions:
    - {key: '.spec.nodeName', operator: In, values: [node-0]}
    - jq: {key: '.metadata.deletionTimestamp', operator: DoesNotExist}
    - {key: '.status.conditions.[] | select(.type == "Ready") | .status', operator: NotIn, values: ["True"]}
`)
	web := func(p *corev1.Pod) {
		p.Labels = map[string]string{"app": "web"}
		p.Annotations = map[string]string{"tier": "front"}
	}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"all match", testPod(web), true},
		{"label missing", testPod(func(p *corev1.Pod) { web(p); p.Labels = nil }), false},
		{"annotation differs", testPod(func(p *corev1.Pod) { web(p); p.Annotations["tier"] = "back" }), false},
		{"other node", testPod(web, func(p *corev1.Pod) { p.Spec.NodeName = "n1" }), false},
		{"deleted", testPod(web, withDeletion), false},
		{"ready", testPod(web, func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		}), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, _ := NewObject(tc.pod)
			if got := s.Matches(o); got != tc.want {
				t.Errorf("matches %v, want %v", got, tc.want)
			}
		})
	}
}

// CEL in a selector, weightFrom and delay, as kwok evaluates it: self
// is the Pod as the API types it (an absent field its zero value), with
// kwok's functions.
func TestCELExpressions(t *testing.T) {
	s := mustStage(t, `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: cel}
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - cel: {expression: 'self.status.phase == "Pending" && self.status.podIP == "" && self.metadata.name.startsWith("web")'}
    - cel: {expression: '"tier" in self.metadata.annotations ? self.metadata.annotations["tier"] == "front" : true'}
  weightFrom:
    cel: {expression: 'size(self.spec.containers) * 2'}
  delay:
    durationFrom:
      cel: {expression: 'duration("3s")'}
    jitterDurationFrom:
      cel: {expression: '"cpu" in self.spec.containers[0].resources.requests ? duration("10s") : duration("5s")'}
`)
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"matches", testPod(func(p *corev1.Pod) { p.Name = "web-0" }), true},
		{"other name", testPod(func(p *corev1.Pod) { p.Name = "db-0" }), false},
		{"running", testPod(func(p *corev1.Pod) { p.Name = "web-0"; p.Status.Phase = corev1.PodRunning }), false},
		{"with an IP", testPod(func(p *corev1.Pod) { p.Name = "web-0"; p.Status.PodIP = "10.0.0.1" }), false},
		{"annotation says back", testPod(func(p *corev1.Pod) { p.Name = "web-0"; p.Annotations = map[string]string{"tier": "back"} }), false},
		{"annotation says front", testPod(func(p *corev1.Pod) { p.Name = "web-0"; p.Annotations = map[string]string{"tier": "front"} }), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, _ := NewObject(tc.pod)
			if got := s.Matches(o); got != tc.want {
				t.Errorf("matches %v, want %v", got, tc.want)
			}
		})
	}
	pod := testPod(func(p *corev1.Pod) { p.Name = "web-0" })
	o, _ := NewObject(pod)
	if w, ok := s.Weight(o); !ok || w != int64(2*len(pod.Spec.Containers)) {
		t.Errorf("weight %d, %v; want twice the containers", w, ok)
	}
	lo, hi := s.DelayRange(o, testEnv.Now)
	wantHi := 5 * time.Second
	if q := pod.Spec.Containers[0].Resources.Requests.Cpu(); !q.IsZero() {
		wantHi = 10 * time.Second
	}
	if lo != 3*time.Second || hi != wantHi {
		t.Errorf("delay [%v, %v], want [3s, %v]", lo, hi, wantHi)
	}

	// For Nodes, self is a Node.
	n := mustStage(t, `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: node-cel}
spec:
  resourceRef: {apiGroup: v1, kind: Node}
  selector:
    matchExpressions:
    - cel: {expression: '!self.spec.unschedulable && self.metadata.labels["pool"] == "a"'}
`)
	for _, tc := range []struct {
		node *corev1.Node
		want bool
	}{
		{&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"pool": "a"}}}, true},
		{&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"pool": "a"}}, Spec: corev1.NodeSpec{Unschedulable: true}}, false},
		{&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}, false}, // no such label: an error, no match
	} {
		o, _ := NewObject(tc.node)
		if got := n.Matches(o); got != tc.want {
			t.Errorf("node %+v: matches %v, want %v", tc.node.ObjectMeta, got, tc.want)
		}
	}
}

func TestFinalizers(t *testing.T) {
	for _, tc := range []struct {
		name string
		have []string
		f    kwokv1alpha1.StageFinalizers
		ops  string
		want []string
	}{
		{"add to none", nil, kwokv1alpha1.StageFinalizers{Add: []kwokv1alpha1.FinalizerItem{{Value: "a"}}},
			`[{"op":"add","path":"/metadata/finalizers","value":["a"]}]`, []string{"a"}},
		{"add to some", []string{"x"}, kwokv1alpha1.StageFinalizers{Add: []kwokv1alpha1.FinalizerItem{{Value: "a"}, {Value: "x"}}},
			`[{"op":"add","path":"/metadata/finalizers/-","value":"a"}]`, []string{"x", "a"}},
		{"remove one", []string{"x", "a", "y"}, kwokv1alpha1.StageFinalizers{Remove: []kwokv1alpha1.FinalizerItem{{Value: "a"}}},
			`[{"op":"remove","path":"/metadata/finalizers/1"}]`, []string{"x", "y"}},
		{"remove all", []string{"a"}, kwokv1alpha1.StageFinalizers{Remove: []kwokv1alpha1.FinalizerItem{{Value: "a"}}},
			`[{"op":"remove","path":"/metadata/finalizers"}]`, nil},
		{"empty", []string{"a", "b"}, kwokv1alpha1.StageFinalizers{Empty: true},
			`[{"op":"remove","path":"/metadata/finalizers"}]`, nil},
		{"empty none", nil, kwokv1alpha1.StageFinalizers{Empty: true}, `null`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ops, after := finalizerOps(tc.have, &tc.f)
			b, _ := json.Marshal(ops)
			if string(b) != tc.ops {
				t.Errorf("ops %s, want %s", b, tc.ops)
			}
			if diff := cmp.Diff(tc.want, after); diff != "" {
				t.Errorf("after (-want +got):\n%s", diff)
			}
			if len(ops) == 0 {
				return
			}
			// The patch, applied, leaves what after says.
			pod := testPod(func(p *corev1.Pod) { p.Finalizers = tc.have })
			raw, _ := json.Marshal(pod)
			out, err := Apply(raw, "Pod", &Patch{Type: "application/json-patch+json", Data: b})
			if err != nil {
				t.Fatal(err)
			}
			var got corev1.Pod
			_ = json.Unmarshal(out, &got)
			if diff := cmp.Diff(tc.want, got.Finalizers); diff != "" {
				t.Errorf("applied (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNextOrder(t *testing.T) {
	s := mustStage(t, `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: all}
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector: {}
  next:
    event: {type: Warning, reason: Boom, message: gone}
    finalizers: {empty: true}
    statusTemplate: 'phase: Failed'
    delete: true
`)
	o, _ := NewObject(testPod(func(p *corev1.Pod) { p.Finalizers = []string{"f"} }))
	actions, err := s.Next(o, testEnv)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, a := range actions {
		switch {
		case a.Event != nil:
			kinds = append(kinds, "event")
		case a.Delete:
			kinds = append(kinds, "delete")
		case a.Patch != nil:
			kinds = append(kinds, "patch:"+a.Patch.Subresource+":"+string(a.Patch.Data))
		}
	}
	want := []string{"event", `patch::[{"op":"remove","path":"/metadata/finalizers"}]`, `patch:status:{"status":{"phase":"Failed"}}`, "delete"}
	if diff := cmp.Diff(want, kinds); diff != "" {
		t.Errorf("actions (-want +got):\n%s", diff)
	}
}

func TestRenderError(t *testing.T) {
	s := mustStage(t, `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: fails}
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector: {}
  next: {statusTemplate: '{{ index .spec.containers 5 }}'}
`)
	o, _ := NewObject(testPod())
	_, err := s.Next(o, testEnv)
	if err == nil || !strings.Contains(err.Error(), `stage "fails"`) {
		t.Errorf("error %v, want one naming the stage", err)
	}
}

func TestNoSelectorIgnored(t *testing.T) {
	stages, err := Decode([]byte("apiVersion: kwok.x-k8s.io/v1alpha1\nkind: Stage\nmetadata: {name: none}\nspec: {resourceRef: {kind: Pod}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := CompileAll(stages)
	if err != nil || len(l) != 0 {
		t.Errorf("got %d stages, %v; want none, as kwok ignores a stage without selector", len(l), err)
	}
}

func writeFile(t *testing.T, name, data string) {
	t.Helper()
	if err := writeFileErr(name, data); err != nil {
		t.Fatal(err)
	}
}

func writeFileErr(name, data string) error { return os.WriteFile(name, []byte(data), 0o644) }

func TestPatches(t *testing.T) {
	s := mustStage(t, `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: patches}
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector: {}
  next:
    patches:
    - {root: metadata, type: json, template: '[{"op": "add", "path": "/labels", "value": {"a": "{{ .metadata.name }}"}}]'}
    - {template: 'metadata: {annotations: {b: "1"}}'}
    - {subresource: status, root: status, type: merge, template: 'phase: Failed'}
`)
	o, _ := NewObject(testPod())
	actions, err := s.Next(o, testEnv)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range actions {
		got = append(got, string(a.Patch.Type)+" "+a.Patch.Subresource+" "+string(a.Patch.Data))
	}
	want := []string{
		`application/json-patch+json  [{"op":"add","path":"/metadata/labels","value":{"a":"p"}}]`,
		`application/strategic-merge-patch+json  {"metadata":{"annotations":{"b":"1"}}}`,
		`application/merge-patch+json status {"status":{"phase":"Failed"}}`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("patches (-want +got):\n%s", diff)
	}
	data, _ := o.JSON()
	for _, a := range actions {
		if data, err = Apply(data, "Pod", a.Patch); err != nil {
			t.Fatal(err)
		}
	}
	var pod corev1.Pod
	if err := json.Unmarshal(data, &pod); err != nil {
		t.Fatal(err)
	}
	if pod.Labels["a"] != "p" || pod.Annotations["b"] != "1" || pod.Status.Phase != corev1.PodFailed {
		t.Errorf("applied: labels %v annotations %v phase %s", pod.Labels, pod.Annotations, pod.Status.Phase)
	}
	// Another kind's default is a merge patch; a strategic one has no schema.
	if _, err := Apply(data, "ConfigMap", &Patch{Type: "application/strategic-merge-patch+json", Data: []byte(`{}`)}); err == nil {
		t.Error("strategic merge patch of a ConfigMap: no error")
	}
}

// Templates have sprig's functions, as kwok's do.
func TestSprigFunctions(t *testing.T) {
	s := mustStage(t, `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: sprig}
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector: {}
  next:
    statusTemplate: |
      message: {{ .metadata.name | upper | quote }}
      reason: {{ list "a" "b" | join "-" | default "none" | quote }}
      nominatedNodeName: {{ dict "n" .spec.nodeName | toJson | b64enc | b64dec | fromJson | dig "n" "" | trimPrefix "node-" | quote }}
`)
	o, _ := NewObject(testPod())
	actions, err := s.Next(o, testEnv)
	if err != nil {
		t.Fatal(err)
	}
	if len(actions) != 1 || actions[0].Patch == nil {
		t.Fatalf("actions %+v, want one patch", actions)
	}
	if got, want := string(actions[0].Patch.Data), `{"status":{"message":"P","nominatedNodeName":"0","reason":"a-b"}}`; got != want {
		t.Errorf("patch %s, want %s", got, want)
	}
}

func TestLifecycleFor(t *testing.T) {
	l := append(loadSet(t, "pod/fast"), loadSet(t, "node/fast")...)
	if n := len(l.For("v1", "Pod")); n != 3 {
		t.Errorf("%d pod stages, want 3", n)
	}
	if n := len(l.For("v1", "Node")); n != 1 {
		t.Errorf("%d node stages, want 1", n)
	}
	if n := len(l.For("apps/v1", "Pod")); n != 0 {
		t.Errorf("%d pod stages of apps/v1, want 0", n)
	}
}

// A query that runs away (from a Stage anyone may apply) is cut short:
// no results, and the selector goes on.
func TestRunawayQueries(t *testing.T) {
	s := mustStage(t, `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: runaway}
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - {key: 'repeat(.metadata.name)', operator: In, values: [p]}
    - {key: 'def f: f; f', operator: DoesNotExist}
`)
	o, _ := NewObject(testPod())
	if !s.Matches(o) {
		t.Error("runaway queries: no match, want the first to find p among its first results and the second none")
	}
}

// A query's bound is the work it does, not the time it takes: one well
// within the budget matches however long a busy machine makes it take
// (a wall-clock timeout of 100 ms left pods of a busy run Pending for
// good; this query takes about that long on an idle machine).
func TestQueryBoundByWorkNotTime(t *testing.T) {
	s := mustStage(t, `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: heavy}
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - {key: '[range(200000)] | length', operator: In, values: ["200000"]}
`)
	o, _ := NewObject(testPod())
	start := time.Now()
	if !s.Matches(o) {
		t.Errorf("a query within its budget did not match (it took %s)", time.Since(start))
	}
}
