package virtualkubelet

import (
	"context"

	corev1 "k8s.io/api/core/v1"
)

// nodeConfigurer is the convention of virtual-kubelet's mock provider and
// of many out-of-tree providers: a method that describes the node, which
// virtual-kubelet's command calls once before it registers the node.
type nodeConfigurer interface {
	ConfigureNode(ctx context.Context, node *corev1.Node)
}

// Ping asks the NodeProvider; without one, only an ended ctx is an error,
// as with virtual-kubelet's NaiveNodeProvider.
func (c *core) Ping(ctx context.Context) error {
	if c.nodes == nil {
		return ctx.Err()
	}
	return c.nodes.Ping(ctx)
}

// NotifyNodeStatus registers with the NodeProvider a callback that keeps a
// copy of each node it pushes and asks nodelet to report the status. Without
// a NodeProvider nothing is ever notified.
func (c *core) NotifyNodeStatus(ctx context.Context, notify func()) {
	if c.nodes == nil {
		return
	}
	c.nodes.NotifyNodeStatus(ctx, func(node *corev1.Node) {
		if node == nil {
			return
		}
		node = node.DeepCopy()
		c.mu.Lock()
		c.node = node
		c.mu.Unlock()
		notify()
	})
}

// ConfigureNode describes the node: the provider's ConfigureNode method
// first, if it has one, then the status and labels of the last node the
// NodeProvider pushed. Without a NodeProvider, the provider's Ready
// condition is dropped, so that nodelet's own stands.
func (c *core) ConfigureNode(ctx context.Context, node *corev1.Node) {
	if node.Labels == nil {
		// virtual-kubelet's node always has labels; its providers write
		// into the map without checking.
		node.Labels = map[string]string{}
	}
	if cfg, ok := c.pods.(nodeConfigurer); ok {
		cfg.ConfigureNode(ctx, node)
	} else if cfg, ok := c.nodes.(nodeConfigurer); ok {
		cfg.ConfigureNode(ctx, node)
	}
	c.mu.Lock()
	pushed := c.node
	c.mu.Unlock()
	if pushed != nil {
		pushed.Status.DeepCopyInto(&node.Status)
		if node.Labels == nil && len(pushed.Labels) > 0 {
			node.Labels = map[string]string{}
		}
		for k, v := range pushed.Labels {
			node.Labels[k] = v
		}
	}
	if c.nodes == nil {
		node.Status.Conditions = withoutReady(node.Status.Conditions)
	}
}

// withoutReady returns conditions less the Ready condition, in a new slice:
// the old one may be the provider's.
func withoutReady(conditions []corev1.NodeCondition) []corev1.NodeCondition {
	var out []corev1.NodeCondition
	for _, cond := range conditions {
		if cond.Type != corev1.NodeReady {
			out = append(out, cond)
		}
	}
	return out
}
