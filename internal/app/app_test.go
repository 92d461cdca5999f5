package app

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/config"
)

func TestNewBuildsEveryLoopWithoutRunning(t *testing.T) {
	// Nothing listens there: New must not talk to the API server.
	rc := &rest.Config{Host: "https://127.0.0.1:1"}
	for _, tt := range []struct {
		name  string
		setup func(*config.Config)
		want  []string
	}{
		{"sim nodes with attach/detach", func(*config.Config) {},
			[]string{"node controller", "pod controller", "sim eviction managers", "volume controller"}},
		{"attach/detach disabled, kubelet API enabled", func(c *config.Config) {
			c.AttachDetach.Enabled = ptr.To(false)
			c.EnableServer = ptr.To(true)
		}, []string{"kubelet API server", "node controller", "pod controller", "sim eviction managers"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.NodeName = "sim"
			cfg.Nodes = 3
			cfg.RootDir = t.TempDir()
			tt.setup(cfg)
			a, err := New(rc, cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer a.broadcaster.Shutdown()
			var got []string
			for name := range a.loops {
				got = append(got, name)
			}
			slices.Sort(got)
			if !slices.Equal(got, tt.want) {
				t.Errorf("loops %q, want %q", got, tt.want)
			}
			if a.count != 3 || len(a.factories) != 3 {
				t.Errorf("%d nodes and %d informer factories, want 3 and 3", a.count, len(a.factories))
			}
		})
	}
}

func TestNewRefusesAnEmptyShard(t *testing.T) {
	cfg := config.Default()
	cfg.NodeName = "sim"
	cfg.Nodes = 1
	cfg.Shard = "1/2"
	if shardOf("sim-0", 2) == 1 {
		cfg.Shard = "0/2"
	}
	if _, err := New(&rest.Config{Host: "https://127.0.0.1:1"}, cfg, nil); err == nil {
		t.Error("New built an agent of no node")
	}
}

func TestRunStopsWithItsContext(t *testing.T) {
	cfg := config.Default()
	cfg.NodeName = "sim"
	cfg.RootDir = t.TempDir()
	// The attach/detach populator adds its event handlers when it runs,
	// which fails on informers that have stopped already.
	cfg.AttachDetach.Enabled = ptr.To(false)
	a, err := New(&rest.Config{Host: "https://127.0.0.1:1"}, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run after its context ended = %v, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}

// Every factory the agent builds trims managedFields from what its
// informers cache.
func TestAgentInformersCacheNoManagedFields(t *testing.T) {
	managed := []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply,
		FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{}}`)}}}
	meta := func(namespace, name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: namespace, Name: name, ManagedFields: managed}
	}
	client := fake.NewClientset(
		&corev1.Pod{ObjectMeta: meta("ns", "p"), Spec: corev1.PodSpec{NodeName: "sim-0"}},
		&corev1.Node{ObjectMeta: meta("", "sim-0")},
		&storagev1.CSIDriver{ObjectMeta: meta("", "d")},
	)
	inf := newAgentInformers(client, []string{"sim-0", "sim-1"})
	pods := inf.pods.Core().V1().Pods()
	nodes := inf.nodes.Core().V1().Nodes()
	drivers := inf.cluster.Storage().V1().CSIDrivers()
	pods.Informer()
	nodes.Informer()
	drivers.Informer()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	factories := []informers.SharedInformerFactory{inf.pods, inf.nodes, inf.cluster}
	for _, f := range factories {
		f.Start(ctx.Done())
	}
	defer func() {
		cancel()
		for _, f := range factories {
			f.Shutdown()
		}
	}()
	for _, f := range factories {
		for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
			if !ok {
				t.Fatalf("%v cache did not sync", typ)
			}
		}
	}

	pod, err := pods.Lister().Pods("ns").Get("p")
	if err != nil {
		t.Fatal(err)
	}
	node, err := nodes.Lister().Get("sim-0")
	if err != nil {
		t.Fatal(err)
	}
	driver, err := drivers.Lister().Get("d")
	if err != nil {
		t.Fatal(err)
	}
	for name, obj := range map[string]metav1.Object{"pod": pod, "node": node, "CSI driver": driver} {
		if got := obj.GetManagedFields(); got != nil {
			t.Errorf("cached %s has managedFields %v, want none", name, got)
		}
	}
}

// The agent's client asks for protobuf first (and sends it), as the
// kubelet's does, and still reads a JSON answer; with contentType JSON it
// asks for JSON only.
func TestClientContentType(t *testing.T) {
	for _, tt := range []struct{ contentType, wantAccept string }{
		{config.ContentTypeProtobuf, "application/vnd.kubernetes.protobuf,application/json"},
		{config.ContentTypeJSON, "application/json"},
	} {
		var accept atomic.Value
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			accept.Store(r.Header.Get("Accept"))
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"kind":"Node","apiVersion":"v1","metadata":{"name":"n"}}`)
		}))
		rc := &rest.Config{Host: srv.URL}
		client, err := kubernetes.NewForConfig(withContentType(rc, tt.contentType))
		if err != nil {
			t.Fatal(err)
		}
		n, err := client.CoreV1().Nodes().Get(context.Background(), "n", metav1.GetOptions{})
		srv.Close()
		if err != nil || n.Name != "n" {
			t.Errorf("%s: get node = %v, %v; want n", tt.contentType, n, err)
		}
		if got := accept.Load(); got != tt.wantAccept {
			t.Errorf("%s: Accept %q, want %q", tt.contentType, got, tt.wantAccept)
		}
		if rc.ContentType != "" {
			t.Errorf("withContentType changed its argument: %q", rc.ContentType)
		}
	}
}
