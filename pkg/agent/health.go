package agent

import (
	"context"
	"errors"

	"github.com/nodelet/nodelet/pkg/node"
	"github.com/nodelet/nodelet/pkg/pod"
	"github.com/nodelet/nodelet/pkg/server"
)

// health tells whether the agent is healthy: every node registered, the
// pods synced, the kubelet API (if any) serving.
type health struct {
	// registered, synced and serving are closed once the nodes are
	// registered, the pods synced and the kubelet API serves; serving is
	// nil without a kubelet API.
	registered, synced, serving <-chan struct{}
	// takenOver tells, when the agent takes Nodes over, whether those
	// there at start were taken over and every node managed now has
	// registered; nil otherwise.
	takenOver func() bool
	// firstReady tells whether the first node, whose config is
	// followed, is Ready.
	firstReady func() bool
}

// newHealth watches the node and pod controllers and the kubelet API
// server (nil without one).
func newHealth(nodes *node.Controller, pods *pod.Controller, srv *server.Server, taken *takeover, first string) health {
	h := health{registered: nodes.Ready(), synced: pods.Synced(), firstReady: func() bool { return nodes.NodeReady(first) }}
	if taken != nil {
		h.takenOver = func() bool { return closed(taken.ready) && nodes.AllReported() }
	}
	if srv != nil {
		h.serving = srv.Serving()
	}
	return h
}

// check is what /healthz reports: nil once every node is registered, the
// pods are synced and the kubelet API, if any, serves; else what is
// missing.
func (h health) check() error {
	var missing []error
	if !closed(h.registered) || (h.takenOver != nil && !h.takenOver()) {
		missing = append(missing, errors.New("nodes not registered yet"))
	}
	if !closed(h.synced) {
		missing = append(missing, errors.New("pods not synced yet"))
	}
	if h.serving != nil && !closed(h.serving) {
		missing = append(missing, errors.New("kubelet API not serving yet"))
	}
	return errors.Join(missing...)
}

// configHealthy is what a remote config's trial waits for: the agent
// healthy and its first node Ready.
func (h health) configHealthy() bool {
	return h.check() == nil && h.firstReady()
}

// serve is the loop of /healthz at addr.
func (h health) serve(addr string) func(context.Context) error {
	return server.NewHealthz(addr, h.check).Run
}

// remoteConfig runs the config controller of WithRemoteConfig: it follows
// the first node's config source annotation, reports through the node
// controller when the config changes, and tries a new config against h.
func (a *Agent) remoteConfig(p *parts, h health) error {
	remote := a.s.remote
	if remote == nil {
		return nil
	}
	if err := remote.Watch(p.inf.nodes.Core().V1().Nodes(), a.nodes.nodes[0].Name); err != nil {
		return err
	}
	remote.OnChange(p.nodes.ReportAllStatus)
	p.loops["config controller"] = func(ctx context.Context) error {
		return remote.Run(ctx, p.client, p.recorder, h.configHealthy)
	}
	return nil
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
