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
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/agent"
	"github.com/nodelet/nodelet/pkg/config"
	"github.com/nodelet/nodelet/pkg/providers/sim"
	"github.com/nodelet/nodelet/pkg/simrules"
	"github.com/nodelet/nodelet/pkg/stage"
	"github.com/nodelet/nodelet/pkg/stagewatch"
)

// providerFunc makes the provider of each node as cfg.Provider says: the
// one place that knows which providers there are.
func providerFunc(cfg *config.Config, layout *nodeLayout, stages *simStages, rules *simRules) agent.NewProviderFunc {
	if cfg.RunsHostPods() {
		return hostProvider(cfg)
	}
	return simProvider(cfg, layout, stages, rules)
}

// simStages is where the sim providers' stages come from: the files of
// sim.stages, read once when the agent builds its nodes (not in New), and
// with sim.enableCRDs [Stage] the cluster's Stage objects too, which a
// loop of the agent keeps in live.
type simStages struct {
	files func() (stage.Lifecycle, error)
	live  *stage.Set // nil without the cluster's

	// nodes are the sim providers by node name, which the agent's
	// informer of its Nodes tells of each change, for their stages for
	// Nodes; handler is the informer's handler, added with the first.
	mu      sync.Mutex
	nodes   map[string]*sim.Provider
	handler cache.ResourceEventHandlerRegistration
}

// follow has p told of each change of its Node.
func (s *simStages) follow(env *agent.Env, p *sim.Provider) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nodes == nil {
		s.nodes = map[string]*sim.Provider{}
	}
	s.nodes[env.Node.Name] = p
	if s.handler != nil || env.Nodes == nil {
		return nil
	}
	h, err := env.Nodes.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    s.nodeChanged,
		UpdateFunc: func(_, obj any) { s.nodeChanged(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if n, ok := obj.(*corev1.Node); ok {
				s.mu.Lock()
				delete(s.nodes, n.Name)
				s.mu.Unlock()
			}
		},
	})
	if err != nil {
		return fmt.Errorf("follow the Nodes for their stages: %w", err)
	}
	s.handler = h
	return nil
}

func (s *simStages) nodeChanged(obj any) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	s.mu.Lock()
	p := s.nodes[n.Name]
	s.mu.Unlock()
	if p != nil {
		p.NodeChanged(n)
	}
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

// simRules is where the sim providers' kwok rules (Logs, Exec,
// PortForward, ResourceUsage and their Cluster kinds) come from: the
// files of sim.stages, read once when the agent builds its nodes, and
// the cluster's objects of the kinds sim.enableCRDs names, which a loop
// of the agent keeps in the set.
type simRules struct {
	set   func() (*simrules.Set, error)
	kinds []simrules.Kind
	// cel is the environment of the usage expressions, on the clock of
	// the sim providers (the wall clock); set with set.
	cel *simrules.CEL
}

func newSimRules(cfg *config.Config) *simRules {
	r := &simRules{}
	for _, name := range cfg.Sim.EnableCRDs {
		if k, ok := simrules.KindNamed(name); ok {
			r.kinds = append(r.kinds, k)
		}
	}
	paths := slices.Clone(cfg.Sim.Stages)
	r.set = sync.OnceValues(func() (*simrules.Set, error) {
		env, err := simrules.NewCEL(clock.RealClock{})
		if err != nil {
			return nil, err
		}
		r.cel = env
		files, err := simrules.Load(env, paths...)
		if err != nil {
			return nil, err
		}
		return simrules.NewSet(files), nil
	})
	return r
}

// source is the sim providers' rules: nil without any.
func (r *simRules) source() (simrules.Source, error) {
	set, err := r.set()
	if err != nil || (len(r.kinds) == 0 && set.Rules().Empty()) {
		return nil, err
	}
	return set, nil
}

// loop is the agent's loop that keeps the set to the cluster's objects,
// or nil without them.
func (r *simRules) loop() agent.LoopFunc {
	if len(r.kinds) == 0 {
		return nil
	}
	return func(ctx context.Context, rc *rest.Config, recorder record.EventRecorder) error {
		set, err := r.set()
		if err != nil {
			return fmt.Errorf("kwok rules: %w", err)
		}
		dyn, err := dynamic.NewForConfig(rc)
		if err != nil {
			return fmt.Errorf("kwok rules: %w", err)
		}
		disc, err := discovery.NewDiscoveryClientForConfig(rc)
		if err != nil {
			return fmt.Errorf("kwok rules: %w", err)
		}
		w := simrules.NewWatcher(dyn, disc, set, r.kinds, r.cel)
		w.Recorder = recorder
		return w.Run(ctx)
	}
}

// simProvider makes a sim provider for each node, placed by layout; its
// pods wait for the attach of their volumes when the agent attaches them.
func simProvider(cfg *config.Config, layout *nodeLayout, stages *simStages, rules *simRules) agent.NewProviderFunc {
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
		ruleSource, err := rules.source()
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
			Rules:    ruleSource,
		}
		if env.Volumes != nil {
			opts.Volumes = env.Volumes
		}
		if source != nil {
			opts.Stages, opts.Events = source, env.Recorder
			if env.Client != nil {
				opts.API, opts.NodeAPI = stageAPI{env.Client}, stageAPI{env.Client}
			}
		}
		p, err := sim.New(opts)
		if err != nil {
			return nil, fmt.Errorf("sim provider: %w", err)
		}
		if source != nil {
			if err := stages.follow(env, p); err != nil {
				return nil, fmt.Errorf("sim provider: %w", err)
			}
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
// or a Node in the API server.
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

func (a stageAPI) PatchNode(ctx context.Context, node *corev1.Node, pt types.PatchType, data []byte) error {
	_, err := a.client.CoreV1().Nodes().Patch(ctx, node.Name, pt, data, metav1.PatchOptions{})
	return err
}

func (a stageAPI) DeleteNode(ctx context.Context, node *corev1.Node) error {
	return a.client.CoreV1().Nodes().Delete(ctx, node.Name, metav1.DeleteOptions{
		Preconditions: metav1.NewUIDPreconditions(string(node.UID)),
	})
}
