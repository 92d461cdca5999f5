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
	"sync"
	"time"

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

	"github.com/nodelet/nodelet/pkg/config"
	"github.com/nodelet/nodelet/pkg/node"
	"github.com/nodelet/nodelet/pkg/pod"
	"github.com/nodelet/nodelet/pkg/provider"
	"github.com/nodelet/nodelet/pkg/provider/sim"
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

// Run runs the agent until ctx is done.
func Run(ctx context.Context, rc *rest.Config, cfg *config.Config) error {
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
	names := make([]string, 0, len(managed))
	nodes := make([]node.Node, 0, len(managed))
	podProviders := make(map[string]provider.PodLifecycleHandler, len(managed))
	simConditions := make([]sim.NodeCondition, 0, len(cfg.Sim.NodeConditions))
	for _, c := range cfg.Sim.NodeConditions {
		simConditions = append(simConditions, sim.NodeCondition{
			Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message,
			Every: c.Every.Duration, For: c.For.Duration, NodeRatio: ptr.Deref(c.NodeRatio, 1),
		})
	}
	for _, m := range managed {
		name := m.name
		names = append(names, name)
		seed := fnv.New64a()
		seed.Write([]byte(name)) // each node draws its own jitter, the same on every run
		p, err := sim.New(sim.Options{
			NodeName:       name,
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
			NodeConditions: simConditions,
			Seed:           seed.Sum64(),
			Capacity:       cfg.Sim.Capacity,
			Version:        Version,
		})
		if err != nil {
			return fmt.Errorf("sim provider for node %s: %w", name, err)
		}
		nodes = append(nodes, node.Node{Template: nodeTemplate(name, cfg), Provider: p})
		podProviders[name] = p
	}

	nodeCtrl, err := node.NewController(client, nodes, node.Options{
		LeaseDuration:        secondsToDuration(cfg.NodeLeaseDurationSeconds),
		StatusReportInterval: cfg.NodeStatusReportFrequency.Duration,
		PingInterval:         cfg.PingInterval.Duration,
		Workers:              min(max(len(managed)/100, 8), 64),
	})
	if err != nil {
		return fmt.Errorf("node controller: %w", err)
	}

	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = podSelector(names).String()
		}))
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "nodelet", Host: cfg.NodeName})

	nodeFactory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			if len(names) == 1 {
				o.FieldSelector = fields.OneTermEqualSelector("metadata.name", names[0]).String()
			}
		}))
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

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	nodeFactory.Start(ctx.Done())
	defer nodeFactory.Shutdown()

	errs := make(chan error, 2)
	var wg sync.WaitGroup
	for name, run := range map[string]func(context.Context) error{"node": nodeCtrl.Run, "pod": podCtrl.Run} {
		wg.Go(func() {
			if err := run(ctx); err != nil {
				errs <- fmt.Errorf("%s controller: %w", name, err)
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

// podSelector selects the pods bound to names: exactly one node's by field
// selector, or every bound pod when there are several (filtered by index).
func podSelector(names []string) fields.Selector {
	if len(names) == 1 {
		return fields.OneTermEqualSelector("spec.nodeName", names[0])
	}
	return fields.OneTermNotEqualSelector("spec.nodeName", "")
}

func nodeTemplate(name string, cfg *config.Config) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
	for k, v := range cfg.NodeLabels {
		n.Labels[k] = v
	}
	n.Spec.Taints = append([]corev1.Taint(nil), cfg.RegisterWithTaints...)
	return n
}

func secondsToDuration(s int32) time.Duration { return time.Duration(s) * time.Second }
