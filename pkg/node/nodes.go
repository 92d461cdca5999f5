package node

import (
	"context"
	"fmt"

	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/provider"
)

// The set of nodes changes at run time: a node taken over is added, a node
// let go removed. A node's tasks carry its generation, so that those of a
// node removed are dropped, and a node added again starts afresh.

// key is the key of one task of n.
func (n *nodeState) key(task taskKind) taskKey {
	return taskKey{node: n.name, gen: n.gen, task: task}
}

// node is the state of a managed node, or nil.
func (c *Controller) node(name string) *nodeState {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.nodes[name]
}

// Add starts managing n: registering (or, when it is taken over, adopting)
// its Node, renewing its Lease and reporting its status, at once when Run
// has started. A node of the same name managed already is replaced.
func (c *Controller) Add(n Node) error {
	c.mu.Lock()
	state, err := c.newState(n)
	if err != nil {
		c.mu.Unlock()
		return fmt.Errorf("node controller: %w", err)
	}
	if old, ok := c.nodes[state.name]; ok {
		c.removeLocked(old)
	}
	c.nodes[state.name] = state
	var ctx context.Context
	if c.runCtx != nil {
		ctx = c.prepareLocked(state)
		if c.workers > 0 { // Run has started its workers
			c.startWorkersLocked(c.runCtx)
		}
	}
	c.mu.Unlock()
	if ctx != nil {
		c.start(ctx, state)
	}
	return nil
}

// Remove stops managing the node: its tasks stop, its Lease is no longer
// renewed and its status no longer reported. Nothing is deleted; the Node
// and its Lease stay for whoever manages it next.
func (c *Controller) Remove(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n, ok := c.nodes[name]; ok {
		c.removeLocked(n)
		if c.runCtx != nil {
			c.checkReadyLocked(c.runCtx)
		}
	}
}

// Len is how many nodes are managed now.
func (c *Controller) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.nodes)
}

// AllReported tells whether every node managed now has been registered and
// has written its status once.
func (c *Controller) AllReported() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.reported == len(c.nodes)
}

// prepareLocked gives n the context its notifications run under, ended
// when n is removed. The caller holds c.mu and Run has started.
func (c *Controller) prepareLocked(n *nodeState) context.Context {
	ctx, cancel := context.WithCancel(c.runCtx)
	n.stop = cancel
	return ctx
}

// start starts n's notifications and tasks, without c.mu: a provider may
// notify at once.
func (c *Controller) start(ctx context.Context, n *nodeState) {
	if notifier, ok := n.provider.(provider.NodeNotifier); ok {
		name := n.name
		notifier.NotifyNodeStatus(ctx, func() { c.ReportStatus(name) })
	}
	c.queue.Add(n.key(taskStatus))
	c.queue.Add(n.key(taskPing))
}

// removeLocked forgets n. The caller holds c.mu.
func (c *Controller) removeLocked(n *nodeState) {
	delete(c.nodes, n.name)
	if n.stop != nil {
		n.stop()
	}
	if n.reported {
		c.reported--
	}
}

// markReported counts n's first successful status write and closes Ready
// once every node has one.
func (c *Controller) markReported(ctx context.Context, n *nodeState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n.reported || c.nodes[n.name] != n {
		return
	}
	n.reported = true
	c.reported++
	c.checkReadyLocked(ctx)
}

// checkReadyLocked closes Ready the first time every node managed has
// reported. The caller holds c.mu.
func (c *Controller) checkReadyLocked(ctx context.Context) {
	if c.reported == len(c.nodes) {
		c.readyOnce.Do(func() {
			klog.FromContext(ctx).Info("Every node is registered and has reported its status", "nodes", len(c.nodes))
			close(c.ready)
		})
	}
}
