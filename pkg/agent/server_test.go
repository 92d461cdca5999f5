package agent

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/provider"
)

// onePod runs one pod; with logs it serves them too.
type onePod struct{ name string }

func (p *onePod) CreatePod(context.Context, *corev1.Pod) error { return nil }
func (p *onePod) UpdatePod(context.Context, *corev1.Pod) error { return nil }
func (p *onePod) DeletePod(context.Context, *corev1.Pod) error { return nil }
func (p *onePod) GetPods(context.Context) ([]*corev1.Pod, error) {
	return nil, nil
}
func (p *onePod) GetPod(_ context.Context, _, name string) (*corev1.Pod, error) {
	if name != p.name {
		return nil, provider.ErrNotFound
	}
	return &corev1.Pod{}, nil
}

type onePodWithLogs struct{ onePod }

func (p *onePodWithLogs) GetContainerLogs(context.Context, string, string, string, provider.ContainerLogOpts) (io.ReadCloser, error) {
	return io.NopCloser(strings.NewReader("logs of " + p.name)), nil
}

// Several nodes: a request about a pod goes to its node's provider, which
// may not have the capability.
func TestMultiNodeBackendRoutes(t *testing.T) {
	b := &multiNodeBackend{nodes: &nodeProviders{nodes: map[string]provider.PodLifecycleHandler{
		"a": &onePodWithLogs{onePod{"web"}},
		"b": &onePod{"db"},
	}}}
	ctx := context.Background()
	rc, err := b.GetContainerLogs(ctx, "ns", "web", "c", provider.ContainerLogOpts{})
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := io.ReadAll(rc); string(out) != "logs of web" {
		t.Errorf("logs %q", out)
	}
	if _, err := b.GetContainerLogs(ctx, "ns", "db", "c", provider.ContainerLogOpts{}); !errors.Is(err, provider.ErrNotSupported) {
		t.Errorf("logs of a pod whose provider has none: %v", err)
	}
	if err := b.RunInContainer(ctx, "ns", "web", "c", []string{"true"}, nil); !errors.Is(err, provider.ErrNotSupported) {
		t.Errorf("exec: %v", err)
	}
	if err := b.PortForward(ctx, "ns", "gone", 80, nil); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("port-forward to an unknown pod: %v", err)
	}
}

// Nodes taken over come and go while the server runs: a request about a
// pod goes to the node that runs it now, and a node let go is not served.
func TestMultiNodeBackendFollowsNodesTakenOver(t *testing.T) {
	nodes := newNodeProviders(nil)
	b := &multiNodeBackend{nodes: nodes}
	stats := &statsSource{nodes: nodes}
	ctx := context.Background()
	if _, err := b.GetContainerLogs(ctx, "ns", "web", "c", provider.ContainerLogOpts{}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("logs before any node: %v, want not found", err)
	}

	nodes.AddNode("kwok-0", &onePodWithLogs{onePod{"web"}})
	nodes.AddNode("kwok-1", &onePod{"db"})
	if n, ok := b.NodeForPod("ns", "web"); !ok || n != "kwok-0" {
		t.Errorf("NodeForPod(web) = %q, %v; want kwok-0", n, ok)
	}
	if n, ok := b.NodeForPod("ns", "db"); !ok || n != "kwok-1" {
		t.Errorf("NodeForPod(db) = %q, %v; want kwok-1", n, ok)
	}
	rc, err := b.GetContainerLogs(ctx, "ns", "web", "c", provider.ContainerLogOpts{})
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := io.ReadAll(rc); string(out) != "logs of web" {
		t.Errorf("logs %q", out)
	}
	if !stats.HasNode("kwok-0") || stats.HasNode("own") {
		t.Errorf("HasNode: kwok-0 %v, own %v; want true, false", stats.HasNode("kwok-0"), stats.HasNode("own"))
	}

	// kwok-0 let go, and its pod's name now run by another node taken
	// over: the request goes there.
	nodes.RemoveNode("kwok-0")
	if _, ok := b.NodeForPod("ns", "web"); ok {
		t.Error("the pod of a node let go is still found")
	}
	if _, err := b.GetContainerLogs(ctx, "ns", "web", "c", provider.ContainerLogOpts{}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("logs of a pod of a node let go: %v, want not found", err)
	}
	if _, err := stats.Summary(ctx, "kwok-0"); err == nil {
		t.Error("the summary of a node let go is served")
	}
	if stats.HasNode("kwok-0") {
		t.Error("HasNode(kwok-0) after it was let go")
	}
	nodes.AddNode("kwok-2", &onePod{"web"})
	if n, ok := b.NodeForPod("ns", "web"); !ok || n != "kwok-2" {
		t.Errorf("NodeForPod(web) = %q, %v; want kwok-2", n, ok)
	}
}
