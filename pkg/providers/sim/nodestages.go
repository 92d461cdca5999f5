package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/stage"
)

// With stages for Nodes in Options.Stages, the node's life is kwok's too:
// the provider matches the Node as the API shows it (NodeChanged) against
// them, waits the delay of the stage chosen, then plays it. What its
// status templates render is merged, as the API server merges kwok's
// patch, into what the provider reports ever after (ConfigureNode), until
// a later stage changes it: kwok's node-not-ready makes the node NotReady
// with its reason, and its node-initialize makes it Ready again. Condition
// times stay the agent's, which stamps them at each report, and the Lease
// stays the agent's too: kwok's heartbeat stages play without changing
// what is reported. Events go to Options.Events; patches of the Node
// itself (finalizers, labels, taints) and its delete go to Options.API.
// Stages for Nodes also make the node's phase Running, which kwok's
// stages select on.

// NodeStageAPI carries out what stages do to a Node in the API server.
type NodeStageAPI interface {
	// PatchNode patches the Node (not its status).
	PatchNode(ctx context.Context, node *corev1.Node, pt types.PatchType, data []byte) error
	// DeleteNode deletes the Node (this UID only).
	DeleteNode(ctx context.Context, node *corev1.Node) error
}

// nodeStaging is the state of the node's stages: the Node as stages see
// it (as the API showed it last, with what stages changed since), the
// stage chosen and its timer, and the status the stages rendered.
type nodeStaging struct {
	meta metav1.ObjectMeta
	// raw is the Node's JSON. Its decoded view is made when a stage is
	// matched or played and not kept: thousands of Nodes wait between
	// heartbeats, and a view costs several times its JSON.
	raw   []byte
	stage *stage.Stage
	timer *armed
	// status is every status template played so far, merged: a strategic
	// merge patch of the Node ({"status": …}); nil when none played.
	status []byte
	// playsAt and plays count the stages played at one instant.
	playsAt time.Time
	plays   int
	// merged is applyNodeStages' last merge, done again only when what
	// it merges changes: the agent asks for the node's status every few
	// seconds, and a strategic merge costs a JSON round trip.
	merged *mergedStatus
}

// mergedStatus is what the stages rendered (status) merged into what the
// provider describes (in, its protobuf encoding: canonical, and cheaper to
// make and compare than the status itself): out.
type mergedStatus struct {
	status, in []byte
	out        corev1.NodeStatus
}

// nodeStages is the stages for Nodes in force now.
func (p *Provider) nodeStages() stage.Lifecycle {
	if p.opts.Stages == nil {
		return nil
	}
	return p.opts.Stages.Stages().For("v1", "Node")
}

// NodeChanged tells the provider the Node as the API shows it now; its
// stages are matched against it while nodelet reports the node's status
// (NotifyNodeStatus). The agent's informer of its Nodes calls it at each
// change. It does nothing without stages for Nodes.
func (p *Provider) NodeChanged(node *corev1.Node) {
	if len(p.nodeStages()) == 0 && !p.nodeStaged() {
		return
	}
	logger := klog.Background().WithValues("node", p.opts.NodeName)
	raw, err := json.Marshal(node)
	if err != nil {
		logger.Error(err, "Cannot match the node against stages")
		return
	}
	p.mu.Lock()
	p.node.meta = *node.ObjectMeta.DeepCopy()
	p.node.raw = raw
	p.mu.Unlock()
	p.matchNodeJSON(logger, raw, p.clock.Now())
}

// matchNodeJSON is matchNode for the Node's JSON.
func (p *Provider) matchNodeJSON(logger klog.Logger, raw []byte, now time.Time) {
	view, err := stage.NewObject(raw)
	if err != nil {
		logger.Error(err, "Cannot match the node against stages")
		return
	}
	p.matchNode(logger, view, now)
}

// nodeStaged says whether a stage is pending or has played on the node.
func (p *Provider) nodeStaged() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.node.stage != nil || p.node.status != nil
}

// matchNode chooses the node's next stage as the node stands at now (view,
// its raw JSON decoded), and arms its timer. A stage already waiting keeps
// its time when it is still the one that matches (the agent's own writes
// of the status do not put a heartbeat off). It is called without the lock
// and never from a timer callback.
func (p *Provider) matchNode(logger klog.Logger, view *stage.Object, now time.Time) {
	p.mu.Lock()
	var s *stage.Stage
	if p.nodeNotify != nil {
		s = p.nodeStages().Match(view, p.rng)
	}
	if s != nil && s == p.node.stage {
		p.mu.Unlock()
		return
	}
	old := cancelLocked(&p.node.timer)
	p.node.stage = s
	if s == nil {
		p.mu.Unlock()
		stopTimer(old)
		return
	}
	d := max(s.Delay(view, now, p.rng), 0)
	a := &armed{}
	p.node.timer = a
	p.mu.Unlock()
	stopTimer(old)
	logger.V(5).Info("Simulated node matched a stage", "stage", s.Name(), "delay", d)
	if d == 0 {
		p.playNode(logger, a, view, now)
		return
	}
	at := now.Add(d)
	p.startTimer(&p.node.timer, a, d, func() { p.async(func() { p.playNode(logger, a, nil, at) }) })
}

