package sim

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// NodeType is the value of the "type" label a simulated node gets unless the
// label is already set.
const NodeType = "nodelet-sim"

// ProviderIDPrefix begins a simulated node's spec.providerID; the node
// name follows.
const ProviderIDPrefix = "nodelet://"

// Ping reports the simulated node healthy, unless Options.PingErrorFile
// exists: then it fails with the file's content, and the node is wedged
// until the file is gone: deleted pods do not terminate.
func (p *Provider) Ping(context.Context) error { return p.pingError() }

func (p *Provider) pingError() error {
	if p.opts.PingErrorFile == "" {
		return nil
	}
	msg, err := os.ReadFile(p.opts.PingErrorFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("simulated ping error: %w", err)
	}
	return fmt.Errorf("simulated ping error: %s", strings.TrimSpace(string(msg)))
}

// ConfigureNode describes the simulated node: its pod range and provider
// ID, capacity and allocatable, healthy conditions, addresses, nodeInfo
// and the kubelet endpoint, with what the node's stages rendered merged
// over them. It adds the well-known node labels that are not
// set yet (zone, region and instance type when the options give them). The
// node conditions of Options.NodeConditions that this node shows are
// applied over the healthy ones as the clock stands now. Conditions of
// other types are kept, and heartbeat and transition times are left to
// nodelet.
func (p *Provider) ConfigureNode(_ context.Context, node *corev1.Node) {
	if node.Labels == nil {
		node.Labels = map[string]string{}
	}
	for k, v := range map[string]string{
		corev1.LabelHostname:           p.opts.NodeName,
		corev1.LabelOSStable:           "linux",
		corev1.LabelArchStable:         runtime.GOARCH,
		"type":                         NodeType,
		corev1.LabelTopologyZone:       p.opts.Zone,
		corev1.LabelTopologyRegion:     p.opts.Region,
		corev1.LabelInstanceTypeStable: p.opts.InstanceType,
	} {
		if _, ok := node.Labels[k]; !ok && v != "" {
			node.Labels[k] = v
		}
	}
	node.Spec.PodCIDR, node.Spec.PodCIDRs = p.podCIDR, []string{p.podCIDR}
	node.Spec.ProviderID = ProviderIDPrefix + p.opts.NodeName

	s := &node.Status
	s.VolumesInUse = p.volumesInUse()
	s.Capacity = p.opts.Capacity.DeepCopy()
	s.Allocatable = p.opts.Capacity.DeepCopy()
	setNodeCondition(s, corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "nodelet is posting ready status")
	setNodeCondition(s, corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available")
	setNodeCondition(s, corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure")
	setNodeCondition(s, corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available")
	if p.opts.Pressure != nil {
		p.opts.Pressure(node)
	}
	p.setScheduledConditions(s, p.clock.Now())

	s.Addresses = nil
	if p.opts.Address != "" {
		s.Addresses = append(s.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: p.opts.Address})
	}
	s.Addresses = append(s.Addresses, corev1.NodeAddress{Type: corev1.NodeHostName, Address: p.opts.NodeName})

	s.NodeInfo.KubeletVersion = p.opts.Version
	s.NodeInfo.OperatingSystem = "linux"
	s.NodeInfo.Architecture = runtime.GOARCH
	s.NodeInfo.ContainerRuntimeVersion = "sim://1"
	s.NodeInfo.KernelVersion = "nodelet sim"
	s.NodeInfo.OSImage = "nodelet sim"
	s.DaemonEndpoints.KubeletEndpoint.Port = p.opts.Port
	p.applyNodeStages(node)
}

// setNodeCondition sets one condition's status, reason and message, keeping
// its times.
func setNodeCondition(s *corev1.NodeStatus, typ corev1.NodeConditionType, status corev1.ConditionStatus, reason, message string) {
	for i := range s.Conditions {
		if c := &s.Conditions[i]; c.Type == typ {
			c.Status, c.Reason, c.Message = status, reason, message
			return
		}
	}
	s.Conditions = append(s.Conditions, corev1.NodeCondition{Type: typ, Status: status, Reason: reason, Message: message})
}

// nodeCond is an entry of Options.NodeConditions that this node shows, at
// its own offset in the period.
type nodeCond struct {
	NodeCondition
	offset time.Duration
}

// nodeConds picks the entries that the node shows.
func nodeConds(nodeName string, all []NodeCondition) []nodeCond {
	var out []nodeCond
	for i := range all {
		c := &all[i]
		if offset, ok := selected(nodeName, i, c); ok {
			out = append(out, nodeCond{NodeCondition: *c, offset: offset})
		}
	}
	return out
}

// phase is how far into its period the condition is at t. Periods are
// counted from the Unix epoch, so an agent restart does not move them.
func (c *nodeCond) phase(t time.Time) time.Duration {
	return time.Duration((uint64(t.UnixNano()) + uint64(c.offset)) % uint64(c.Every))
}

func (c *nodeCond) flips() bool { return c.For < c.Every }

// active tells whether the condition shows at t: during the first For of
// each period.
func (c *nodeCond) active(t time.Time) bool {
	return !c.flips() || c.phase(t) < c.For
}

// next is the first time after t at which the condition flips; ok is false
// when it never does.
func (c *nodeCond) next(t time.Time) (time.Time, bool) {
	if !c.flips() {
		return time.Time{}, false
	}
	ph := c.phase(t)
	if ph < c.For {
		return t.Add(c.For - ph), true
	}
	return t.Add(c.Every - ph), true
}

// nextFlip is the first time after t at which any of the node's conditions
// flips; ok is false when none ever does.
func (p *Provider) nextFlip(t time.Time) (next time.Time, ok bool) {
	for i := range p.conds {
		if n, flips := p.conds[i].next(t); flips && (!ok || n.Before(next)) {
			next, ok = n, true
		}
	}
	return next, ok
}

// setScheduledConditions applies the node's scheduled conditions as they
// stand at t: first those outside their window (only conditions of types
// that are not the four standard ones, which show the opposite status),
// then those inside it, in order, so that of two entries of one type the
// one showing wins, and the later one when both show.
func (p *Provider) setScheduledConditions(s *corev1.NodeStatus, t time.Time) {
	for i := range p.conds {
		c := &p.conds[i]
		if c.active(t) || standardCondition(c.Type) {
			continue
		}
		opposite := corev1.ConditionFalse
		if c.Status == corev1.ConditionFalse {
			opposite = corev1.ConditionTrue
		}
		setNodeCondition(s, c.Type, opposite, "", "")
	}
	for i := range p.conds {
		c := &p.conds[i]
		if !c.active(t) {
			continue
		}
		msg := c.Message
		if msg == "" {
			msg = fmt.Sprintf("simulated by nodelet: %s for %s every %s", c.Status, c.For, c.Every)
		}
		setNodeCondition(s, c.Type, c.Status, c.Reason, msg)
	}
}

func standardCondition(t corev1.NodeConditionType) bool {
	switch t {
	case corev1.NodeReady, corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure:
		return true
	}
	return false
}

// NotifyNodeStatus sets the function called at each flip of one of the
// node's scheduled conditions, and after each stage for Nodes that
// changed the status, so that nodelet reports the new status at once. One
// timer of the injected clock is pending at a time, for the next flip,
// and none when no condition flips on this node or once ctx is done; the
// node's stages play only while the function is set and ctx not done. A
// later call replaces the function.
func (p *Provider) NotifyNodeStatus(ctx context.Context, notify func()) {
	p.mu.Lock()
	p.nodeGen++
	gen := p.nodeGen
	p.nodeNotify = notify
	old := cancelLocked(&p.flip)
	raw := p.node.raw
	p.mu.Unlock()
	stopTimer(old)

	context.AfterFunc(ctx, func() {
		p.mu.Lock()
		var flip, staged clock.Timer
		if p.nodeGen == gen {
			p.nodeNotify = nil
			flip, staged = cancelLocked(&p.flip), cancelLocked(&p.node.timer)
			p.node.stage = nil
		}
		p.mu.Unlock()
		stopTimer(flip)
		stopTimer(staged)
	})
	if raw != nil {
		// The Node was seen before anyone asked for its status.
		p.matchNodeJSON(klog.Background().WithValues("node", p.opts.NodeName), raw, p.clock.Now())
	}
	if _, ok := p.nextFlip(p.clock.Now()); !ok {
		return
	}
	p.armFlip(gen, p.clock.Now())
}

// armFlip arms the timer of the first flip after from, for the notify
// function of generation gen. A flip that fell due since from (a callback
// runs late) is notified at once. It is called without the lock and never
// from a timer callback.
func (p *Provider) armFlip(gen uint64, from time.Time) {
	now := p.clock.Now()
	next, ok := p.nextFlip(from)
	if !ok {
		return
	}
	p.mu.Lock()
	if p.nodeGen != gen || p.nodeNotify == nil {
		p.mu.Unlock()
		return
	}
	notify := p.nodeNotify
	if !next.After(now) {
		next, _ = p.nextFlip(now)
	} else {
		notify = nil
	}
	old := cancelLocked(&p.flip)
	a := &armed{}
	p.flip = a
	p.mu.Unlock()
	stopTimer(old)
	if notify != nil {
		notify()
	}
	p.startTimer(&p.flip, a, next.Sub(now), func() { p.flipped(gen, a, next) })
}

// flipped is the callback of the flip timer: it notifies, then has the
// next flip armed.
func (p *Provider) flipped(gen uint64, a *armed, at time.Time) {
	p.mu.Lock()
	if !firedLocked(&p.flip, a) || p.nodeGen != gen || p.nodeNotify == nil {
		p.mu.Unlock()
		return
	}
	notify := p.nodeNotify
	p.mu.Unlock()
	notify()
	p.async(func() { p.armFlip(gen, at) })
}

// NodeStatusChanged asks nodelet to report the node's status now: its
// pressure changed.
func (p *Provider) NodeStatusChanged() {
	p.mu.Lock()
	notify := p.nodeNotify
	p.mu.Unlock()
	if notify != nil {
		notify()
	}
}
