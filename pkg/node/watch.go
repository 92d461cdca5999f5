package node

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// WatchNodes makes the controller notice when someone else changes the
// conditions nodelet reports — typically the node lifecycle controller
// marking a node Unknown while the API server was too busy to take a
// heartbeat — and write its status again at once instead of at the next
// report interval. Call it before the informer starts.
func (c *Controller) WatchNodes(nodes coreinformers.NodeInformer) error {
	_, err := nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.onNode,
		UpdateFunc: func(_, obj any) { c.onNode(obj) },
	})
	if err != nil {
		return fmt.Errorf("watch nodes: %w", err)
	}
	return nil
}

func (c *Controller) onNode(obj any) {
	node, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	n := c.node(node.Name)
	if n == nil {
		return
	}
	n.mu.Lock()
	applied := n.applied
	n.mu.Unlock()
	if applied != nil && conditionsOverwritten(applied.conditions, node.Status.Conditions) {
		c.forceReport(n)
	}
}

// conditionsOverwritten tells whether a condition nodelet applied shows a
// different status in the API.
func conditionsOverwritten(applied []appliedCondition, current []corev1.NodeCondition) bool {
	for _, a := range applied {
		for _, cur := range current {
			if cur.Type == a.Type && cur.Status != a.Status {
				return true
			}
		}
	}
	return false
}
