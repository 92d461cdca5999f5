package agent

import (
	"github.com/nodelet/nodelet/pkg/staticpod"
)

// staticPods builds the static pod controller of the one node when
// WithStaticPods asks: it runs the static pods through the node's provider
// and keeps their mirror pods, reading them from the agent's pod informer
// and the Node from its node informer. Their status reaches the mirror
// pods through the pod controller.
func (a *Agent) staticPods(p *parts, nodes []*managedNode) error {
	o := a.s.staticPods
	if o == nil {
		return nil
	}
	n := nodes[0]
	c, err := staticpod.New(p.client, n.provider, p.inf.pods.Core().V1().Pods(), p.inf.nodes.Core().V1().Nodes(), p.recorder, staticpod.Options{
		NodeName:           n.info.Name,
		ManifestDir:        o.ManifestDir,
		FileCheckFrequency: o.FileCheckFrequency,
		URL:                o.URL,
		HTTPCheckFrequency: o.HTTPCheckFrequency,
	})
	if err != nil {
		return err
	}
	p.loops["static pods"] = c.Run
	return nil
}
