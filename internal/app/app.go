// Package app turns nodelet's configuration into an agent of package
// agent: the nodes, the constructor of each node's provider (the one place
// that knows nodelet's three providers) and the agent's options. It holds
// no loop and does no wiring of its own.
package app

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/agent"
	"github.com/nodelet/nodelet/pkg/config"
	"github.com/nodelet/nodelet/pkg/providers/cri"
)

// Credentials are the command line's way to the API server: a kubeconfig
// (empty: the pod's service account), and with TLS bootstrap the bootstrap
// kubeconfig (Kubeconfig is then where the node's is written).
type Credentials struct {
	Kubeconfig, BootstrapKubeconfig string
}

// Run runs the agent cfg describes until ctx is done, after setting the Go
// runtime's garbage collector as cfg says (goMemoryLimit, goGCPercent)
// where GOMEMLIMIT and GOGC are not set. remote, when not nil, is the
// config controller that bootstrapped cfg.
func Run(ctx context.Context, o Credentials, cfg *config.Config, remote *config.Controller) error {
	if kv := goRuntimeTuningOf(cfg, os.Getenv).apply(); len(kv) > 0 {
		klog.FromContext(ctx).Info("Tuned the Go garbage collector", kv...)
	}
	a, err := New(o, cfg, remote)
	if err != nil {
		return err
	}
	return a.Run(ctx)
}

// New builds the agent cfg describes: its nodes, the provider of each,
// and every option the config sets. It does no I/O.
func New(o Credentials, cfg *config.Config, remote *config.Controller) (*agent.Agent, error) {
	nodes, err := managedNodes(cfg)
	if err != nil {
		return nil, err
	}
	if nodes.Len() == 0 && !cfg.TakesOverNodes() {
		return nil, fmt.Errorf("shard %s of %d nodes holds no node", cfg.Shard, cfg.Nodes)
	}
	layout, err := newNodeLayout(cfg)
	if err != nil {
		return nil, err
	}
	opts, err := agentOptions(o, cfg, layout)
	if err != nil {
		return nil, err
	}
	if remote != nil && nodes.Len() > 0 {
		opts = append(opts, agent.WithRemoteConfig(remote))
	}
	stages, rules := newSimStages(cfg), newSimRules(cfg)
	if loop := stages.loop(); loop != nil && !cfg.RunsHostPods() {
		opts = append(opts, agent.WithLoop("stages", loop))
	}
	if loop := rules.loop(); loop != nil && !cfg.RunsHostPods() {
		opts = append(opts, agent.WithLoop("kwok rules", loop))
	}
	return agent.New(nodes, providerFunc(cfg, layout, stages, rules), opts...)
}

// NewProvider is the constructor of the providers cfg asks for, as New
// gives it to the agent; the cluster's Stages and other kwok objects
// (sim.enableCRDs), which loops of the agent watch, are not among its
// stages and rules.
func NewProvider(cfg *config.Config) (agent.NewProviderFunc, error) {
	layout, err := newNodeLayout(cfg)
	if err != nil {
		return nil, err
	}
	stages, rules := newSimStages(cfg), newSimRules(cfg)
	stages.live, rules.kinds = nil, nil
	return providerFunc(cfg, layout, stages, rules), nil
}

