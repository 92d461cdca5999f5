package stagewatch

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/yaml"

	"github.com/nodelet/nodelet/pkg/stage"
)

func stageObject(t *testing.T, name, uid, selector string) *unstructured.Unstructured {
	t.Helper()
	y := "apiVersion: kwok.x-k8s.io/v1alpha1\nkind: Stage\nmetadata: {name: " + name + ", uid: " + uid + ", resourceVersion: '1'}\n" +
		"spec:\n  resourceRef: {apiGroup: v1, kind: Pod}\n  selector: " + selector + "\n  next: {statusTemplate: 'phase: Running'}\n"
	m := map[string]any{}
	if err := yaml.Unmarshal([]byte(y), &m); err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: m}
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond) // polling, not synchronisation
	}
}

func names(l stage.Lifecycle) string {
	var out []string
	for _, s := range l {
		out = append(out, s.Name())
	}
	return strings.Join(out, ",")
}

func TestWatcher(t *testing.T) {
	files, err := stage.LoadLifecycle("../stage/testdata/kwok/pod/fast/pod-delete.yaml")
	if err != nil {
		t.Fatal(err)
	}
	good := stageObject(t, "b-good", "u1", "{}")
	bad := stageObject(t, "a-bad", "u2", "{matchExpressions: [{key: '.status.[', operator: In, values: [x]}]}")
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{Resource: "StageList"}, good, bad)
	disc := &fakediscovery.FakeDiscovery{Fake: &fake.NewClientset().Fake}
	set := stage.NewSet(nil)
	w := New(client, disc, set, files)
	rec := record.NewFakeRecorder(10)
	w.Recorder = rec
	w.DiscoveryInterval = 10 * time.Millisecond

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()

	// Not served yet: nothing stored. Then the CRD is installed.
	if got := set.Stages(); got != nil {
		t.Fatalf("stages %s before the resource is served", names(got))
	}
	disc.Lock()
	disc.Resources = []*metav1.APIResourceList{{GroupVersion: "kwok.x-k8s.io/v1alpha1", APIResources: []metav1.APIResource{{Name: "stages", Kind: "Stage"}}}}
	disc.Unlock()
	eventually(t, "the good stage", func() bool { return names(set.Stages()) == "pod-delete,b-good" })
	select {
	case e := <-rec.Events:
		if !strings.Contains(e, "Warning InvalidStage") || !strings.Contains(e, `stage "a-bad"`) || !strings.Contains(e, "matchExpressions[0]") {
			t.Errorf("event %q, want a warning naming the stage and the field", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event on the bad stage")
	}

	// Applied and deleted live.
	res := client.Resource(Resource)
	if _, err := res.Create(ctx, stageObject(t, "c-new", "u3", "{}"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the new stage", func() bool { return names(set.Stages()) == "pod-delete,b-good,c-new" })
	if err := res.Delete(ctx, "b-good", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the deleted stage gone", func() bool { return names(set.Stages()) == "pod-delete,c-new" })
	// The bad stage was reported once, not at every change.
	select {
	case e := <-rec.Events:
		t.Errorf("second event %q", e)
	default:
	}
}
