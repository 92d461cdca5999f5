package app

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/config"
	"github.com/nodelet/nodelet/pkg/csi"
	"github.com/nodelet/nodelet/pkg/eviction"
	"github.com/nodelet/nodelet/pkg/hostnode"
	"github.com/nodelet/nodelet/pkg/lifecycle"
	"github.com/nodelet/nodelet/pkg/lifecycle/csimount"
	"github.com/nodelet/nodelet/pkg/lifecycle/env"
	"github.com/nodelet/nodelet/pkg/lifecycle/hostvolume"
	"github.com/nodelet/nodelet/pkg/node"
	"github.com/nodelet/nodelet/pkg/nodeshutdown"
	"github.com/nodelet/nodelet/pkg/provider"
	"github.com/nodelet/nodelet/pkg/provider/cri"
	"github.com/nodelet/nodelet/pkg/provider/process"
	"github.com/nodelet/nodelet/pkg/provider/process/sandbox"
	"github.com/nodelet/nodelet/pkg/server"
	"github.com/nodelet/nodelet/pkg/stats"
)

// hostNode builds the one node of a provider that runs pods on this host
// (process or cri), and the loops that supervise its pods and register its
// CSI drivers, with the informers of the caller, who starts them: claims,
// volumes, CSI drivers, volume attachments and RuntimeClasses from cluster,
// and the node (at least) from nodes. Its probes and runtime calls are
// counted in shared's metrics, and its eviction manager reads the host's
// figures there.
func hostNode(client kubernetes.Interface, recorder record.EventRecorder, cfg *config.Config,
	cluster, nodes informers.SharedInformerFactory, shared hostShared) ([]node.Node, map[string]func(context.Context) error, error) {
	reserved := corev1.ResourceList{}
	for _, list := range []corev1.ResourceList{cfg.SystemReserved, cfg.KubeReserved} {
		for name, q := range list {
			sum := reserved[name]
			sum.Add(q)
			reserved[name] = sum
		}
	}

	// CSI volumes: what they read, and who wakes the pods waiting for them.
	sources := []cache.SharedIndexInformer{
		cluster.Core().V1().PersistentVolumeClaims().Informer(),
		cluster.Core().V1().PersistentVolumes().Informer(),
		cluster.Storage().V1().CSIDrivers().Informer(),
		cluster.Storage().V1().VolumeAttachments().Informer(),
		nodes.Core().V1().Nodes().Informer(),
	}
	mounter, err := csimount.New(client, csimount.Sources{
		Claims:      cluster.Core().V1().PersistentVolumeClaims().Lister(),
		Volumes:     cluster.Core().V1().PersistentVolumes().Lister(),
		Drivers:     cluster.Storage().V1().CSIDrivers().Lister(),
		Attachments: cluster.Storage().V1().VolumeAttachments().Lister(),
		Nodes:       nodes.Core().V1().Nodes().Lister(),
		Synced: func() bool {
			for _, inf := range sources {
				if !inf.HasSynced() {
					return false
				}
			}
			return true
		},
	}, csimount.Options{NodeName: cfg.NodeName, RootDir: cfg.RootDir})
	if err != nil {
		return nil, nil, err
	}
	registrar, err := csi.NewRegistrar(client, cfg.NodeName, cfg.RootDir, csi.RegistrarOptions{})
	if err != nil {
		return nil, nil, err
	}

	// The eviction manager and the provider need each other: it evicts
	// the provider's pods, the provider reports its conditions and asks it
	// to admit pods. It reaches the provider through p, set below.
	var p hostProvider
	evictor, err := evictionManager(cfg, recorder, shared.stats, func() hostProvider { return p })
	if err != nil {
		return nil, nil, err
	}
	shutdown := shutdownManager(cfg, recorder, func() hostProvider { return p })
	host := hostnode.Options{
		NodeName: cfg.NodeName, Address: cfg.Address, Port: cfg.Port, RootDir: cfg.RootDir,
		Reserved: reserved, MaxPods: int64(cfg.MaxPods), Version: Version,
		AllowedUnsafeSysctls: cfg.AllowedUnsafeSysctls,
		Pressure:             evictor.SetNodeConditions,
		Admit: func(pod *corev1.Pod) error {
			if err := shutdown.Admit(pod); err != nil {
				return err
			}
			return evictor.Admit(pod)
		},
		NotReady: shutdown.NotReady,
	}
	parts := lifecycle.Parts{
		Volumes: hostvolume.NewManager(client, hostvolume.Options{RootDir: cfg.RootDir, SyncPeriod: cfg.VolumeSyncPeriod.Duration,
			Allocatable: hostnode.New(host).Allocatable}),
		Env:            env.NewGetter(client),
		Recorder:       recorder,
		CSI:            mounter,
		Probes:         shared.probes,
		RuntimeMetrics: shared.runtime,
	}
	switch cfg.Provider {
	case config.ProviderCRI:
		p, err = cri.New(parts, cri.Options{
			Options:  host,
			Endpoint: cfg.ContainerRuntimeEndpoint, RequestTimeout: cfg.RuntimeRequestTimeout.Duration,
			ClusterDNS: cfg.ClusterDNS, ClusterDomain: cfg.ClusterDomain, ResolvConf: cfg.ResolvConf,
			PodLogsDir: cfg.PodLogsDir, ContainerLogsDir: filepath.Join(filepath.Dir(cfg.PodLogsDir), "containers"),
			RuntimeHandler:       runtimeHandlers(cluster),
			ImageGCHighPercent:   int(cfg.ImageGCHighThresholdPercent),
			ImageGCLowPercent:    int(cfg.ImageGCLowThresholdPercent),
			ImageMinimumGCAge:    cfg.ImageMinimumGCAge.Duration,
			ContainerLogMaxSize:  cfg.ContainerLogMaxSize.Value(),
			ContainerLogMaxFiles: int(cfg.ContainerLogMaxFiles),
		})
	default:
		var sandboxes *sandbox.Manager
		sandboxes, err = sandbox.NewManager(sandbox.Options{
			Exe:         shimBinary(),
			RootDir:     cfg.RootDir,
			LogMaxSize:  cfg.ContainerLogMaxSize.Value(),
			LogMaxFiles: int(cfg.ContainerLogMaxFiles),
		})
		if err != nil {
			return nil, nil, fmt.Errorf("process runtime: %w", err)
		}
		p, err = process.New(sandboxes, parts, process.Options{Options: host})
	}
	if err != nil {
		return nil, nil, err
	}
	changed := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { p.VolumesChanged() },
		UpdateFunc: func(any, any) { p.VolumesChanged() },
		DeleteFunc: func(any) { p.VolumesChanged() },
	}
	for _, inf := range sources {
		if _, err := inf.AddEventHandler(changed); err != nil {
			return nil, nil, fmt.Errorf("process provider: watch volume sources: %w", err)
		}
	}
	built := []node.Node{{Template: nodeTemplate(cfg.NodeName, cfg), Provider: p}}
	return built, map[string]func(context.Context) error{
		cfg.Provider + " provider": p.Run,
		"csi driver registry":      registrar.Run,
		"eviction manager":         evictor.Run,
		"control socket":           (&nodeshutdown.Socket{Path: filepath.Join(cfg.RootDir, nodeshutdown.SocketName), Manager: shutdown}).Run,
	}, nil
}

