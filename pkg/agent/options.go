package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"

	"github.com/nodelet/nodelet/pkg/config"
	"github.com/nodelet/nodelet/pkg/eviction"
	"github.com/nodelet/nodelet/pkg/nodeshutdown"
	"github.com/nodelet/nodelet/pkg/server"
)

// Version is the kubelet version nodelet's nodes report by default.
var Version = "v1.36.3-nodelet"

// Option sets one of an agent's settings.
type Option func(*settings) error

// settings are an agent's options, checked by New.
type settings struct {
	client      clientSource
	qps         float32
	burst       int
	contentType string
	version     string
	rootDir     string
	cgroups     SystemCgroups

	node      NodeOptions
	pods      PodOptions
	addresses func(NodeInfo) string

	server       *server.Options
	eviction     *evictionSettings
	shutdown     []nodeshutdown.Group // of WithShutdown, when shutdownSet
	shutdownSet  bool
	staticPods   *StaticPodOptions
	attachDetach *AttachDetachOptions
	remote       *config.Controller
	selector     *NodeSelector
	shards       *ShardOptions
	healthz      string
	registry     *prometheus.Registry
	loops        map[string]LoopFunc
}

// clientSource is where the agent's API credentials come from: a client
// configuration, a kubeconfig, TLS bootstrap, or (none set) the pod's
// service account.
type clientSource struct {
	config     *rest.Config
	kubeconfig string
	bootstrap  string // bootstrap kubeconfig
}

// WithClientConfig is the agent's API client configuration. Its rate
// limits and content type are overridden by WithClientLimits and
// WithContentType when given.
func WithClientConfig(rc *rest.Config) Option {
	return func(s *settings) error {
		if rc == nil {
			return errors.New("client config: nil")
		}
		s.client.config = rest.CopyConfig(rc)
		return nil
	}
}

// WithKubeconfig reads the agent's API credentials from a kubeconfig file.
// Without any client option the agent uses its pod's service account.
func WithKubeconfig(path string) Option {
	return func(s *settings) error {
		s.client.kubeconfig = path
		return nil
	}
}

// WithBootstrap joins as the kubelet does with TLS bootstrap: the node's
// client certificate is requested with bootstrapKubeconfig's token when no
// valid one is kept under <root dir>/pki, and renewed before it expires;
// the node's kubeconfig is written at WithKubeconfig's path (default
// <root dir>/kubeconfig). A node's identity covers one node.
func WithBootstrap(bootstrapKubeconfig string) Option {
	return func(s *settings) error {
		if bootstrapKubeconfig == "" {
			return errors.New("bootstrap kubeconfig: empty path")
		}
		s.client.bootstrap = bootstrapKubeconfig
		return nil
	}
}

// WithClientLimits sets the API client's rate limit (default 5,000 queries
// per second, bursts of 10,000: a node agent's requests are few per node).
func WithClientLimits(qps float32, burst int) Option {
	return func(s *settings) error {
		if qps <= 0 || burst <= 0 {
			return fmt.Errorf("client limits: qps %v and burst %d must be positive", qps, burst)
		}
		s.qps, s.burst = qps, burst
		return nil
	}
}

// WithContentType sets how requests to the API server are encoded:
// protobuf (the default) or JSON.
func WithContentType(contentType string) Option {
	return func(s *settings) error {
		if contentType != config.ContentTypeProtobuf && contentType != config.ContentTypeJSON {
			return fmt.Errorf("content type %q: want %s or %s", contentType, config.ContentTypeProtobuf, config.ContentTypeJSON)
		}
		s.contentType = contentType
		return nil
	}
}

// WithVersion is the kubelet version the nodes report (default Version).
func WithVersion(v string) Option {
	return func(s *settings) error {
		s.version = v
		return nil
	}
}

