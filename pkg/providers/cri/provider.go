package cri

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/deviceplugin"
	"github.com/nodelet/nodelet/pkg/hostnode"
	"github.com/nodelet/nodelet/pkg/lifecycle"
	"github.com/nodelet/nodelet/pkg/podresources"
	"github.com/nodelet/nodelet/pkg/provider"
)

var (
	_ provider.PodLifecycleHandler = (*Provider)(nil)
	_ provider.NodeProvider        = (*Provider)(nil)
)

// DefaultEndpoint is containerd's CRI socket.
const DefaultEndpoint = "unix:///run/containerd/containerd.sock"

// Options configure the CRI provider of one node: the node (NodeName,
// Address and RootDir are required; RootDir also holds the pods' state,
// volumes, /etc/hosts files and termination messages) and its runtime.
type Options struct {
	hostnode.Options
	// Endpoint is the runtime's CRI socket; default DefaultEndpoint.
	Endpoint string
	// RequestTimeout bounds each runtime call but pulls; default 2 min.
	RequestTimeout time.Duration
	// ClusterDNS and ClusterDomain make pods' resolver configuration;
	// ResolvConf is the host's (default /etc/resolv.conf).
	ClusterDNS    []string
	ClusterDomain string
	ResolvConf    string
	// PodLogsDir (default /var/log/pods) holds the containers' logs, and
	// ContainerLogsDir (default /var/log/containers) links to them.
	PodLogsDir       string
	ContainerLogsDir string
	// ImageGCHighPercent and ImageGCLowPercent (default 85 and 80) and
	// ImageMinimumGCAge (default 2 min) drive the image garbage collection.
	ImageGCHighPercent int
	ImageGCLowPercent  int
	ImageMinimumGCAge  time.Duration
	// ContainerLogMaxSize and ContainerLogMaxFiles rotate the containers'
	// logs; default 10 MiB and 5.
	ContainerLogMaxSize  int64
	ContainerLogMaxFiles int
	// RuntimeHandler resolves a RuntimeClass to its handler; nil refuses
	// every pod that names one.
	RuntimeHandler func(runtimeClass string) (string, error)
	// Clock drives back-off, deadlines and probes; default the real clock.
	Clock clock.WithTicker
	// CleanUpPeriod is how often leftovers of pods that are gone are
	// cleaned up; default lifecycle.DefaultCleanUpPeriod.
	CleanUpPeriod time.Duration
	// Devices are the node's device plugins (package deviceplugin): their
	// resources in the node's status, their devices in the containers
	// that request them. nil: none.
	Devices Devices
}

// Devices is the node's device manager as the provider uses it
// (*deviceplugin.Manager).
type Devices interface {
	// Run serves the plugins until ctx ends.
	Run(ctx context.Context) error
	// Notify sets what is called when Resources change.
	Notify(func())
	// Resources are the plugins' extended resources.
	Resources() (capacity, allocatable corev1.ResourceList)
	// Allocate gives a container the devices it requests.
	Allocate(ctx context.Context, pod *corev1.Pod, c *corev1.Container) (*deviceplugin.ContainerDevices, error)
	// Release frees a pod's devices once it is gone.
	Release(uid types.UID)
}

// Provider runs the pods of one node through a CRI runtime: the pod
// lifecycle over the runtime's sandboxes and containers, and the node's
// description, whose Ready condition follows the runtime's.
type Provider struct {
	// Manager runs the pods: CreatePod, UpdatePod, DeletePod, GetPod,
	// GetPods, NotifyPods, RestorePod, Evict, the logs, exec, attach and
	// port-forward of the provider are its methods (pkg/lifecycle), over
	// this provider's runtime; the node's description and stats are
	// this package's.
	*lifecycle.Manager
	opts    Options
	host    *hostnode.Host
	runtime *criRuntime
	imageGC *imageGC
	// hostStats reads what the runtime's stats leave out from this host.
	hostStats hostStats

	mu       sync.Mutex
	version  string // <runtime>://<version>
	images   []corev1.ContainerImage
	handlers []corev1.NodeRuntimeHandler // the runtime's, from its status
}