// shutdownManager builds the host node's graceful shutdown from the
// kubelet's settings: it stops the provider's pods as evictions with the
// shutdown's status; provider returns the node's provider once it is built.
func shutdownManager(cfg *config.Config, recorder record.EventRecorder, provider func() hostProvider) *nodeshutdown.Manager {
	byPriority := make([]nodeshutdown.Group, 0, len(cfg.ShutdownGracePeriodByPodPriority))
	for _, g := range cfg.ShutdownGracePeriodByPodPriority {
		byPriority = append(byPriority, nodeshutdown.Group{Priority: g.Priority, Grace: time.Duration(g.ShutdownGracePeriodSeconds) * time.Second})
	}
	return nodeshutdown.New(nodeshutdown.Deps{
		ActivePods: func() []*corev1.Pod { return activePods(provider()) },
		Stop: func(pod *corev1.Pod, grace time.Duration, st corev1.PodStatus) error {
			return provider().Evict(pod, lifecycle.Eviction{Grace: grace, Reason: st.Reason, Message: st.Message, Conditions: st.Conditions})
		},
		NodeConditionsChanged: func() { provider().NodeStatusChanged() },
		Recorder:              recorder,
	}, nodeshutdown.Options{
		NodeName: cfg.NodeName,
		Groups:   nodeshutdown.Groups(cfg.ShutdownGracePeriod.Duration, cfg.ShutdownGracePeriodCriticalPods.Duration, byPriority),
	})
}

// hostShared is what a host node shares with the rest of the agent: the
// metrics of its pod lifecycle (probes, served at /metrics/probes, and
// runtime calls, at /metrics) and the host's figures.
type hostShared struct {
	probes  *lifecycle.ProbeMetrics
	runtime *lifecycle.RuntimeMetrics
	stats   *stats.Host
}

// hostProvider is what a provider of this host's pods is to the agent.
type hostProvider interface {
	provider.PodLifecycleHandler
	provider.NodeProvider
	provider.StatsProvider
	Run(ctx context.Context) error
	VolumesChanged()
	NodeStatusChanged()
	Evict(pod *corev1.Pod, e lifecycle.Eviction) error
}

// imageReclaimer is a host provider that can free disk space of its own
// under disk pressure (cri: dead containers and unused images).
type imageReclaimer interface {
	DeleteDeadContainers(ctx context.Context) error
	DeleteUnusedImages(ctx context.Context) error
}