// SystemCgroups name the cgroups of a host node's system containers,
// which its stats summary reports beside the node (the kubelet's
// runtimeCgroups, systemCgroups and its pods' cgroup root). Each is a path
// below every hierarchy's root; an empty one is not reported. The agent's
// own cgroup is reported as the kubelet's wherever it runs.
type SystemCgroups struct {
	// Runtime holds the container runtime's processes, System the host's
	// other system processes, Pods the pods' cgroups.
	Runtime, System, Pods string
}

// WithSystemCgroups names the node's system containers' cgroups.
func WithSystemCgroups(c SystemCgroups) Option {
	return func(s *settings) error {
		for _, p := range []string{c.Runtime, c.System, c.Pods} {
			if p != "" && (!strings.HasPrefix(p, "/") || p == "/") {
				return fmt.Errorf("system cgroup %q: must be an absolute path other than the root", p)
			}
		}
		s.cgroups = c
		return nil
	}
}

// WithRootDir is the agent's state directory (default /var/lib/nodelet):
// its certificates, the control socket of graceful shutdown, and the disk
// whose usage is a host node's filesystem stats.
func WithRootDir(dir string) Option {
	return func(s *settings) error {
		if dir == "" {
			return errors.New("root dir: empty")
		}
		s.rootDir = dir
		return nil
	}
}

// NodeOptions are how the nodes register and report.
type NodeOptions struct {
	// Labels and Taints are registered with every node.
	Labels map[string]string
	Taints []corev1.Taint
	// LeaseDuration is the node Lease's duration (default 40s), renewed
	// every quarter of it.
	LeaseDuration time.Duration
	// StatusReportInterval is how often an unchanged status is reported
	// (default 5m).
	StatusReportInterval time.Duration
	// PingInterval is how often each provider is pinged (default 10s).
	PingInterval time.Duration
	// Workers are how many node tasks run at once (default: by the number
	// of nodes, node.WorkersFor).
	Workers int
}

// WithNodeOptions sets how the nodes register and report.
func WithNodeOptions(o NodeOptions) Option {
	return func(s *settings) error {
		if o.LeaseDuration < 0 || o.StatusReportInterval < 0 || o.PingInterval < 0 || o.Workers < 0 {
			return errors.New("node options: durations and workers must not be negative")
		}
		s.node = o
		return nil
	}
}

// PodOptions are how the pods are synced.
type PodOptions struct {
	// Workers are how many pods are synced at once (default 64).
	Workers int
	// StatusPollInterval is how often the pods of providers that do not
	// push their status are polled (default 5s).
	StatusPollInterval time.Duration
}

// WithPodOptions sets how the pods are synced.
func WithPodOptions(o PodOptions) Option {
	return func(s *settings) error {
		if o.Workers < 0 || o.StatusPollInterval < 0 {
			return errors.New("pod options: workers and poll interval must not be negative")
		}
		s.pods = o
		return nil
	}
}

// WithNodeAddress gives each node's own InternalIP where nodes have their
// own (a simulated fleet): the kubelet API then serves a node's stats to
// requests sent to its address.
func WithNodeAddress(address func(NodeInfo) string) Option {
	return func(s *settings) error {
		s.addresses = address
		return nil
	}
}

// ServerOptions are the kubelet API server's settings: where it listens,
// its TLS, authentication and authorization.
type ServerOptions = server.Options

// WithServer runs the kubelet API server (logs, exec, attach,
// port-forward, /pods, stats and metrics) for every node, its own and
// those taken over (WithNodeSelector) while they are, authenticated and
// authorized as the kubelet's. The agent fills in NodeName (when empty,
// the first own node, else the host's name), Metrics, ProbeMetrics,
// Stats and Addresses. TLSBootstrap needs an own node.
func WithServer(o ServerOptions) Option {
	return func(s *settings) error {
		s.server = &o
		return nil
	}
}

