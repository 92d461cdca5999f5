package cachetrim

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
)

func managed() []metav1.ManagedFieldsEntry {
	return []metav1.ManagedFieldsEntry{{
		Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply, APIVersion: "v1",
		FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:labels":{"f:app":{}}}}`)},
	}}
}

func TestTransformDropsManagedFieldsOnly(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u", ResourceVersion: "7",
			Labels: map[string]string{"app": "a"}, Annotations: map[string]string{"a": "b"}, ManagedFields: managed()},
		Spec:   corev1.PodSpec{NodeName: "n"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	want := pod.DeepCopy()
	want.ManagedFields = nil
	for range 2 { // idempotent
		got, err := Transform(pod)
		if err != nil {
			t.Fatal(err)
		}
		if got.(*corev1.Pod) != pod {
			t.Fatal("Transform returned another object; it trims in place")
		}
	}
	if pod.ManagedFields != nil || pod.Labels["app"] != "a" || pod.Annotations["a"] != "b" ||
		pod.Spec.NodeName != "n" || pod.Status.Phase != corev1.PodRunning || pod.ResourceVersion != "7" {
		t.Errorf("Transform left %+v, want %+v", pod, want)
	}

	tomb := cache.DeletedFinalStateUnknown{Key: "ns/p", Obj: pod}
	if got, err := Transform(tomb); err != nil || got != any(tomb) {
		t.Errorf("Transform(tombstone) = %v, %v; want it unchanged", got, err)
	}
	if got, err := Transform("not an object"); err != nil || got != "not an object" {
		t.Errorf("Transform(string) = %v, %v; want it unchanged", got, err)
	}
}

// The objects a factory's informers cache have no managedFields, whatever
// the API server sends.
func TestFactoryCachesNoManagedFields(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", ManagedFields: managed()}}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", ManagedFields: managed()}}
	client := fake.NewClientset(pod, node)
	factory := NewFactory(client, Transform)
	pods := factory.Core().V1().Pods()
	nodes := factory.Core().V1().Nodes()
	pods.Informer()
	nodes.Informer()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	factory.Start(ctx.Done())
	defer func() {
		cancel()
		factory.Shutdown()
	}()
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("%v cache did not sync", typ)
		}
	}

	cachedPod, err := pods.Lister().Pods("ns").Get("p")
	if err != nil {
		t.Fatal(err)
	}
	cachedNode, err := nodes.Lister().Get("n")
	if err != nil {
		t.Fatal(err)
	}
	if cachedPod.ManagedFields != nil || cachedNode.ManagedFields != nil {
		t.Errorf("cached managedFields: pod %v, node %v; want none", cachedPod.ManagedFields, cachedNode.ManagedFields)
	}
}

// Dropping drops the annotations named as well, and only those.
func TestDroppingDropsTheAnnotationsNamed(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", ManagedFields: managed(),
		Annotations: map[string]string{"example.com/record": "{...}", "example.com/kept": "yes"}}}
	transform := Dropping("example.com/record", "example.com/absent")
	for range 2 { // idempotent
		if _, err := transform(node); err != nil {
			t.Fatal(err)
		}
	}
	if node.ManagedFields != nil || len(node.Annotations) != 1 || node.Annotations["example.com/kept"] != "yes" {
		t.Errorf("Dropping left managedFields %v and annotations %v; want none and only example.com/kept", node.ManagedFields, node.Annotations)
	}
	bare := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "bare"}}
	if _, err := transform(bare); err != nil || bare.Annotations != nil {
		t.Errorf("Dropping on a node without annotations: %v, %v", bare.Annotations, err)
	}
	tomb := cache.DeletedFinalStateUnknown{Key: "n", Obj: node}
	if got, err := transform(tomb); err != nil || got != any(tomb) {
		t.Errorf("Dropping(tombstone) = %v, %v; want it unchanged", got, err)
	}
}