// evictionManager builds the node-pressure eviction manager of the host
// node, from the kubelet's eviction settings; provider returns the node's
// provider once it is built.
func evictionManager(cfg *config.Config, recorder record.EventRecorder, host *stats.Host, provider func() hostProvider) (*eviction.Manager, error) {
	thresholds, err := eviction.ParseThresholds(cfg.EvictionHard, cfg.EvictionSoft, cfg.EvictionSoftGracePeriod, cfg.EvictionMinimumReclaim)
	if err != nil {
		return nil, fmt.Errorf("eviction thresholds: %w", err)
	}
	deps := eviction.Deps{
		Summary: func(ctx context.Context) (*statsv1alpha1.Summary, error) {
			pods, err := provider().PodStats(ctx)
			if err != nil {
				return nil, err
			}
			node, err := host.NodeStats(ctx, cfg.NodeName)
			if err != nil {
				return nil, err
			}
			return stats.Summary(node, pods), nil
		},
		ActivePods: func() []*corev1.Pod { return activePods(provider()) },
		Evict: func(_ context.Context, pod *corev1.Pod, grace int64, st eviction.EvictionStatus) error {
			failed := evictedStatus(st)
			return provider().Evict(pod, lifecycle.Eviction{
				Grace: time.Duration(grace) * time.Second, Reason: failed.Reason, Message: failed.Message, Conditions: failed.Conditions,
			})
		},
		DeleteDeadContainers: func(ctx context.Context) error {
			if r, ok := provider().(imageReclaimer); ok {
				return r.DeleteDeadContainers(ctx)
			}
			return nil
		},
		DeleteUnusedImages: func(ctx context.Context) error {
			if r, ok := provider().(imageReclaimer); ok {
				return r.DeleteUnusedImages(ctx)
			}
			return nil
		},
		NodeConditionsChanged: func() { provider().NodeStatusChanged() },
		Recorder:              recorder,
	}
	return eviction.New(deps, eviction.Options{
		NodeName:                 cfg.NodeName,
		Thresholds:               thresholds,
		PressureTransitionPeriod: cfg.EvictionPressureTransitionPeriod.Duration,
		MaxPodGracePeriodSeconds: int64(cfg.EvictionMaxPodGracePeriod),
	})
}

// runtimeHandlers resolves RuntimeClasses to their handlers through the
// cluster's RuntimeClass informer.
func runtimeHandlers(cluster informers.SharedInformerFactory) func(string) (string, error) {
	lister := cluster.Node().V1().RuntimeClasses().Lister()
	return func(name string) (string, error) {
		rc, err := lister.Get(name)
		if err != nil {
			return "", err
		}
		return rc.Handler, nil
	}
}

// shimBinary is the nodelet-shim beside this executable, which starts
// sandboxes and supervisors several times faster than nodelet itself; empty
// (nodelet runs them itself) when there is none.
func shimBinary() string {
	self, err := os.Executable()
	if err != nil {
		return ""
	}
	shim := filepath.Join(filepath.Dir(self), "nodelet-shim")
	if fi, err := os.Stat(shim); err != nil || fi.IsDir() {
		return ""
	}
	return shim
}

// kubeletServer builds the kubelet API server of the agent's nodes, with
// the handlers of /metrics and /metrics/probes, and the nodes' stats.
func kubeletServer(client kubernetes.Interface, pods map[string]provider.PodLifecycleHandler, cfg *config.Config,
	metrics, probeMetrics http.Handler, stats *statsSource) (*server.Server, error) {
	var backend server.Backend = &multiNodeBackend{pods: pods}
	if len(pods) == 1 {
		for _, p := range pods {
			backend = p // its optional parts (logs, exec, …) are found on it directly
		}
	}
	srv, err := server.New(client, backend, server.Options{
		Port:                  cfg.Port,
		NodeName:              cfg.NodeName,
		Hosts:                 []string{cfg.NodeName, cfg.Address},
		TLSCertFile:           cfg.TLSCertFile,
		TLSPrivateKeyFile:     cfg.TLSPrivateKeyFile,
		TLSBootstrap:          cfg.ServerTLSBootstrap,
		CertDir:               filepath.Join(cfg.RootDir, "pki"),
		ClientCAFile:          cfg.Authentication.X509.ClientCAFile,
		WebhookAuthentication: ptr.To(ptr.Deref(cfg.Authentication.Webhook.Enabled, true)),
		Metrics:               metrics,
		ProbeMetrics:          probeMetrics,
		Stats:                 stats,
		Addresses:             stats,
		Profiling:             ptr.Deref(cfg.EnableProfilingHandler, true),
	})
	if err != nil {
		return nil, fmt.Errorf("kubelet API server: %w", err)
	}
	return srv, nil
}

// multiNodeBackend serves the pods of several nodes: /pods lists them all,
// and each request about a pod is authorized against its node.
type multiNodeBackend struct {
	pods map[string]provider.PodLifecycleHandler
}

func (b *multiNodeBackend) GetPods(ctx context.Context) ([]*corev1.Pod, error) {
	var out []*corev1.Pod
	for name, p := range b.pods {
		pods, err := p.GetPods(ctx)
		if err != nil {
			return nil, fmt.Errorf("pods of node %s: %w", name, err)
		}
		out = append(out, pods...)
	}
	return out, nil
}

func (b *multiNodeBackend) NodeForPod(namespace, name string) (string, bool) {
	for node, p := range b.pods {
		if _, err := p.GetPod(context.Background(), namespace, name); err == nil {
			return node, true
		}
	}
	return "", false
}
