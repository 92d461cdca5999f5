package deviceplugin

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	clocktesting "k8s.io/utils/clock/testing"
)

// fakePlugin is a device plugin serving on a socket of the plugins'
// directory: it lists its devices again whenever they change, fails the
// calls named in fail, and answers Allocate with a mount and an
// environment variable per device.
type fakePlugin struct {
	pluginapi.UnimplementedDevicePluginServer
	fail map[string]bool

	mu      sync.Mutex
	devices []*pluginapi.Device
	updates chan struct{}
	calls   []string
	srv     *grpc.Server
}

func (p *fakePlugin) called(name string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, name)
	if p.fail[name] {
		return errors.New(name + " failed")
	}
	return nil
}

func (p *fakePlugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, p.called("GetDevicePluginOptions")
}

func (p *fakePlugin) ListAndWatch(_ *pluginapi.Empty, stream pluginapi.DevicePlugin_ListAndWatchServer) error {
	if err := p.called("ListAndWatch"); err != nil {
		return err
	}
	for {
		p.mu.Lock()
		resp := &pluginapi.ListAndWatchResponse{Devices: p.devices}
		p.mu.Unlock()
		if err := stream.Send(resp); err != nil {
			return err
		}
		select {
		case <-p.updates:
		case <-stream.Context().Done():
			return nil
		}
	}
}

func (p *fakePlugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	if err := p.called("Allocate"); err != nil {
		return nil, err
	}
	resp := &pluginapi.AllocateResponse{}
	for _, cr := range req.ContainerRequests {
		out := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{"DEVICES": strings.Join(cr.DevicesIds, ",")}}
		for _, id := range cr.DevicesIds {
			out.Mounts = append(out.Mounts, &pluginapi.Mount{ContainerPath: "/dev/fake-" + id, HostPath: "/tmp/fake-" + id})
		}
		resp.ContainerResponses = append(resp.ContainerResponses, out)
	}
	return resp, nil
}

func (p *fakePlugin) setHealth(id, health string) {
	p.mu.Lock()
	for _, d := range p.devices {
		if d.ID == id {
			d.Health = health
		}
	}
	p.mu.Unlock()
	p.updates <- struct{}{}
}

// startPlugin serves a plugin with the devices on dir/endpoint until the
// test ends (or stop).
func startPlugin(t *testing.T, dir, endpoint string, fail map[string]bool, ids ...string) *fakePlugin {
	t.Helper()
	p := &fakePlugin{fail: fail, updates: make(chan struct{})}
	for _, id := range ids {
		p.devices = append(p.devices, &pluginapi.Device{ID: id, Health: pluginapi.Healthy})
	}
	ln, err := net.Listen("unix", filepath.Join(dir, endpoint))
	if err != nil {
		t.Fatal(err)
	}
	p.srv = grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(p.srv, p)
	go p.srv.Serve(ln)
	t.Cleanup(p.srv.Stop)
	return p
}

// register registers a plugin on the manager's socket, as a plugin does.
func register(t *testing.T, dir, endpoint, resourceName string) error {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, SocketName), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: endpoint, ResourceName: resourceName,
	})
	return err
}

// startManager runs a manager on a fresh directory with a fake clock.
func startManager(t *testing.T) (*Manager, string, *clocktesting.FakeClock) {
	t.Helper()
	dir := t.TempDir()
	clk := clocktesting.NewFakeClock(time.Now())
	m := New(dir, Options{Clock: clk})
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return register(t, dir, "none.sock", "bad") != nil && strings.Contains(register(t, dir, "none.sock", "bad").Error(), "extended resource"), nil
	})
	if err != nil {
		t.Fatalf("the registration socket does not answer: %v", err)
	}
	return m, dir, clk
}

// waitFor polls the manager's resources until name has capacity and
// allocatable.
func waitFor(t *testing.T, m *Manager, name string, capacity, allocatable int64) {
	t.Helper()
	var c, a resource.Quantity
	var cok, aok bool
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		cs, as := m.Resources()
		c, cok = cs[corev1.ResourceName(name)]
		a, aok = as[corev1.ResourceName(name)]
		return cok && aok && c.Value() == capacity && a.Value() == allocatable, nil
	})
	if err != nil {
		t.Fatalf("%s: capacity %v (%v) allocatable %v (%v), want %d and %d", name, c.String(), cok, a.String(), aok, capacity, allocatable)
	}
}

