// Package app wires nodelet together: API clients, the shared pod informer,
// the providers, the node, pod, volume and config controllers and the
// kubelet API server. New builds every part, in dependency order; Agent.Run
// then starts the informers and every part's loop. It holds no control loop
// of its own.
package app

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/attachdetach"
	"github.com/nodelet/nodelet/pkg/cachetrim"
	"github.com/nodelet/nodelet/pkg/config"
	"github.com/nodelet/nodelet/pkg/lifecycle"
	"github.com/nodelet/nodelet/pkg/node"
	"github.com/nodelet/nodelet/pkg/nodecert"
	"github.com/nodelet/nodelet/pkg/pod"
	"github.com/nodelet/nodelet/pkg/provider"
	"github.com/nodelet/nodelet/pkg/server"
	"github.com/nodelet/nodelet/pkg/stats"
)

// Version is the agent's version, reported as the node's kubelet version.
var Version = "v1.36.3-nodelet"

// Credentials are how the agent authenticates to the API server.
type Credentials struct {
	Config *rest.Config
	// Renew keeps a client certificate from TLS bootstrap current; nil
	// without TLS bootstrap.
	Renew func(context.Context) error
}

// LoadCredentials loads the client configuration: with a bootstrap
// kubeconfig, the node's own client certificate (requested with it when
// none is kept, and kubeconfig written to use it); else kubeconfig, or the
// pod's service account when kubeconfig is empty.
func LoadCredentials(ctx context.Context, kubeconfig, bootstrapKubeconfig string, cfg *config.Config) (*Credentials, error) {
	var creds Credentials
	var err error
	switch {
	case bootstrapKubeconfig != "":
		if creds.Config, creds.Renew, err = bootstrapCredentials(ctx, kubeconfig, bootstrapKubeconfig, cfg); err != nil {
			return nil, err
		}
	case kubeconfig == "":
		creds.Config, err = rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no --kubeconfig given and not running in a cluster: %w", err)
		}
	default:
		if _, err := os.Stat(kubeconfig); err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
		}
		creds.Config, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
		}
	}
	creds.Config.QPS = cfg.KubeAPIQPS
	creds.Config.Burst = int(cfg.KubeAPIBurst)
	creds.Config.UserAgent = "nodelet/" + Version
	return &creds, nil
}

// bootstrapCredentials is TLS bootstrap: one node's identity, its
// certificate kept under the root dir's pki, and kubeconfig (default
// <rootDir>/kubeconfig) written to use it. A kubeconfig that exists with
// other credentials is refused rather than overwritten.
func bootstrapCredentials(ctx context.Context, kubeconfig, bootstrapKubeconfig string, cfg *config.Config) (*rest.Config, func(context.Context) error, error) {
	if cfg.Nodes > 0 {
		return nil, nil, errors.New("--bootstrap-kubeconfig: a node's identity covers one node; run several nodes (--nodes) with a service account or a kubeconfig")
	}
	dir := filepath.Join(cfg.RootDir, "pki")
	if kubeconfig == "" {
		kubeconfig = filepath.Join(cfg.RootDir, "kubeconfig")
	}
	if err := ownedKubeconfig(kubeconfig, filepath.Join(dir, nodecert.Client.File)); err != nil {
		return nil, nil, err
	}
	rc, certs, err := nodecert.ClientConfig(ctx, cfg.NodeName, nodecert.ClientOptions{
		BootstrapKubeconfig: bootstrapKubeconfig, Kubeconfig: kubeconfig, Dir: dir,
	})
	if err != nil {
		return nil, nil, err
	}
	return rc, certs.Run, nil
}

// ownedKubeconfig fails when path is a kubeconfig whose credentials are not
// the certificate in certFile: TLS bootstrap would overwrite it.
func ownedKubeconfig(path, certFile string) error {
	existing, err := clientcmd.LoadFromFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	for name, auth := range existing.AuthInfos {
		if auth.ClientCertificate != certFile || auth.ClientKey != certFile || auth.Token != "" || auth.Exec != nil {
			return fmt.Errorf("kubeconfig %s: user %q has other credentials than the bootstrapped certificate %s; "+
				"with --bootstrap-kubeconfig nodelet writes this file: name a new one", path, name, certFile)
		}
	}
	return nil
}