// EvictionOptions are node-pressure eviction's settings, as the kubelet's:
// thresholds "signal<quantity" or "signal<percent" by signal
// (memory.available, nodefs.available, nodefs.inodesFree,
// imagefs.available, imagefs.inodesFree, pid.available).
type EvictionOptions struct {
	// Hard thresholds evict at once; "0%" switches a signal off.
	Hard map[string]string
	// Soft thresholds evict once met for the signal's SoftGracePeriod,
	// giving pods at most MaxPodGracePeriodSeconds.
	Soft            map[string]string
	SoftGracePeriod map[string]string
	// MinimumReclaim is, per signal, how much beyond the threshold an
	// eviction frees before it stops.
	MinimumReclaim map[string]string
	// PressureTransitionPeriod is how long a pressure condition stays True
	// after its threshold was last met (default 5m).
	PressureTransitionPeriod time.Duration
	MaxPodGracePeriodSeconds int64
}

// WithEviction watches each node's usage and evicts pods under pressure,
// as the kubelet does, and reports the pressure conditions. Every node's
// provider must be a provider.StatsProvider and a provider.Evicter. With
// several nodes, one loop checks them all in turn and records no Events.
func WithEviction(o EvictionOptions) Option {
	return func(s *settings) error {
		if o.PressureTransitionPeriod < 0 || o.MaxPodGracePeriodSeconds < 0 {
			return errors.New("eviction: pressure transition period and max pod grace period must not be negative")
		}
		thresholds, err := eviction.ParseThresholds(o.Hard, o.Soft, o.SoftGracePeriod, o.MinimumReclaim)
		if err != nil {
			return fmt.Errorf("eviction thresholds: %w", err)
		}
		s.eviction = &evictionSettings{EvictionOptions: o, thresholds: thresholds}
		return nil
	}
}

// evictionSettings are WithEviction's options with their thresholds parsed.
type evictionSettings struct {
	EvictionOptions
	thresholds []eviction.Threshold
}

// ShutdownOptions are graceful node shutdown's settings, as the kubelet's.
type ShutdownOptions struct {
	// GracePeriod is how long the node's pods get to stop in all, of which
	// the critical pods (priority system-cluster-critical and above) get
	// CriticalPodsGracePeriod, after the others.
	GracePeriod, CriticalPodsGracePeriod time.Duration
	// ByPodPriority, when set, replaces both: each pod gets the grace
	// period of the highest priority at or under its own.
	ByPodPriority []PriorityGracePeriod
}

// PriorityGracePeriod is the time pods of a priority and above (up to the
// next) get to stop at the node's shutdown.
type PriorityGracePeriod struct {
	Priority    int32
	GracePeriod time.Duration
}

// WithShutdown serves the control socket under the root dir on which
// `nodelet shutdown` (a systemd unit's ExecStop) stops the node's pods by
// priority before the host goes down; with no grace period the socket
// answers that shutdown is not configured. One node only; its provider
// must be a provider.Evicter.
func WithShutdown(o ShutdownOptions) Option {
	return func(s *settings) error {
		if o.GracePeriod < 0 || o.CriticalPodsGracePeriod < 0 || o.CriticalPodsGracePeriod > o.GracePeriod {
			return errors.New("graceful shutdown: grace periods must not be negative, nor the critical pods' longer than the whole")
		}
		byPriority := make([]nodeshutdown.Group, 0, len(o.ByPodPriority))
		for _, g := range o.ByPodPriority {
			byPriority = append(byPriority, nodeshutdown.Group{Priority: g.Priority, Grace: g.GracePeriod})
		}
		s.shutdown = nodeshutdown.Groups(o.GracePeriod, o.CriticalPodsGracePeriod, byPriority)
		s.shutdownSet = true
		return nil
	}
}

// StaticPodOptions are where static pods come from (the kubelet's
// staticPodPath and staticPodURL).
type StaticPodOptions struct {
	ManifestDir        string
	FileCheckFrequency time.Duration
	URL                string
	HTTPCheckFrequency time.Duration
}

