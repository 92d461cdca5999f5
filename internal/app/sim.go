package app

import (
	"context"
	"fmt"
	"hash/fnv"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/agent"
	"github.com/nodelet/nodelet/pkg/config"
	"github.com/nodelet/nodelet/pkg/providers/sim"
	"github.com/nodelet/nodelet/pkg/stage"
)

// providerFunc makes the provider of each node as cfg.Provider says: the
// one place that knows which providers there are.
func providerFunc(cfg *config.Config, layout *nodeLayout) agent.NewProviderFunc {
	if cfg.RunsHostPods() {
		return hostProvider(cfg)
	}
	return simProvider(cfg, layout)
}

// simProvider makes a sim provider for each node, placed by layout; its
// pods wait for the attach of their volumes when the agent attaches them.
func simProvider(cfg *config.Config, layout *nodeLayout) agent.NewProviderFunc {
	conditions := make([]sim.NodeCondition, 0, len(cfg.Sim.NodeConditions))
	for _, c := range cfg.Sim.NodeConditions {
		conditions = append(conditions, sim.NodeCondition{
			Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message,
			Every: c.Every.Duration, For: c.For.Duration, NodeRatio: ptr.Deref(c.NodeRatio, 1),
		})
	}
	// The stage files were checked with the config; read once, the
	// compiled stages are shared by every node.
	stages, stagesErr := stage.LoadLifecycle(cfg.Sim.Stages...)
	return func(env *agent.Env) (agent.Provider, error) {
		if stagesErr != nil {
			return nil, fmt.Errorf("sim provider: %w", stagesErr)
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
		if len(stages) > 0 {
			opts.Stages, opts.Events = stages, env.Recorder
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
// one of sim.podCIDR's /24s by its name) and its capacity (else its
// allocatable, else sim.capacity), which pods are admitted against.
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
	case len(n.Status.Capacity) > 0:
		capacity = n.Status.Capacity.DeepCopy()
	case len(n.Status.Allocatable) > 0:
		capacity = n.Status.Allocatable.DeepCopy()
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