// Agent is nodelet built and not yet running: its API client, informer
// factories, controllers, providers and kubelet API server, and the loops
// that Run starts.
type Agent struct {
	client      kubernetes.Interface
	broadcaster record.EventBroadcaster
	// factories are started by Run: the pods of the managed nodes, their
	// Nodes, and cluster-wide objects.
	factories []informers.SharedInformerFactory
	// loops are the blocking Run of every part, by the name their errors
	// carry.
	loops map[string]func(context.Context) error
	nodes *node.Controller
	count int // managed nodes
}

// Run builds the agent and runs it until ctx is done (New, then
// Agent.Run), after setting the Go runtime's garbage collector as cfg says
// (goMemoryLimit, goGCPercent) where GOMEMLIMIT and GOGC are not set.
func Run(ctx context.Context, creds *Credentials, cfg *config.Config, remote *config.Controller) error {
	if kv := goRuntimeTuningOf(cfg, os.Getenv).apply(); len(kv) > 0 {
		klog.FromContext(ctx).Info("Tuned the Go garbage collector", kv...)
	}
	a, err := New(creds.Config, cfg, remote)
	if err != nil {
		return err
	}
	if creds.Renew != nil {
		a.loops["client certificate"] = creds.Renew
	}
	return a.Run(ctx)
}

