// Package deviceplugin owns the node's device plugins, as the kubelet's
// device manager does: the registration socket
// <rootDir>/device-plugins/kubelet.sock on which plugins register (API
// deviceplugin/v1beta1), one ListAndWatch stream per plugin, whose devices
// are the node's extended resources (capacity: every device; allocatable:
// the healthy ones), and the devices given to the containers that request
// them (Allocate), kept for as long as their pod is on the node.
//
// It writes nothing to the API: the provider reports Resources in the
// node's status when Manager notifies it. It never starts containers: it
// tells the runtime what a container's devices need (Allocation).
package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/utils/clock"
)

// SocketName is the registration socket's name in the plugins' directory.
const SocketName = "kubelet.sock"

// Defaults of Options.
const (
	// DefaultStopGracePeriod is how long the devices of a plugin whose
	// stream ended stay in the node's capacity (the kubelet's
	// endpointStopGracePeriod).
	DefaultStopGracePeriod = 5 * time.Minute
	// DefaultCallTimeout bounds each call to a plugin but ListAndWatch.
	DefaultCallTimeout = 10 * time.Second
	// expirePeriod is how often the devices of stopped plugins are looked
	// at.
	expirePeriod = 10 * time.Second
)

// Options configure a Manager. Zero values take the defaults.
type Options struct {
	StopGracePeriod time.Duration
	CallTimeout     time.Duration
	Clock           clock.WithTicker
}

// Manager is the node's device manager. Build it with New, serve the
// registration socket with Run.
type Manager struct {
	dir  string
	opts Options

	mu        sync.Mutex
	resources map[string]*pluginResource
	// allocated are the devices of each pod's containers, by resource.
	allocated map[types.UID]map[string]map[string][]string // pod → container → resource → device IDs
	notify    func()
}

// pluginResource is one extended resource and the plugin serving it.
type pluginResource struct {
	name    string
	conn    *grpc.ClientConn
	client  pluginapi.DevicePluginClient
	options *pluginapi.DevicePluginOptions
	devices map[string]*pluginapi.Device
	// stopped is when the plugin's stream ended; zero while it runs.
	stopped time.Time
}

// New returns a manager of the plugins whose sockets are in dir (the
// kubelet's /var/lib/kubelet/device-plugins); nothing is served until Run.
func New(dir string, opts Options) *Manager {
	if opts.StopGracePeriod == 0 {
		opts.StopGracePeriod = DefaultStopGracePeriod
	}
	if opts.CallTimeout == 0 {
		opts.CallTimeout = DefaultCallTimeout
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &Manager{dir: dir, opts: opts, resources: map[string]*pluginResource{}, allocated: map[types.UID]map[string]map[string][]string{}}
}

// Notify sets the function called whenever Resources changes.
func (m *Manager) Notify(f func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.notify = f
}

func (m *Manager) changed() {
	m.mu.Lock()
	f := m.notify
	m.mu.Unlock()
	if f != nil {
		f()
	}
}

// Run serves the registration socket until ctx ends, then closes the
// plugins' connections and removes the socket.
func (m *Manager) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("device-plugins")
	ctx = klog.NewContext(ctx, logger)
	if err := os.MkdirAll(m.dir, 0o750); err != nil {
		return fmt.Errorf("device plugins: %w", err)
	}
	socket := filepath.Join(m.dir, SocketName)
	if err := os.Remove(socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("device plugins: %w", err)
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "unix", socket)
	if err != nil {
		return fmt.Errorf("device plugins: listen on %s: %w", socket, err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterRegistrationServer(srv, &registration{m: m, ctx: ctx})
	errCh := make(chan error, 1)
	go func() { errCh <- srv.Serve(ln) }()
	logger.Info("Serving device plugin registration", "socket", socket)

	ticker := m.opts.Clock.NewTicker(expirePeriod)
	defer ticker.Stop()
	for {
		select {
		case err := <-errCh:
			m.closeAll()
			return fmt.Errorf("device plugins: serve on %s: %w", socket, err)
		case <-ticker.C():
			if m.expire() {
				m.changed()
			}
		case <-ctx.Done():
			srv.Stop()
			<-errCh
			m.closeAll()
			_ = os.Remove(socket)
			return nil
		}
	}
}

func (m *Manager) closeAll() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.resources {
		r.conn.Close()
	}
}

// expire forgets the devices of plugins stopped longer than the grace
// period; the resource stays, at zero, as the kubelet keeps it.
func (m *Manager) expire() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	now, changed := m.opts.Clock.Now(), false
	for _, r := range m.resources {
		if !r.stopped.IsZero() && len(r.devices) > 0 && now.Sub(r.stopped) >= m.opts.StopGracePeriod {
			r.devices = map[string]*pluginapi.Device{}
			changed = true
		}
	}
	return changed
}

// registration is the Registration service.
type registration struct {
	pluginapi.UnimplementedRegistrationServer
	m *Manager
	// ctx lives as long as the manager serves: the plugins' streams run
	// beyond the Register call.
	ctx context.Context
}