func TestDevicesFollowThePluginsList(t *testing.T) {
	m, dir, clk := startManager(t)
	notified := make(chan struct{}, 100)
	m.Notify(func() { notified <- struct{}{} })
	p := startPlugin(t, dir, "a.sock", nil, "0", "1", "2", "3")
	if err := register(t, dir, "a.sock", "example.com/dev"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, m, "example.com/dev", 4, 4)
	p.setHealth("3", pluginapi.Unhealthy)
	waitFor(t, m, "example.com/dev", 4, 3)
	p.setHealth("3", pluginapi.Healthy)
	waitFor(t, m, "example.com/dev", 4, 4)
	select {
	case <-notified:
	default:
		t.Error("the node was never told its resources changed")
	}

	// The plugin goes away: its devices are unhealthy at once, and leave
	// the capacity after the grace period; the resource stays at zero.
	p.srv.Stop()
	waitFor(t, m, "example.com/dev", 4, 0)
	clk.Step(DefaultStopGracePeriod + expirePeriod)
	waitFor(t, m, "example.com/dev", 0, 0)
	p.mu.Lock()
	calls := strings.Join(p.calls, ",")
	p.mu.Unlock()
	if calls != "GetDevicePluginOptions,ListAndWatch" {
		t.Errorf("plugin calls %s, want GetDevicePluginOptions,ListAndWatch (never retried)", calls)
	}
}

func TestRegistrationRefused(t *testing.T) {
	m, dir, _ := startManager(t)
	p := startPlugin(t, dir, "opts.sock", map[string]bool{"GetDevicePluginOptions": true}, "0")
	err := register(t, dir, "opts.sock", "example.com/opts")
	if err == nil || !strings.Contains(err.Error(), "failed to get device plugin options") || !strings.Contains(err.Error(), "GetDevicePluginOptions failed") {
		t.Errorf("register with failing options: %v", err)
	}
	if c, _ := m.Resources(); len(c) != 0 {
		t.Errorf("a refused plugin's resource is reported: %v", c)
	}
	if len(p.calls) != 1 {
		t.Errorf("plugin calls %v, want GetDevicePluginOptions alone", p.calls)
	}
	for _, name := range []string{"cpu", "kubernetes.io/dev", "example.com/a b"} {
		if err := register(t, dir, "opts.sock", name); err == nil {
			t.Errorf("resource %q registered", name)
		}
	}
}

func TestListAndWatchFailingAtOnce(t *testing.T) {
	m, dir, _ := startManager(t)
	startPlugin(t, dir, "law.sock", map[string]bool{"ListAndWatch": true}, "0")
	if err := register(t, dir, "law.sock", "example.com/law"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, m, "example.com/law", 0, 0)
}

func TestAllocate(t *testing.T) {
	m, dir, _ := startManager(t)
	p := startPlugin(t, dir, "b.sock", nil, "0", "1")
	if err := register(t, dir, "b.sock", "example.com/gpu"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, m, "example.com/gpu", 2, 2)
	container := func(n int64) *corev1.Container {
		return &corev1.Container{Name: "c", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
			"example.com/gpu": *resource.NewQuantity(n, resource.DecimalSI), "example.com/other": resource.MustParse("1"),
			corev1.ResourceCPU: resource.MustParse("1"),
		}}}
	}
	pod1 := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "uid-1"}}
	pod2 := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "uid-2"}}
	d, err := m.Allocate(context.Background(), pod1, container(1))
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Mounts) != 1 || d.Mounts[0].ContainerPath != "/dev/fake-0" || len(d.Envs) != 1 || string(d.Envs[0].Value) != "0" {
		t.Errorf("pod 1's devices: mounts %v envs %v", d.Mounts, d.Envs)
	}
	// The container starting again keeps its device.
	if d, err = m.Allocate(context.Background(), pod1, container(1)); err != nil || string(d.Envs[0].Value) != "0" {
		t.Errorf("restart: %v, %v", d, err)
	}
	if _, err := m.Allocate(context.Background(), pod2, container(2)); err == nil || !strings.Contains(err.Error(), "Requested: 2, Available: 1") {
		t.Errorf("two devices with one free: %v", err)
	}
	if d, err = m.Allocate(context.Background(), pod2, container(1)); err != nil || string(d.Envs[0].Value) != "1" {
		t.Errorf("pod 2's device: %v, %v", d, err)
	}
	m.Release(pod1.UID)
	pod3 := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "uid-3"}}
	if d, err = m.Allocate(context.Background(), pod3, container(1)); err != nil || string(d.Envs[0].Value) != "0" {
		t.Errorf("pod 3 after pod 1 went: %v, %v", d, err)
	}
	p.setHealth("1", pluginapi.Unhealthy)
	waitFor(t, m, "example.com/gpu", 2, 1)
}