// agentOptions turns the config and the command line's credentials into
// the agent's options.
func agentOptions(o Credentials, cfg *config.Config, layout *nodeLayout) ([]agent.Option, error) {
	opts := []agent.Option{
		agent.WithRootDir(cfg.RootDir),
		agent.WithClientLimits(cfg.KubeAPIQPS, int(cfg.KubeAPIBurst)),
		agent.WithContentType(cfg.ContentType),
		agent.WithNodeOptions(agent.NodeOptions{
			Labels:               cfg.NodeLabels,
			Taints:               cfg.RegisterWithTaints,
			LeaseDuration:        time.Duration(cfg.NodeLeaseDurationSeconds) * time.Second,
			StatusReportInterval: cfg.NodeStatusReportFrequency.Duration,
			PingInterval:         cfg.PingInterval.Duration,
		}),
		agent.WithPodOptions(agent.PodOptions{Workers: int(cfg.PodWorkers), StatusPollInterval: cfg.PodStatusPollInterval.Duration}),
	}
	if cfg.TakesOverNodes() {
		takeOver, err := takeOverOptions(cfg)
		if err != nil {
			return nil, err
		}
		opts = append(opts, takeOver...)
	} else {
		// Eviction and attach/detach do not yet follow nodes taken over.
		opts = append(opts, agent.WithEviction(agent.EvictionOptions{
			Hard: cfg.EvictionHard, Soft: cfg.EvictionSoft,
			SoftGracePeriod: cfg.EvictionSoftGracePeriod, MinimumReclaim: cfg.EvictionMinimumReclaim,
			PressureTransitionPeriod: cfg.EvictionPressureTransitionPeriod.Duration,
			MaxPodGracePeriodSeconds: int64(cfg.EvictionMaxPodGracePeriod),
		}))
	}
	if o.Kubeconfig != "" {
		opts = append(opts, agent.WithKubeconfig(o.Kubeconfig))
	}
	if o.BootstrapKubeconfig != "" {
		opts = append(opts, agent.WithBootstrap(o.BootstrapKubeconfig))
	}
	if cfg.Sim.NodeAddresses != "" {
		opts = append(opts, agent.WithNodeAddress(func(n agent.NodeInfo) string { return layout.address(n.Index) }))
	}
	if cfg.ServerEnabled() {
		opts = append(opts, agent.WithServer(serverOptions(cfg)))
	}
	if cfg.RunsHostPods() {
		opts = append(opts, agent.WithShutdown(shutdownOptions(cfg)))
		cgroups := agent.SystemCgroups{Runtime: cfg.RuntimeCgroups, System: cfg.SystemCgroups}
		if cfg.Provider == config.ProviderCRI {
			cgroups.Pods = cri.PodsCgroup
		}
		opts = append(opts, agent.WithSystemCgroups(cgroups))
	}
	if cfg.StaticPodPath != "" || cfg.StaticPodURL != "" {
		opts = append(opts, agent.WithStaticPods(agent.StaticPodOptions{
			ManifestDir: cfg.StaticPodPath, FileCheckFrequency: cfg.FileCheckFrequency.Duration,
			URL: cfg.StaticPodURL, HTTPCheckFrequency: cfg.HTTPCheckFrequency.Duration,
		}))
	}
	if cfg.AttachDetachEnabled() && !cfg.TakesOverNodes() { // not yet with nodes taken over
		ad := cfg.AttachDetach
		opts = append(opts, agent.WithAttachDetach(agent.AttachDetachOptions{
			Attacher: ad.Attacher, SimLatency: ad.SimLatency.Duration, SimFailureRate: ad.SimFailureRate,
			ReconcilerLoopPeriod: ad.ReconcilerLoopPeriod.Duration, MaxWaitForUnmount: ad.MaxWaitForUnmount.Duration,
			ReconcilerSyncPeriod: ad.ReconcilerSyncPeriod.Duration,
		}))
	}
	if cfg.HealthzPort > 0 {
		opts = append(opts, agent.WithHealthz(net.JoinHostPort(cfg.HealthzBindAddress, strconv.Itoa(int(cfg.HealthzPort)))))
	}
	return opts, nil
}

// takeOverOptions are the Nodes the agent takes over, by kwok's options,
// and how its replicas split them (--shard).
func takeOverOptions(cfg *config.Config) ([]agent.Option, error) {
	want := cfg.NodeSelection()
	sel := agent.NodeSelector{All: want.All, Name: want.Single}
	for _, s := range []struct {
		flag, value string
		into        *labels.Selector
	}{
		{"--manage-nodes-with-annotation-selector", want.Annotations, &sel.Annotations},
		{"--manage-nodes-with-label-selector", want.Labels, &sel.Labels},
	} {
		if s.value == "" {
			continue
		}
		parsed, err := labels.Parse(s.value)
		if err != nil {
			return nil, fmt.Errorf("%s %q: %w", s.flag, s.value, err)
		}
		*s.into = parsed
	}
	opts := []agent.Option{agent.WithNodeSelector(sel)}
	switch cfg.Shard {
	case "":
	case config.ShardAuto:
		opts = append(opts, agent.WithSharding(agent.ShardOptions{
			Group: cfg.ShardGroup, LeaseDuration: time.Duration(cfg.NodeLeaseDurationSeconds) * time.Second,
		}))
	default:
		i, n, err := config.ParseShard(cfg.Shard)
		if err != nil {
			return nil, fmt.Errorf("shard: %w", err)
		}
		opts = append(opts, agent.WithSharding(agent.ShardOptions{Index: i, Count: n}))
	}
	return opts, nil
}

// serverOptions are the kubelet API server's settings from the config.
func serverOptions(cfg *config.Config) agent.ServerOptions {
	return agent.ServerOptions{
		Port:                  cfg.Port,
		NodeName:              cfg.NodeName,
		Hosts:                 []string{cfg.NodeName, cfg.Address},
		TLSCertFile:           cfg.TLSCertFile,
		TLSPrivateKeyFile:     cfg.TLSPrivateKeyFile,
		TLSBootstrap:          cfg.ServerTLSBootstrap,
		CertDir:               filepath.Join(cfg.RootDir, "pki"),
		ClientCAFile:          cfg.Authentication.X509.ClientCAFile,
		WebhookAuthentication: ptr.To(ptr.Deref(cfg.Authentication.Webhook.Enabled, true)),
		Profiling:             ptr.Deref(cfg.EnableProfilingHandler, true),
		Configz:               cfg.KubeletConfiguration(),
		ReadOnlyPort:          cfg.ReadOnlyPort,
	}
}

// shutdownOptions are graceful shutdown's settings from the config.
func shutdownOptions(cfg *config.Config) agent.ShutdownOptions {
	o := agent.ShutdownOptions{GracePeriod: cfg.ShutdownGracePeriod.Duration, CriticalPodsGracePeriod: cfg.ShutdownGracePeriodCriticalPods.Duration}
	for _, g := range cfg.ShutdownGracePeriodByPodPriority {
		o.ByPodPriority = append(o.ByPodPriority, agent.PriorityGracePeriod{
			Priority: g.Priority, GracePeriod: time.Duration(g.ShutdownGracePeriodSeconds) * time.Second,
		})
	}
	return o
}