func (r *registration) Register(_ context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	if err := r.m.register(r.ctx, req); err != nil {
		klog.FromContext(r.ctx).Info("Refused a device plugin", "resource", req.ResourceName, "endpoint", req.Endpoint, "err", err)
		return nil, err
	}
	return &pluginapi.Empty{}, nil
}

// register checks a plugin's request, asks it for its options and starts
// its ListAndWatch stream; a plugin registering a resource anew replaces
// the one before.
func (m *Manager) register(ctx context.Context, req *pluginapi.RegisterRequest) error {
	if req.Version != pluginapi.Version {
		return fmt.Errorf("device plugin version %q is not supported (want %s)", req.Version, pluginapi.Version)
	}
	if !IsExtendedResourceName(req.ResourceName) {
		return fmt.Errorf("resource name %q is not an extended resource name", req.ResourceName)
	}
	if req.Endpoint == "" || strings.Contains(req.Endpoint, "/") || req.Endpoint == SocketName {
		return fmt.Errorf("endpoint %q: must be a socket's name in %s", req.Endpoint, m.dir)
	}
	socket := filepath.Join(m.dir, req.Endpoint)
	conn, err := grpc.NewClient("passthrough:///"+req.Endpoint,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		}),
	)
	if err != nil {
		return fmt.Errorf("device plugin socket %s: %w", socket, err)
	}
	client := pluginapi.NewDevicePluginClient(conn)
	callCtx, cancel := context.WithTimeout(ctx, m.opts.CallTimeout)
	defer cancel()
	options, err := client.GetDevicePluginOptions(callCtx, &pluginapi.Empty{})
	if err != nil {
		conn.Close()
		return fmt.Errorf("failed to get device plugin options: %w", err)
	}
	r := &pluginResource{name: req.ResourceName, conn: conn, client: client, options: options, devices: map[string]*pluginapi.Device{}}
	m.mu.Lock()
	if old := m.resources[r.name]; old != nil {
		old.conn.Close()
		r.devices = old.devices // until the new plugin lists its own
	}
	m.resources[r.name] = r
	m.mu.Unlock()
	klog.FromContext(ctx).Info("Registered a device plugin", "resource", r.name, "endpoint", req.Endpoint)
	m.changed()
	go m.listAndWatch(ctx, r)
	return nil
}

// listAndWatch keeps the plugin's devices as its stream sends them. When
// the stream ends the devices turn unhealthy (allocatable zero), and after
// the grace period leave the capacity; the plugin is not asked again
// until it registers anew.
func (m *Manager) listAndWatch(ctx context.Context, r *pluginResource) {
	logger := klog.FromContext(ctx).WithValues("resource", r.name)
	stream, err := r.client.ListAndWatch(ctx, &pluginapi.Empty{})
	for err == nil {
		var resp *pluginapi.ListAndWatchResponse
		if resp, err = stream.Recv(); err != nil {
			break
		}
		devices := make(map[string]*pluginapi.Device, len(resp.Devices))
		for _, d := range resp.Devices {
			devices[d.ID] = d
		}
		m.mu.Lock()
		current := m.resources[r.name] == r
		if current {
			r.devices = devices
		}
		m.mu.Unlock()
		if !current {
			return
		}
		m.changed()
	}
	logger.Info("A device plugin's ListAndWatch ended; its devices are unhealthy", "err", err)
	m.mu.Lock()
	current := m.resources[r.name] == r
	if current {
		r.stopped = m.opts.Clock.Now()
		r.conn.Close()
	}
	m.mu.Unlock()
	if current {
		m.changed()
	}
}

// Resources are the node's extended resources from its plugins: the
// capacity counts every device, allocatable the healthy ones of running
// plugins.
func (m *Manager) Resources() (capacity, allocatable corev1.ResourceList) {
	m.mu.Lock()
	defer m.mu.Unlock()
	capacity, allocatable = corev1.ResourceList{}, corev1.ResourceList{}
	for name, r := range m.resources {
		healthy := 0
		if r.stopped.IsZero() {
			healthy = len(r.healthy())
		}
		capacity[corev1.ResourceName(name)] = *resource.NewQuantity(int64(len(r.devices)), resource.DecimalSI)
		allocatable[corev1.ResourceName(name)] = *resource.NewQuantity(int64(healthy), resource.DecimalSI)
	}
	return capacity, allocatable
}

// healthy are the IDs of the healthy devices, sorted.
func (r *pluginResource) healthy() []string {
	var ids []string
	for id, d := range r.devices {
		if d.Health == pluginapi.Healthy {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

// IsExtendedResourceName tells whether name is an extended resource's
// (a qualified name outside the kubernetes.io domain), the only names a
// device plugin may register, as the API's helper of the same name.
func IsExtendedResourceName(name string) bool {
	if !strings.Contains(name, "/") || strings.Contains(name, corev1.ResourceDefaultNamespacePrefix) ||
		strings.HasPrefix(name, corev1.DefaultResourceRequestsPrefix) {
		return false
	}
	return len(utilvalidation.IsQualifiedName(corev1.DefaultResourceRequestsPrefix+name)) == 0
}