// WithStaticPods runs the pods of manifests in a directory or at a URL on
// the node, with their mirror pods in the API. One node only.
func WithStaticPods(o StaticPodOptions) Option {
	return func(s *settings) error {
		if o.ManifestDir == "" && o.URL == "" {
			return errors.New("static pods: a manifest directory or URL is required")
		}
		s.staticPods = &o
		return nil
	}
}

// Attachers of WithAttachDetach.
const (
	AttacherCSI = config.AttacherCSI
	AttacherSim = config.AttacherSim
)

// AttachDetachOptions are the nodes' own attach/detach controller's
// settings.
type AttachDetachOptions struct {
	// Attacher is AttacherCSI (VolumeAttachments that the drivers'
	// external-attachers carry out; the default) or AttacherSim
	// (simulated, with SimLatency and SimFailureRate).
	Attacher       string
	SimLatency     time.Duration
	SimFailureRate float64
	// ReconcilerLoopPeriod, MaxWaitForUnmount and ReconcilerSyncPeriod are
	// the reconciler's (defaults as the attach/detach controller's).
	ReconcilerLoopPeriod time.Duration
	MaxWaitForUnmount    time.Duration
	ReconcilerSyncPeriod time.Duration
}

// WithAttachDetach attaches and detaches the volumes of the nodes' pods
// itself, in place of the cluster's attach/detach controller, and reports
// them in each node's status; the nodes are registered with the
// volumes.kubernetes.io/controller-managed-attach-detach annotation false.
func WithAttachDetach(o AttachDetachOptions) Option {
	return func(s *settings) error {
		if o.Attacher == "" {
			o.Attacher = AttacherCSI
		}
		if o.Attacher != AttacherCSI && o.Attacher != AttacherSim {
			return fmt.Errorf("attach/detach: attacher %q: want %s or %s", o.Attacher, AttacherCSI, AttacherSim)
		}
		s.attachDetach = &o
		return nil
	}
}

// WithRemoteConfig follows the first node's config source, as c, which
// bootstrapped the agent's config, says: c learns when the agent is
// healthy, its ConfigOK condition is reported with the first node's, and
// its metrics are served.
func WithRemoteConfig(c *config.Controller) Option {
	return func(s *settings) error {
		s.remote = c
		return nil
	}
}

// WithHealthz serves an unauthenticated /healthz at addr (host:port) for
// liveness and readiness probes: healthy once every node is registered,
// the pods are synced and the kubelet API serves.
func WithHealthz(addr string) Option {
	return func(s *settings) error {
		s.healthz = addr
		return nil
	}
}

// WithMetricsRegistry is the registry served at the kubelet API's /metrics,
// to which the agent adds its own metrics (default: a new registry with
// the Go runtime's and the process's).
func WithMetricsRegistry(reg *prometheus.Registry) Option {
	return func(s *settings) error {
		if reg == nil {
			return errors.New("metrics registry: nil")
		}
		s.registry = reg
		return nil
	}
}

// LoopFunc is a loop of the caller's that the agent runs (WithLoop), given
// the agent's API client configuration (a copy, once its credentials are
// known) and its event recorder.
type LoopFunc func(ctx context.Context, rc *rest.Config, recorder record.EventRecorder) error

// WithLoop runs run with the agent's loops, for as long as the agent
// runs: for a loop of the caller's that needs the API, such as the watch
// of kwok's Stage objects that the sim providers play.
func WithLoop(name string, run LoopFunc) Option {
	return func(s *settings) error {
		if name == "" || run == nil {
			return errors.New("loop: a name and a function are required")
		}
		if s.loops == nil {
			s.loops = map[string]LoopFunc{}
		}
		if _, dup := s.loops[name]; dup {
			return fmt.Errorf("loop %q: given twice", name)
		}
		s.loops[name] = run
		return nil
	}
}
