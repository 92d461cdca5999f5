// Package app wires nodelet together: API clients, the shared pod informer,
// the providers, and the node and pod controllers. It holds no control loop
// of its own.
package app

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
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
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/attachdetach"
	"github.com/nodelet/nodelet/pkg/config"
	"github.com/nodelet/nodelet/pkg/node"
	"github.com/nodelet/nodelet/pkg/pod"
	"github.com/nodelet/nodelet/pkg/provider"
	"github.com/nodelet/nodelet/pkg/provider/sim"
	"github.com/nodelet/nodelet/pkg/server"
)

// Version is the agent's version, reported as the node's kubelet version.
var Version = "v1.36.3-nodelet"

// RESTConfig loads the client configuration from kubeconfig, or from the
// pod's service account when kubeconfig is empty.
func RESTConfig(kubeconfig string, cfg *config.Config) (*rest.Config, error) {
	var rc *rest.Config
	var err error
	if kubeconfig == "" {
		rc, err = rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no --kubeconfig given and not running in a cluster: %w", err)
		}
	} else {
		if _, err := os.Stat(kubeconfig); err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
		}
		rc, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
		}
	}
	rc.QPS = cfg.KubeAPIQPS
	rc.Burst = int(cfg.KubeAPIBurst)
	rc.UserAgent = "nodelet/" + Version
	return rc, nil
}

