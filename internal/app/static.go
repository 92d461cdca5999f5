package app

import (
	"context"
	"fmt"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"github.com/nodelet/nodelet/pkg/config"
	"github.com/nodelet/nodelet/pkg/provider"
	"github.com/nodelet/nodelet/pkg/staticpod"
)

// staticPods builds the static pod controller of the host node when cfg
// names a manifest directory or URL (nil otherwise): it runs the static
// pods through the node's provider and keeps their mirror pods, reading
// them from pods (the agent's pod informers) and the Node from nodes. Their
// status reaches the mirror pods through the pod controller.
func staticPods(client kubernetes.Interface, recorder record.EventRecorder, cfg *config.Config,
	pods, nodes informers.SharedInformerFactory, providers map[string]provider.PodLifecycleHandler) (func(context.Context) error, error) {
	if cfg.StaticPodPath == "" && cfg.StaticPodURL == "" {
		return nil, nil
	}
	runner, ok := providers[cfg.NodeName]
	if !ok || !cfg.RunsHostPods() {
		return nil, fmt.Errorf("static pods: need the process or cri provider's node %s", cfg.NodeName)
	}
	c, err := staticpod.New(client, runner, pods.Core().V1().Pods(), nodes.Core().V1().Nodes(), recorder, staticpod.Options{
		NodeName:           cfg.NodeName,
		ManifestDir:        cfg.StaticPodPath,
		FileCheckFrequency: cfg.FileCheckFrequency.Duration,
		URL:                cfg.StaticPodURL,
		HTTPCheckFrequency: cfg.HTTPCheckFrequency.Duration,
	})
	if err != nil {
		return nil, err
	}
	return c.Run, nil
}