// New returns a provider of the runtime at opts.Endpoint; parts.Runtime is
// set to it. Nothing is dialled until Run or the first call, so a runtime
// that is not there yet makes the node NotReady, not the agent fail.
func New(parts lifecycle.Parts, opts Options) (*Provider, error) {
	if opts.Endpoint == "" {
		opts.Endpoint = DefaultEndpoint
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = 2 * time.Minute
	}
	if opts.ResolvConf == "" {
		opts.ResolvConf = "/etc/resolv.conf"
	}
	if opts.ContainerLogsDir == "" {
		opts.ContainerLogsDir = "/var/log/containers"
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.ImageGCHighPercent == 0 {
		opts.ImageGCHighPercent, opts.ImageGCLowPercent = 85, 80
	}
	if opts.ImageMinimumGCAge == 0 {
		opts.ImageMinimumGCAge = 2 * time.Minute
	}
	if opts.ContainerLogMaxSize <= 0 {
		opts.ContainerLogMaxSize = 10 << 20
	}
	if opts.ContainerLogMaxFiles < 2 {
		opts.ContainerLogMaxFiles = 5
	}
	if opts.RuntimeHandler == nil {
		opts.RuntimeHandler = func(name string) (string, error) {
			return "", errors.New("RuntimeClasses are not available to this node")
		}
	}
	if !strings.HasPrefix(opts.Endpoint, "unix://") {
		return nil, fmt.Errorf("cri provider: container runtime endpoint %q: only unix:// sockets are supported", opts.Endpoint)
	}
	if parts.Env == nil {
		return nil, errors.New("cri provider: env is required")
	}
	host := hostnode.New(opts.Options)
	var memory int64
	if q, ok := host.Capacity()[corev1.ResourceMemory]; ok {
		memory = q.Value()
	}
	node := nodeSettings{NodeName: opts.NodeName, PodLogsDir: opts.PodLogsDir, MemoryCapacity: memory}.withDefaults()
	dns := dnsOptions{ClusterDNS: opts.ClusterDNS, ClusterDomain: opts.ClusterDomain, ResolvConf: opts.ResolvConf}
	if ip := net.ParseIP(opts.Address); ip != nil {
		dns.NodeIPs = []net.IP{ip}
	}
	node.DNS = dns
	if err := node.validate(); err != nil {
		return nil, fmt.Errorf("cri provider: %w", err)
	}
	conn := newConnection(opts.Endpoint, opts.RequestTimeout, opts.Clock)
	rt := &criRuntime{
		conn: conn, node: node, rootDir: opts.RootDir, recorder: parts.Recorder, clock: opts.Clock,
		images:           newImageManager(conn, parts.Env.Secret, parts.Recorder, opts.Clock),
		handler:          opts.RuntimeHandler,
		dns:              dns,
		containerLogsDir: opts.ContainerLogsDir,
		sandboxes:        map[types.UID]*criSandbox{},
		relistNow:        make(chan struct{}, 1),
		devices:          opts.Devices,
	}
	parts.Runtime = rt
	m, err := lifecycle.New(parts, lifecycle.Options{
		NodeName: opts.NodeName, Address: opts.Address, RootDir: opts.RootDir,
		Allocatable: host.Allocatable, Clock: opts.Clock, CleanUpPeriod: opts.CleanUpPeriod,
		AllowedUnsafeSysctls: opts.AllowedUnsafeSysctls, Admit: opts.Admit,
		AppArmor: hostnode.AppArmorEnabled(),
	})
	if err != nil {
		return nil, fmt.Errorf("cri provider: %w", err)
	}
	gc := newImageGC(opts.Clock, opts.ImageGCHighPercent, opts.ImageGCLowPercent, opts.ImageMinimumGCAge)
	return &Provider{Manager: m, opts: opts, host: host, runtime: rt, imageGC: gc,
		hostStats: newHostStats(cgroupFS, "/proc")}, nil
}

// Run keeps the snapshot of the runtime current (relist and container
// events) and runs the pod lifecycle until ctx ends. The pods keep running
// in the runtime after it returns.
func (p *Provider) Run(ctx context.Context) error {
	if err := EnsureQOSCgroups(); err != nil {
		// The runtime still creates each pod's cgroup with its parents.
		klog.FromContext(ctx).Error(err, "Unable to create the QoS cgroups")
	}
	if err := shareRootDir(p.opts.RootDir); err != nil {
		// Only containers whose mounts propagate need it: the others run.
		klog.FromContext(ctx).Error(err, "Unable to make the root directory a shared mount")
	}
	allocatable := p.host.Allocatable()
	if err := LimitPodsMemory(cgroupFS, allocatable.Memory().Value()); err != nil {
		klog.FromContext(ctx).Error(err, "Unable to limit the pods' memory to the node's allocatable")
	}
	var wg sync.WaitGroup
	if d := p.opts.Devices; d != nil {
		d.Notify(p.NodeStatusChanged)
		wg.Go(func() {
			if err := d.Run(ctx); err != nil {
				klog.FromContext(ctx).Error(err, "Device plugins stopped")
			}
		})
	}
	// The kubelet's pod resources API: <rootDir>/pod-resources/kubelet.sock.
	var held podresources.Devices
	if d, ok := p.opts.Devices.(podresources.Devices); ok {
		held = d
	}
	resources := podresources.New(filepath.Join(p.opts.RootDir, "pod-resources", "kubelet.sock"), p.GetPods, held)
	wg.Go(func() {
		if err := resources.Run(ctx); err != nil {
			klog.FromContext(ctx).Error(err, "The pod resources API stopped")
		}
	})
	wg.Go(func() { p.runtime.run(ctx) })
	wg.Go(func() { p.runtime.watchEvents(ctx) })
	wg.Go(func() { p.listImages(ctx) })
	wg.Go(func() { p.collectImages(ctx) })
	wg.Go(func() { p.runtime.rotateLogs(ctx, p.opts.ContainerLogMaxSize, p.opts.ContainerLogMaxFiles) })
	var err error
	if p.waitForRuntime(ctx) {
		err = p.Manager.Run(ctx)
	}
	wg.Wait()
	p.leaveRootDir(klog.FromContext(ctx))
	p.runtime.conn.close(context.Background())
	return err
}

// leaveRootDir undoes the root directory's binding onto itself
// (unshareRootDir) when nothing is mounted below it: no pod's volume is
// left. A pod whose volumes are all plain directories may still run; its
// containers keep their mounts, and only a Bidirectional mount a container
// makes after this goes unseen on the host until the next agent binds the
// directory again.
func (p *Provider) leaveRootDir(logger klog.Logger) {
	if err := unshareRootDir(p.opts.RootDir); err != nil {
		logger.Error(err, "Unable to undo the root directory's shared mount")
	}
}

// waitForRuntime waits until the runtime answers, through which the pods
// an earlier agent left are found; false when ctx ended first.
func (p *Provider) waitForRuntime(ctx context.Context) bool {
	logger := klog.FromContext(ctx)
	for {
		_, _, err := p.runtime.conn.services(ctx)
		if err == nil {
			return true
		}
		logger.V(2).Info("Waiting for the container runtime", "err", err)
		select {
		case <-ctx.Done():
			return false
		case <-p.opts.Clock.After(redialEvery):
		}
	}
}

// Ping asks the runtime for its status: an error (the node is NotReady
// with it) names the endpoint when the runtime does not answer, and the
// condition that is not true when it does.
func (p *Provider) Ping(ctx context.Context) error {
	rs, _, err := p.runtime.conn.services(ctx)
	if err != nil {
		return err
	}
	st, err := rs.Status(ctx, false)
	if err != nil {
		return fmt.Errorf("container runtime at %s: status: %w", p.opts.Endpoint, err)
	}
	var errs []error
	for _, want := range []string{runtimeapi.RuntimeReady, runtimeapi.NetworkReady} {
		found := false
		for _, c := range st.GetStatus().GetConditions() {
			if c.Type != want {
				continue
			}
			found = true
			if !c.Status {
				errs = append(errs, fmt.Errorf("container runtime %s is false: %s: %s", want, c.Reason, c.Message))
			}
		}
		if !found {
			errs = append(errs, fmt.Errorf("container runtime reports no %s condition", want))
		}
	}
	p.setHandlers(runtimeHandlers(st.GetRuntimeHandlers()))
	if p.runtimeVersion() == "" {
		if v, err := rs.Version(ctx, ""); err == nil {
			p.mu.Lock()
			p.version = v.RuntimeName + "://" + v.RuntimeVersion
			p.mu.Unlock()
			p.NodeStatusChanged()
		}
	}
	return errors.Join(errs...)
}

// setHandlers keeps the runtime's handlers for the node's status, which is
// reported at once when they change.
func (p *Provider) setHandlers(handlers []corev1.NodeRuntimeHandler) {
	p.runtime.setHandlers(handlers)
	p.mu.Lock()
	changed := !equality.Semantic.DeepEqual(p.handlers, handlers)
	p.handlers = handlers
	p.mu.Unlock()
	if changed {
		p.NodeStatusChanged()
	}
}

// runtimeHandlers are the runtime's handlers and their features as the
// node's status lists them, as the kubelet does: the default handler
// (named "") first, then by name.
func runtimeHandlers(list []*runtimeapi.RuntimeHandler) []corev1.NodeRuntimeHandler {
	var out []corev1.NodeRuntimeHandler
	for _, h := range list {
		out = append(out, corev1.NodeRuntimeHandler{Name: h.GetName(), Features: &corev1.NodeRuntimeHandlerFeatures{
			RecursiveReadOnlyMounts: ptr.To(h.GetFeatures().GetRecursiveReadOnlyMounts()),
			UserNamespaces:          ptr.To(h.GetFeatures().GetUserNamespaces()),
		}})
	}
	sort.SliceStable(out, func(i, j int) bool {
		if (out[i].Name == "") != (out[j].Name == "") {
			return out[i].Name == ""
		}
		return out[i].Name < out[j].Name
	})
	return out
}

func (p *Provider) runtimeVersion() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.version
}

