package simrules

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
)

func object(t *testing.T, y string) *unstructured.Unstructured {
	t.Helper()
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

func TestWatcher(t *testing.T) {
	logs, _ := KindNamed("Logs")
	clusterLogs, _ := KindNamed("ClusterLogs")
	usage, _ := KindNamed("ResourceUsage")
	good := object(t, `{apiVersion: kwok.x-k8s.io/v1alpha1, kind: Logs, metadata: {name: web, namespace: ns, uid: u1, resourceVersion: "1"}, spec: {logs: [{logsFile: /web.log}]}}`)
	bad := object(t, `{apiVersion: kwok.x-k8s.io/v1alpha1, kind: ResourceUsage, metadata: {name: web, namespace: ns, uid: u2, resourceVersion: "1"}, spec: {usages: [{usage: {cpu: {expression: "Quantity("}}}]}}`)
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		logs.GroupVersionResource(): "LogsList", clusterLogs.GroupVersionResource(): "ClusterLogsList", usage.GroupVersionResource(): "ResourceUsageList",
	}, bad)
	// Made through the client: the fake's guess of the resource of kind
	// Logs from an initial object would be "logses".
	if _, err := client.Resource(logs.GroupVersionResource()).Namespace("ns").Create(context.Background(), good, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	disc := &fakediscovery.FakeDiscovery{Fake: &fake.NewClientset().Fake}
	files, err := CompileAll(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	set := NewSet(files)
	w := NewWatcher(client, disc, set, []Kind{logs, clusterLogs, usage}, nil)
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
	logFile := func(ns, pod string) string {
		l, err := set.Rules().Log(ns, pod, "c")
		if err != nil {
			return err.Error()
		}
		return *l.LogsFile
	}
	disc.Lock()
	disc.Resources = []*metav1.APIResourceList{{GroupVersion: "kwok.x-k8s.io/v1alpha1", APIResources: []metav1.APIResource{
		{Name: "logs", Kind: "Logs"}, {Name: "clusterlogs", Kind: "ClusterLogs"}, {Name: "resourceusages", Kind: "ResourceUsage"},
	}}}
	disc.Unlock()
	eventually(t, "the Logs in force", func() bool { return logFile("ns", "web") == "/web.log" })
	select {
	case e := <-rec.Events:
		if !strings.Contains(e, "Warning InvalidResourceUsage") || !strings.Contains(e, "ResourceUsage ns/web") || !strings.Contains(e, "usage[cpu].expression") {
			t.Errorf("event %q, want a warning naming the object and the field", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event on the bad object")
	}
	if u := set.Rules().Usage("ns", "web", "c"); u != nil {
		t.Errorf("the bad ResourceUsage in force: %v", u)
	}

	ctx2 := context.Background()
	if _, err := client.Resource(clusterLogs.GroupVersionResource()).Create(ctx2,
		object(t, `{apiVersion: kwok.x-k8s.io/v1alpha1, kind: ClusterLogs, metadata: {name: all}, spec: {logs: [{logsFile: /all.log}]}}`), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the ClusterLogs in force", func() bool { return logFile("other", "pod") == "/all.log" })
	if err := client.Resource(logs.GroupVersionResource()).Namespace("ns").Delete(ctx2, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the deleted Logs gone", func() bool { return logFile("ns", "web") == "/all.log" })
	select {
	case e := <-rec.Events:
		t.Errorf("second event %q", e)
	default:
	}

	// A bad object deleted is forgotten: what is kept of the objects
	// reported does not grow with every bad object ever seen.
	if err := client.Resource(usage.GroupVersionResource()).Namespace("ns").Delete(ctx2, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the deleted bad ResourceUsage forgotten", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.reported) == 0
	})
}