// New builds the agent of cfg, with the client configuration rc. remote,
// when not nil, is the config controller that bootstrapped cfg: it will
// follow the first node's config source annotation, and learn when the
// agent is healthy. New does no I/O beyond what the parts' constructors
// need; Run starts everything.
func New(rc *rest.Config, cfg *config.Config, remote *config.Controller) (_ *Agent, err error) {
	rc = withContentType(rc, cfg.ContentType)
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("create client: %w", err)
	}

	managed, err := managedNodes(cfg)
	if err != nil {
		return nil, err
	}
	if len(managed) == 0 {
		return nil, fmt.Errorf("shard %s of %d nodes holds no node", cfg.Shard, cfg.Nodes)
	}
	broadcaster := record.NewBroadcaster()
	defer func() {
		if err != nil {
			broadcaster.Shutdown()
		}
	}()
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "nodelet", Host: cfg.NodeName})

	names := make([]string, 0, len(managed))
	for _, m := range managed {
		names = append(names, m.name)
	}
	inf := newAgentInformers(client, names)

	// Attach/detach's states of world come first: the providers wait for
	// them. Its controller, which writes through the node controller, comes
	// after that.
	var world *attachdetach.World
	if cfg.AttachDetachEnabled() {
		world, err = newVolumeWorld(client, inf, names, cfg)
		if err != nil {
			return nil, err
		}
	}

	shared := hostShared{probes: lifecycle.NewProbeMetrics(), runtime: lifecycle.NewRuntimeMetrics(),
		stats: stats.NewHost(stats.HostOptions{RootDir: cfg.RootDir})}
	nodes, loops, err := providerNodes(client, recorder, cfg, managed, world, inf.cluster, inf.nodes, shared)
	if err != nil {
		return nil, err
	}
	podProviders := make(map[string]provider.PodLifecycleHandler, len(nodes))
	for _, n := range nodes {
		pods, ok := n.Provider.(provider.PodLifecycleHandler)
		if !ok {
			return nil, fmt.Errorf("provider of node %s runs no pods", n.Template.Name)
		}
		podProviders[n.Template.Name] = pods
	}

	nodeOpts := node.Options{
		LeaseDuration:        secondsToDuration(cfg.NodeLeaseDurationSeconds),
		StatusReportInterval: cfg.NodeStatusReportFrequency.Duration,
		PingInterval:         cfg.PingInterval.Duration,
		Workers:              node.WorkersFor(len(managed)),
	}
	if remote != nil {
		nodeOpts.Conditions = remote.Conditions
	}
	nodeCtrl, err := node.NewController(client, nodes, nodeOpts)
	if err != nil {
		return nil, fmt.Errorf("node controller: %w", err)
	}
	if err := nodeCtrl.WatchNodes(inf.nodes.Core().V1().Nodes()); err != nil {
		return nil, err
	}
	loops["node controller"] = nodeCtrl.Run

	var volumes *attachdetach.Controller
	if world != nil {
		if volumes, err = newVolumeController(world, nodeCtrl, recorder, cfg); err != nil {
			return nil, err
		}
		loops["volume controller"] = volumes.Run
	}

	registry, err := newRegistry(remote)
	if err != nil {
		return nil, err
	}
	if err := registerVolumeMetrics(registry, volumes); err != nil {
		return nil, err
	}
	if err := registry.Register(shared.runtime); err != nil {
		return nil, fmt.Errorf("register runtime metrics: %w", err)
	}
	var srv *server.Server
	if cfg.ServerEnabled() {
		probeRegistry := prometheus.NewRegistry()
		if err := probeRegistry.Register(shared.probes); err != nil {
			return nil, fmt.Errorf("register probe metrics: %w", err)
		}
		addresses := map[string]string{}
		for _, m := range managed {
			if m.address != "" {
				addresses[m.name] = m.address
			}
		}
		nodeStats := newStatsSource(shared.stats, podProviders, addresses)
		srv, err = kubeletServer(client, podProviders, cfg, promhttp.HandlerFor(registry, promhttp.HandlerOpts{}),
			promhttp.HandlerFor(probeRegistry, promhttp.HandlerOpts{}), nodeStats)
		if err != nil {
			return nil, err
		}
		loops["kubelet API server"] = srv.Run
	}

	podCtrl, err := pod.NewController(client, inf.pods.Core().V1().Pods(), podProviders, recorder, pod.Options{
		Workers:            int(cfg.PodWorkers),
		StatusPollInterval: cfg.PodStatusPollInterval.Duration,
	})
	if err != nil {
		return nil, fmt.Errorf("pod controller: %w", err)
	}
	if err := podCtrl.Register(registry); err != nil {
		return nil, fmt.Errorf("register pod metrics: %w", err)
	}
	loops["pod controller"] = podCtrl.Run

	static, err := staticPods(client, recorder, cfg, inf.pods, inf.nodes, podProviders)
	if err != nil {
		return nil, err
	}
	if static != nil {
		loops["static pods"] = static
	}

	if remote != nil {
		// The first node is the agent's: its annotation names the config.
		base := names[0]
		if err := remote.Watch(inf.nodes.Core().V1().Nodes(), base); err != nil {
			return nil, err
		}
		remote.OnChange(nodeCtrl.ReportAllStatus)
		healthy := func() bool {
			return closed(nodeCtrl.Ready()) && closed(podCtrl.Synced()) && nodeCtrl.NodeReady(base) &&
				(srv == nil || closed(srv.Serving()))
		}
		loops["config controller"] = func(ctx context.Context) error {
			return remote.Run(ctx, client, recorder, healthy)
		}
	}

	if cfg.HealthzPort > 0 {
		addr := net.JoinHostPort(cfg.HealthzBindAddress, strconv.Itoa(int(cfg.HealthzPort)))
		loops["healthz"] = server.NewHealthz(addr, func() error {
			return agentHealth(nodeCtrl.Ready(), podCtrl.Synced(), srv)
		}).Run
	}

	return &Agent{
		client:      client,
		broadcaster: broadcaster,
		factories:   []informers.SharedInformerFactory{inf.pods, inf.nodes, inf.cluster},
		loops:       loops,
		nodes:       nodeCtrl,
		count:       len(names),
	}, nil
}

