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
	b := &multiNodeBackend{pods: map[string]provider.PodLifecycleHandler{
		"a": &onePodWithLogs{onePod{"web"}},
		"b": &onePod{"db"},
	}}
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