// ConfigureNode describes the host, Ready (the node controller makes it
// False while Ping fails), the runtime's version, the images it has and
// the CSI volumes in use.
func (p *Provider) ConfigureNode(_ context.Context, node *corev1.Node) {
	p.host.Describe(node)
	s := &node.Status
	p.host.SetReady(s)
	s.NodeInfo.ContainerRuntimeVersion = p.runtimeVersion()
	p.mu.Lock()
	s.Images = append([]corev1.ContainerImage(nil), p.images...)
	s.RuntimeHandlers = append([]corev1.NodeRuntimeHandler(nil), p.handlers...)
	p.mu.Unlock()
	s.VolumesInUse = nil
	if inUse := p.VolumesInUse(); len(inUse) > 0 {
		s.VolumesInUse = inUse
	}
	if p.opts.Devices != nil {
		capacity, allocatable := p.opts.Devices.Resources()
		for name, q := range capacity {
			s.Capacity[name] = q
			s.Allocatable[name] = allocatable[name]
		}
	}
}

// Images listed in node status, as the kubelet's nodeStatusMaxImages.
const maxNodeImages = 50

// imageListPeriod is how often the runtime's images are listed for the
// node's status.
const imageListPeriod = 10 * time.Second

// listImages keeps the node's image list, largest first, current.
func (p *Provider) listImages(ctx context.Context) {
	for {
		if _, is, err := p.runtime.conn.services(ctx); err == nil {
			if list, err := is.ListImages(ctx, nil); err == nil {
				p.imageGC.detected(list)
				sort.Slice(list, func(i, j int) bool { return list[i].Size > list[j].Size })
				var images []corev1.ContainerImage
				for _, img := range list {
					if len(images) == maxNodeImages {
						break
					}
					names := append(append([]string{}, img.RepoDigests...), img.RepoTags...)
					if len(names) == 0 {
						continue
					}
					images = append(images, corev1.ContainerImage{Names: names, SizeBytes: int64(img.Size)})
				}
				p.mu.Lock()
				changed := !equality.Semantic.DeepEqual(p.images, images)
				p.images = images
				p.mu.Unlock()
				if changed {
					p.NodeStatusChanged()
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-p.opts.Clock.After(imageListPeriod):
		}
	}
}

// imageGCPeriod is how often the image filesystem is looked at, as the
// kubelet's.
const imageGCPeriod = 5 * time.Minute

// collectImages removes unused images whenever the image filesystem is
// too full.
func (p *Provider) collectImages(ctx context.Context) {
	gc := p.imageGC
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.opts.Clock.After(imageGCPeriod):
		}
		rs, is, err := p.runtime.conn.services(ctx)
		if err != nil {
			continue
		}
		if _, err := gc.collect(ctx, rs, is); err != nil && ctx.Err() == nil {
			klog.FromContext(ctx).Error(err, "Image garbage collection failed")
		}
	}
}

