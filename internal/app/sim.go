package app

import (
	"context"
	"fmt"
	"hash/fnv"
	"path/filepath"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/agent"
	"github.com/nodelet/nodelet/pkg/config"
	"github.com/nodelet/nodelet/pkg/providers/sim"
	"github.com/nodelet/nodelet/pkg/stage"
	"github.com/nodelet/nodelet/pkg/stagewatch"
)

// providerFunc makes the provider of each node as cfg.Provider says: the
// one place that knows which providers there are.
func providerFunc(cfg *config.Config, layout *nodeLayout, stages *simStages) agent.NewProviderFunc {
	if cfg.RunsHostPods() {
		return hostProvider(cfg)
	}
	return simProvider(cfg, layout, stages)
}

// simStages is where the sim providers' stages come from: the files of
// sim.stages, read once when the agent builds its nodes (not in New), and
// with sim.enableCRDs [Stage] the cluster's Stage objects too, which a
// loop of the agent keeps in live.
type simStages struct {
	files func() (stage.Lifecycle, error)
	live  *stage.Set // nil without the cluster's
}

func newSimStages(cfg *config.Config) *simStages {
	s := &simStages{}
	if slices.Contains(cfg.Sim.EnableCRDs, config.CRDStage) {
		s.live = stage.NewSet(nil)
	}
	paths := slices.Clone(cfg.Sim.Stages)
	s.files = sync.OnceValues(func() (stage.Lifecycle, error) {
		l, err := stage.LoadLifecycle(paths...)
		if err == nil && s.live != nil {
			// Before the watch, which stores the files' and the
			// cluster's, reads them.
			s.live.Store(l)
		}
		return l, err
	})
	return s
}

// source is what the sim providers play: nil (the built-in lifecycle),
// the files' stages, or the live set.
func (s *simStages) source() (stage.Source, error) {
	files, err := s.files()
	switch {
	case err != nil:
		return nil, err
	case s.live != nil:
		return s.live, nil
	case len(files) > 0:
		return files, nil
	}
	return nil, nil
}

// loop is the agent's loop that keeps live to the cluster's Stages, or
// nil without it.
func (s *simStages) loop() agent.LoopFunc {
	if s.live == nil {
		return nil
	}
	return func(ctx context.Context, rc *rest.Config, recorder record.EventRecorder) error {
		files, err := s.files()
		if err != nil {
			return fmt.Errorf("stages: %w", err)
		}
		dyn, err := dynamic.NewForConfig(rc)
		if err != nil {
			return fmt.Errorf("stages: %w", err)
		}
		disc, err := discovery.NewDiscoveryClientForConfig(rc)
		if err != nil {
			return fmt.Errorf("stages: %w", err)
		}
		w := stagewatch.New(dyn, disc, s.live, files)
		w.Recorder = recorder
		return w.Run(ctx)
	}
}

// simProvider makes a sim provider for each node, placed by layout; its
// pods wait for the attach of their volumes when the agent attaches them.
func simProvider(cfg *config.Config, layout *nodeLayout, stages *simStages) agent.NewProviderFunc {
	conditions := make([]sim.NodeCondition, 0, len(cfg.Sim.NodeConditions))
	for _, c := range cfg.Sim.NodeConditions {
		conditions = append(conditions, sim.NodeCondition{
			Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message,
			Every: c.Every.Duration, For: c.For.Duration, NodeRatio: ptr.Deref(c.NodeRatio, 1),
		})
	}
	return func(env *agent.Env) (agent.Provider, error) {
		// The stage files were checked with the config; read once, the
		// compiled stages are shared by every node.
		source, err := stages.source()
		if err != nil {
			return nil, fmt.Errorf("sim provider: %w", err)
		}
		name, i := env.Node.Name, env.Node.Index
		seed := fnv.New64a()
		seed.Write([]byte(name)) // each node draws its own jitter, the same on every run
		address, podCIDR, zone, capacity := cfg.Address, "", "", cfg.Sim.Capacity
		if taken := env.Node.Node; taken != nil {
			// A Node taken over is described as its creator wrote it.
			address, podCIDR, capacity = takenNode(cfg, layout, taken)
		} else {
			if a := layout.address(i); a != "" {
				address = a
			}
			podCIDR, zone = layout.podCIDR(i), layout.zone(i)
		}
		opts := sim.Options{
			NodeName:       name,
			PodCIDR:        podCIDR,
			Address:        address,
			Zone:           zone,
			Region:         cfg.Sim.Region,
			InstanceType:   cfg.Sim.InstanceType,
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
			Capacity:       capacity,
			Version:        env.Version,
			PingErrorFile:  filepath.Join(cfg.RootDir, "sim", name, "ping-error"),
			Usage: sim.Usage{
				CPURequestRatio:    ptr.Deref(cfg.Sim.Usage.CPURequestRatio, 0.5),
				MemoryRequestRatio: ptr.Deref(cfg.Sim.Usage.MemoryRequestRatio, 0.5),
				Noise:              cfg.Sim.Usage.Noise,
			},
			Pressure: env.NodeConditions,
			Admit:    env.Admit,
		}
		if env.Volumes != nil {
			opts.Volumes = env.Volumes
		}
		if source != nil {
			opts.Stages, opts.Events = source, env.Recorder
			if env.Client != nil {
				opts.API = stageAPI{env.Client}
			}
		}
		p, err := sim.New(opts)
		if err != nil {
			return nil, fmt.Errorf("sim provider: %w", err)
		}
		return p, nil
	}
}

// takenNode is where a Node taken over stands, as its creator wrote it:
// its first InternalIP (else the agent's address), its pod range (else
// one of sim.podCIDR's /24s by its name) and its allocatable (else its
// capacity, else sim.capacity), which pods are admitted against, as a
// kubelet admits them and the scheduler places them. (Karpenter's kwok
// provider writes a capacity of only what the NodeClaim asked for, pods: 1
// for one pod, beside the instance type's allocatable.)
func takenNode(cfg *config.Config, layout *nodeLayout, n *corev1.Node) (address, podCIDR string, capacity corev1.ResourceList) {
	address = cfg.Address
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			address = a.Address
			break
		}
	}
	podCIDR = n.Spec.PodCIDR
	if podCIDR == "" {
		podCIDR = layout.takenPodCIDR(n.Name)
	}
	capacity = cfg.Sim.Capacity
	switch {
	case len(n.Status.Allocatable) > 0:
		capacity = n.Status.Allocatable.DeepCopy()
	case len(n.Status.Capacity) > 0:
		capacity = n.Status.Capacity.DeepCopy()
	}
	return address, podCIDR, capacity
}

// stageAPI carries out, with the agent's client, what stages do to a pod
// in the API server.
type stageAPI struct{ client kubernetes.Interface }

func (a stageAPI) PatchPod(ctx context.Context, pod *corev1.Pod, pt types.PatchType, data []byte) error {
	_, err := a.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, pt, data, metav1.PatchOptions{})
	return err
}

func (a stageAPI) DeletePod(ctx context.Context, pod *corev1.Pod) error {
	var zero int64
	return a.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &zero,
		Preconditions:      metav1.NewUIDPreconditions(string(pod.UID)),
	})
}