// Run runs the agent until ctx is done. remote, when not nil, is the config
// controller that bootstrapped cfg: it follows the first node's config
// source annotation, and Run returns config.ErrRestart when the agent must
// restart to use a newly assigned config.
func Run(ctx context.Context, rc *rest.Config, cfg *config.Config, remote *config.Controller) error {
	logger := klog.FromContext(ctx)
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("create client: %w", err)
	}

	managed, err := managedNodes(cfg)
	if err != nil {
		return err
	}
	if len(managed) == 0 {
		return fmt.Errorf("shard %s of %d nodes holds no node", cfg.Shard, cfg.Nodes)
	}
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "nodelet", Host: cfg.NodeName})

	names := make([]string, 0, len(managed))
	for _, m := range managed {
		names = append(names, m.name)
	}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = podSelector(names).String()
		}))
	nodeFactory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			if len(names) == 1 {
				o.FieldSelector = fields.OneTermEqualSelector("metadata.name", names[0]).String()
			}
		}))
	clusterFactory := informers.NewSharedInformerFactory(client, 0)

	// Attach/detach comes first: the providers wait for it.
	var volumes *attachdetach.Controller
	volumeWriter := &laterWriter{}
	if cfg.AttachDetachEnabled() {
		volumes, err = newVolumeController(client, volumeInformers{pods: factory, nodes: nodeFactory, cluster: clusterFactory},
			names, volumeWriter, recorder, cfg)
		if err != nil {
			return err
		}
	}

	var nodes []node.Node
	var loops map[string]func(context.Context) error
	switch cfg.Provider {
	case config.ProviderProcess, config.ProviderCRI:
		nodes, loops, err = hostNode(client, recorder, cfg, clusterFactory, nodeFactory)
	default:
		nodes, err = simNodes(managed, cfg, volumes)
	}
	if err != nil {
		return err
	}
	podProviders := make(map[string]provider.PodLifecycleHandler, len(nodes))
	for _, n := range nodes {
		pods, ok := n.Provider.(provider.PodLifecycleHandler)
		if !ok {
			return fmt.Errorf("provider of node %s runs no pods", n.Template.Name)
		}
		podProviders[n.Template.Name] = pods
	}
	if loops == nil {
		loops = map[string]func(context.Context) error{}
	}
	registry, err := newRegistry(remote)
	if err != nil {
		return err
	}
	if err := registerVolumeMetrics(registry, volumes); err != nil {
		return err
	}
	var srv *server.Server
	if cfg.ServerEnabled() {
		srv, err = kubeletServer(client, podProviders, cfg, promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
		if err != nil {
			return err
		}
		loops["kubelet API server"] = srv.Run
	}

	nodeOpts := node.Options{
		LeaseDuration:        secondsToDuration(cfg.NodeLeaseDurationSeconds),
		StatusReportInterval: cfg.NodeStatusReportFrequency.Duration,
		PingInterval:         cfg.PingInterval.Duration,
		Workers:              min(max(len(managed)/100, 8), 64),
	}
	if remote != nil {
		nodeOpts.Conditions = remote.Conditions
	}
	nodeCtrl, err := node.NewController(client, nodes, nodeOpts)
	if err != nil {
		return fmt.Errorf("node controller: %w", err)
	}
	volumeWriter.w = nodeCtrl
	if volumes != nil {
		loops["volume controller"] = volumes.Run
	}
	if err := nodeCtrl.WatchNodes(nodeFactory.Core().V1().Nodes()); err != nil {
		return err
	}

	podCtrl, err := pod.NewController(client, factory.Core().V1().Pods(), podProviders, recorder, pod.Options{
		Workers:            int(cfg.PodWorkers),
		StatusPollInterval: cfg.PodStatusPollInterval.Duration,
	})
	if err != nil {
		return fmt.Errorf("pod controller: %w", err)
	}

	if remote != nil {
		// The first node is the agent's: its annotation names the config.
		base := names[0]
		if err := remote.Watch(nodeFactory.Core().V1().Nodes(), base); err != nil {
			return err
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

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	nodeFactory.Start(ctx.Done())
	defer nodeFactory.Shutdown()
	clusterFactory.Start(ctx.Done())
	defer clusterFactory.Shutdown()

	loops["node controller"] = nodeCtrl.Run
	loops["pod controller"] = podCtrl.Run
	errs := make(chan error, len(loops))
	var wg sync.WaitGroup
	for name, run := range loops {
		wg.Go(func() {
			if err := run(ctx); err != nil {
				errs <- fmt.Errorf("%s: %w", name, err)
				cancel()
			}
		})
	}
	go func() {
		select {
		case <-nodeCtrl.Ready():
			logger.Info("Nodes registered", "count", len(names))
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

// closed tells whether ch is closed.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
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

// simNodes builds a sim provider for each managed node; its pods wait for
// the attach of their volumes by volumes, when not nil.
func simNodes(managed []managedNode, cfg *config.Config, volumes *attachdetach.Controller) ([]node.Node, error) {
	conditions := make([]sim.NodeCondition, 0, len(cfg.Sim.NodeConditions))
	for _, c := range cfg.Sim.NodeConditions {
		conditions = append(conditions, sim.NodeCondition{
			Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message,
			Every: c.Every.Duration, For: c.For.Duration, NodeRatio: ptr.Deref(c.NodeRatio, 1),
		})
	}
	nodes := make([]node.Node, 0, len(managed))
	for _, m := range managed {
		seed := fnv.New64a()
		seed.Write([]byte(m.name)) // each node draws its own jitter, the same on every run
		opts := sim.Options{
			NodeName:       m.name,
			PodCIDR:        m.podCIDR,
			Address:        cfg.Address,
			Port:           cfg.Port,
			StartDelay:     cfg.Sim.StartDelay.Duration,
			StartJitter:    cfg.Sim.StartJitter.Duration,
			DeleteDelay:    cfg.Sim.DeleteDelay.Duration,
			DeleteJitter:   cfg.Sim.DeleteJitter.Duration,
			CompleteRatio:  cfg.Sim.CompleteRatio,
			FailRatio:      cfg.Sim.FailRatio,
			RunDuration:    cfg.Sim.RunDuration.Duration,
			RunJitter:      cfg.Sim.RunJitter.Duration,
			NodeConditions: conditions,
			Seed:           seed.Sum64(),
			Capacity:       cfg.Sim.Capacity,
			Version:        Version,
			PingErrorFile:  filepath.Join(cfg.RootDir, "sim", m.name, "ping-error"),
		}
		if volumes != nil {
			opts.Volumes = volumes
		}
		p, err := sim.New(opts)
		if err != nil {
			return nil, fmt.Errorf("sim provider for node %s: %w", m.name, err)
		}
		nodes = append(nodes, node.Node{Template: nodeTemplate(m.name, cfg), Provider: p})
	}
	return nodes, nil
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