// DeleteUnusedImages removes every image no container uses (and first
// seen at least the minimum GC age ago): what the eviction manager
// reclaims under disk pressure before it evicts a pod.
func (p *Provider) DeleteUnusedImages(ctx context.Context) error {
	rs, is, err := p.runtime.conn.services(ctx)
	if err != nil {
		return err
	}
	freed, err := p.imageGC.removeUnused(ctx, rs, is)
	klog.FromContext(ctx).V(2).Info("Removed unused images", "freed", freed)
	return err
}

// DeleteDeadContainers removes the exited containers of the node's pods
// but each container's latest attempt, which its status is computed from:
// what the eviction manager reclaims under disk pressure.
func (p *Provider) DeleteDeadContainers(ctx context.Context) error {
	rs, _, err := p.runtime.conn.services(ctx)
	if err != nil {
		return err
	}
	p.runtime.mu.Lock()
	sandboxes := make([]*criSandbox, 0, len(p.runtime.sandboxes))
	for _, sb := range p.runtime.sandboxes {
		sandboxes = append(sandboxes, sb)
	}
	p.runtime.mu.Unlock()
	for _, sb := range sandboxes {
		sb.mu.Lock()
		latest := map[string]int{}
		for name, list := range sb.containers {
			if len(list) > 0 {
				latest[name] = list[len(list)-1].status.Attempt
			}
		}
		sb.mu.Unlock()
		for name, attempt := range latest {
			sb.removeDeadBefore(ctx, rs, name, attempt)
		}
		sb.refresh(ctx, rs)
	}
	return nil
}