// playNode plays the node's stage that fell due at `at`, then matches the
// node again if the stage changed it. view is the node as it was matched,
// when that was at `at`; with nil, it is decoded again.
func (p *Provider) playNode(logger klog.Logger, a *armed, view *stage.Object, at time.Time) {
	p.mu.Lock()
	s := p.node.stage
	if !firedLocked(&p.node.timer, a) || s == nil {
		p.mu.Unlock()
		return
	}
	p.node.stage = nil
	logger = logger.WithValues("stage", s.Name())
	var actions []stage.Action
	var err error
	if view == nil {
		view, err = stage.NewObject(p.node.raw)
	}
	if err == nil {
		actions, err = s.Next(view, p.stageEnv(nil, at))
	}
	if err != nil {
		// As kwok: not played; the node waits for a change.
		p.mu.Unlock()
		logger.Error(err, "Cannot play stage")
		return
	}
	var effects []func(context.Context)
	node := &corev1.Node{ObjectMeta: p.node.meta}
	raw, statusChanged, changed := p.node.raw, false, false
	for _, act := range actions {
		switch {
		case act.Event != nil:
			if rec := p.opts.Events; rec != nil {
				e := *act.Event
				effects = append(effects, func(context.Context) { rec.Event(node, e.Type, e.Reason, e.Message) })
			}
		case act.Delete:
			if api := p.opts.NodeAPI; api != nil {
				effects = append(effects, func(ctx context.Context) {
					if err := api.DeleteNode(ctx, node); err != nil {
						logger.Error(err, "Stage could not delete the node")
					}
				})
			}
		case act.Patch != nil:
			out, err := stage.Apply(raw, "Node", act.Patch)
			if err != nil {
				logger.Error(err, "Cannot apply the stage's patch", "subresource", act.Patch.Subresource)
				continue
			}
			raw, changed = out, true
			if act.Patch.Subresource == "status" {
				status := p.node.status
				if status == nil {
					status = []byte("{}")
				}
				if status, err = stage.Apply(status, "Node", act.Patch); err != nil {
					logger.Error(err, "Cannot apply the stage's patch", "subresource", act.Patch.Subresource)
					continue
				}
				p.node.status, statusChanged = status, true
				continue
			}
			if api := p.opts.NodeAPI; api != nil {
				pt, data := act.Patch.Type, act.Patch.Data
				effects = append(effects, func(ctx context.Context) {
					if err := api.PatchNode(ctx, node, pt, data); err != nil {
						logger.Error(err, "Stage could not patch the node")
					}
				})
			}
		}
	}
	if changed {
		if view, err = stage.NewObject(raw); err == nil {
			p.node.raw = raw
		} else {
			changed = false // not matched again against what cannot be read
		}
	}
	if at.Equal(p.node.playsAt) {
		p.node.plays++
	} else {
		p.node.playsAt, p.node.plays = at, 1
	}
	plays := p.node.plays
	var notify func()
	if statusChanged {
		notify = p.nodeNotify
	}
	p.mu.Unlock()
	p.runEffects(logger, effects)
	logger.V(4).Info("Simulated node played a stage")
	if notify != nil {
		notify()
	}
	if !changed {
		return
	}
	if plays >= maxPlaysAtOnce {
		logger.Info("Simulated node played too many stages at one instant; it waits for its next change", "plays", plays)
		return
	}
	p.matchNode(logger, view, at)
}

// applyNodeStages merges what the node's stages rendered into the status
// the provider describes, but for its capacity and allocatable, which its
// pods are admitted against; and it makes the node's phase Running when
// there are stages for Nodes.
func (p *Provider) applyNodeStages(node *corev1.Node) {
	p.mu.Lock()
	status, last := p.node.status, p.node.merged
	p.mu.Unlock()
	if len(p.nodeStages()) > 0 {
		node.Status.Phase = corev1.NodeRunning
	}
	if status == nil {
		return
	}
	failed := func(err error) {
		klog.Background().Error(err, "Cannot apply what the node's stages rendered to its status", "node", p.opts.NodeName)
	}
	in, err := node.Status.Marshal()
	if err != nil {
		failed(err)
		return
	}
	if last != nil && bytes.Equal(last.status, status) && bytes.Equal(last.in, in) {
		node.Status = *last.out.DeepCopy()
		return
	}
	raw, err := json.Marshal(&corev1.Node{Status: node.Status})
	if err == nil {
		raw, err = stage.Apply(raw, "Node", &stage.Patch{Type: types.StrategicMergePatchType, Subresource: "status", Data: status})
	}
	var staged corev1.Node
	if err == nil {
		err = json.Unmarshal(raw, &staged)
	}
	if err != nil {
		failed(err)
		return
	}
	// What pods are admitted against stays what is reported.
	staged.Status.Capacity, staged.Status.Allocatable = node.Status.Capacity, node.Status.Allocatable
	node.Status = staged.Status
	p.mu.Lock()
	p.node.merged = &mergedStatus{status: status, in: in, out: *staged.Status.DeepCopy()}
	p.mu.Unlock()
}
