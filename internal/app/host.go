package app

import (
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/nodelet/nodelet/pkg/agent"
	"github.com/nodelet/nodelet/pkg/config"
	"github.com/nodelet/nodelet/pkg/csi"
	"github.com/nodelet/nodelet/pkg/deviceplugin"
	"github.com/nodelet/nodelet/pkg/hostnode"
	"github.com/nodelet/nodelet/pkg/lifecycle"
	"github.com/nodelet/nodelet/pkg/lifecycle/csimount"
	"github.com/nodelet/nodelet/pkg/lifecycle/env"
	"github.com/nodelet/nodelet/pkg/lifecycle/hostvolume"
	"github.com/nodelet/nodelet/pkg/providers/cri"
	"github.com/nodelet/nodelet/pkg/providers/process"
	"github.com/nodelet/nodelet/pkg/providers/process/sandbox"
)

// hostProvider makes the provider of the one node whose pods run on this
// host (process or cri), on the shared pod lifecycle: its volumes, CSI
// mounts (with the registrar of the host's CSI drivers), probes and
// runtime metrics, and the agent's admission and conditions.
func hostProvider(cfg *config.Config) agent.NewProviderFunc {
	return func(e *agent.Env) (agent.Provider, error) {
		sources := volumeSources(e)
		mounter, err := newCSIMounter(e, cfg, sources)
		if err != nil {
			return nil, err
		}
		registrar, err := csi.NewRegistrar(e.Client, e.Node.Name, cfg.RootDir, csi.RegistrarOptions{})
		if err != nil {
			return nil, err
		}
		e.Go("csi driver registry", registrar.Run)
		probes, runtime := lifecycle.NewProbeMetrics(), lifecycle.NewRuntimeMetrics()
		if err := e.ProbeMetrics.Register(probes); err != nil {
			return nil, fmt.Errorf("register probe metrics: %w", err)
		}
		if err := e.Metrics.Register(runtime); err != nil {
			return nil, fmt.Errorf("register runtime metrics: %w", err)
		}
		host := hostnode.Options{
			NodeName: e.Node.Name, Address: cfg.Address, Port: cfg.Port, RootDir: cfg.RootDir,
			Reserved: reserved(cfg), MaxPods: int64(cfg.MaxPods), Version: e.Version,
			AllowedUnsafeSysctls: cfg.AllowedUnsafeSysctls,
			Pressure:             e.NodeConditions,
			Admit:                e.Admit,
			NotReady:             e.NotReady,
		}
		parts := lifecycle.Parts{
			Volumes: hostvolume.NewManager(e.Client, hostvolume.Options{RootDir: cfg.RootDir, SyncPeriod: cfg.VolumeSyncPeriod.Duration,
				Allocatable: hostnode.New(host).Allocatable}),
			Env:            env.NewGetter(e.Client),
			Recorder:       e.Recorder,
			CSI:            mounter,
			Probes:         probes,
			RuntimeMetrics: runtime,
		}
		p, err := newHostProvider(cfg, host, parts, e.Cluster)
		if err != nil {
			return nil, err
		}
		changed := cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { p.VolumesChanged() },
			UpdateFunc: func(any, any) { p.VolumesChanged() },
			DeleteFunc: func(any) { p.VolumesChanged() },
		}
		for _, inf := range sources {
			if _, err := inf.AddEventHandler(changed); err != nil {
				return nil, fmt.Errorf("watch volume sources: %w", err)
			}
		}
		return p, nil
	}
}

// hostPodProvider is a provider of this host's pods, as the host node
// needs it: it wakes pods waiting on volumes when their sources change.
type hostPodProvider interface {
	agent.Provider
	VolumesChanged()
}

// newHostProvider makes the cri or process provider of the host node.
func newHostProvider(cfg *config.Config, host hostnode.Options, parts lifecycle.Parts, cluster informers.SharedInformerFactory) (hostPodProvider, error) {
	if cfg.Provider == config.ProviderCRI {
		// The kubelet's device plugin directory: <root>/device-plugins.
		devices := deviceplugin.New(filepath.Join(cfg.RootDir, "device-plugins"), deviceplugin.Options{})
		return cri.New(parts, cri.Options{
			Devices:  devices,
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
	}
	sandboxes, err := sandbox.NewManager(sandbox.Options{
		Exe:         shimBinary(),
		RootDir:     cfg.RootDir,
		LogMaxSize:  cfg.ContainerLogMaxSize.Value(),
		LogMaxFiles: int(cfg.ContainerLogMaxFiles),
	})
	if err != nil {
		return nil, fmt.Errorf("process runtime: %w", err)
	}
	return process.New(sandboxes, parts, process.Options{Options: host})
}

// volumeSources are the informers whose objects a pod's CSI volumes are
// resolved from: claims, volumes, CSI drivers, volume attachments and the
// node.
func volumeSources(e *agent.Env) []cache.SharedIndexInformer {
	return []cache.SharedIndexInformer{
		e.Cluster.Core().V1().PersistentVolumeClaims().Informer(),
		e.Cluster.Core().V1().PersistentVolumes().Informer(),
		e.Cluster.Storage().V1().CSIDrivers().Informer(),
		e.Cluster.Storage().V1().VolumeAttachments().Informer(),
		e.Nodes.Core().V1().Nodes().Informer(),
	}
}

// newCSIMounter mounts the node's CSI volumes from what sources cache.
func newCSIMounter(e *agent.Env, cfg *config.Config, sources []cache.SharedIndexInformer) (*csimount.Manager, error) {
	return csimount.New(e.Client, csimount.Sources{
		Claims:      e.Cluster.Core().V1().PersistentVolumeClaims().Lister(),
		Volumes:     e.Cluster.Core().V1().PersistentVolumes().Lister(),
		Drivers:     e.Cluster.Storage().V1().CSIDrivers().Lister(),
		Attachments: e.Cluster.Storage().V1().VolumeAttachments().Lister(),
		Nodes:       e.Nodes.Core().V1().Nodes().Lister(),
		Synced: func() bool {
			for _, inf := range sources {
				if !inf.HasSynced() {
					return false
				}
			}
			return true
		},
	}, csimount.Options{NodeName: e.Node.Name, RootDir: cfg.RootDir})
}

// reserved is what the kubelet's systemReserved and kubeReserved take from
// the node's capacity.
func reserved(cfg *config.Config) corev1.ResourceList {
	sum := corev1.ResourceList{}
	for _, list := range []corev1.ResourceList{cfg.SystemReserved, cfg.KubeReserved} {
		for name, q := range list {
			total := sum[name]
			total.Add(q)
			sum[name] = total
		}
	}
	return sum
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