// Run starts the informers and every loop, and returns once they have all
// returned: when ctx is done, or when one fails, which stops the others.
// The error joins those of the loops, each named, less context.Canceled;
// with a remote config it may be config.ErrRestart, when the agent must
// restart to use a newly assigned config. Run is called once.
func (a *Agent) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	a.broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: a.client.CoreV1().Events("")})
	defer a.broadcaster.Shutdown()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, f := range a.factories {
		f.Start(ctx.Done())
		defer f.Shutdown()
	}

	errs := make(chan error, len(a.loops))
	var wg sync.WaitGroup
	for name, run := range a.loops {
		wg.Go(func() {
			if err := run(ctx); err != nil {
				errs <- fmt.Errorf("%s: %w", name, err)
				cancel()
			}
		})
	}
	go func() {
		select {
		case <-a.nodes.Ready():
			logger.Info("Nodes registered", "count", a.count)
		case <-ctx.Done():
		}
	}()
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		if !errors.Is(err, context.Canceled) {
			all = append(all, err)
		}
	}
	return errors.Join(all...)
}

// newRegistry is the registry of the metrics served at the kubelet API's
// /metrics: the Go runtime's, the process's and the config controller's.
func newRegistry(remote *config.Controller) (*prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if remote != nil {
		if err := remote.Register(reg); err != nil {
			return nil, fmt.Errorf("register config metrics: %w", err)
		}
	}
	return reg, nil
}

// agentHealth is what /healthz reports: nil once every node is registered,
// the pods are synced and the kubelet API, if any, serves; else what is
// missing.
func agentHealth(registered, synced <-chan struct{}, srv *server.Server) error {
	var missing []error
	if !closed(registered) {
		missing = append(missing, errors.New("nodes not registered yet"))
	}
	if !closed(synced) {
		missing = append(missing, errors.New("pods not synced yet"))
	}
	if srv != nil && !closed(srv.Serving()) {
		missing = append(missing, errors.New("kubelet API not serving yet"))
	}
	return errors.Join(missing...)
}

// closed tells whether ch is closed.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// withContentType is a copy of rc whose requests are encoded as
// contentType, which it also asks for (and JSON, which everything has,
// after protobuf, which not everything has).
func withContentType(rc *rest.Config, contentType string) *rest.Config {
	rc = rest.CopyConfig(rc)
	rc.ContentType, rc.AcceptContentTypes = contentType, contentType
	if contentType == config.ContentTypeProtobuf {
		rc.AcceptContentTypes += "," + config.ContentTypeJSON
	}
	return rc
}

// agentInformers are the agent's shared informer factories, which Run
// starts: the pods bound to the managed nodes, those Nodes, and
// cluster-wide objects. Every informer they make trims what it caches
// (cachetrim): with thousands of pods, managedFields alone would be a
// large part of the agent's heap.
type agentInformers struct {
	pods, nodes, cluster informers.SharedInformerFactory
}

func newAgentInformers(client kubernetes.Interface, names []string) agentInformers {
	return agentInformers{
		pods: cachetrim.NewFactory(client, cachetrim.Transform, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = podSelector(names).String()
		})),
		// The last-applied status is read from a fresh GET only.
		nodes: cachetrim.NewFactory(client, cachetrim.Dropping(node.LastAppliedAnnotation), informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			if len(names) == 1 {
				o.FieldSelector = fields.OneTermEqualSelector("metadata.name", names[0]).String()
			}
		})),
		cluster: cachetrim.NewFactory(client, cachetrim.Transform),
	}
}

// podSelector selects the pods bound to names: exactly one node's by field
// selector, or every bound pod when there are several (filtered by index).
func podSelector(names []string) fields.Selector {
	if len(names) == 1 {
		return fields.OneTermEqualSelector("spec.nodeName", names[0])
	}
	return fields.OneTermNotEqualSelector("spec.nodeName", "")
}

func nodeTemplate(name string, cfg *config.Config) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{},
		Annotations: map[string]string{ManagedAttachDetachAnnotation: strconv.FormatBool(!cfg.AttachDetachEnabled())}}}
	for k, v := range cfg.NodeLabels {
		n.Labels[k] = v
	}
	n.Spec.Taints = append([]corev1.Taint(nil), cfg.RegisterWithTaints...)
	return n
}

func secondsToDuration(s int32) time.Duration { return time.Duration(s) * time.Second }
