package agent

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"hash/fnv"
	"strconv"
)

// NodeInfo is one node an agent manages, as its provider's constructor
// sees it.
type NodeInfo struct {
	Name string
	// Index is the node's place in the whole set before sharding (0 for
	// One): what a provider derives per-node settings from, such as a pod
	// range, alike on every shard. It is -1 for a Node taken over
	// (WithNodeSelector).
	Index int
	// Node is the Node as the agent found it when it took it over, for
	// the provider to describe the node as its creator did (capacity,
	// addresses, pod range); nil for the agent's own nodes.
	Node *corev1.Node
}

// Nodes are the nodes an agent manages: one, or a numbered set, or a
// shard of a numbered set.
type Nodes struct {
	nodes []NodeInfo
}

// One is a single node named name.
func One(name string) Nodes { return Nodes{nodes: []NodeInfo{{Name: name}}} }

// Numbered is count nodes named <prefix>-0 to <prefix>-<count-1>.
func Numbered(prefix string, count int) Nodes {
	nodes := make([]NodeInfo, 0, max(count, 0))
	for i := range count {
		nodes = append(nodes, NodeInfo{Name: prefix + "-" + strconv.Itoa(i), Index: i})
	}
	return Nodes{nodes: nodes}
}

// Shard keeps the nodes of shard i of n, placed by a hash of their names,
// so that n agents given the same set and each its own i manage every node
// once. It may keep none.
func (n Nodes) Shard(i, of int) (Nodes, error) {
	if of < 1 || i < 0 || i >= of {
		return Nodes{}, fmt.Errorf("shard %d/%d: want 0 <= i < n", i, of)
	}
	var kept []NodeInfo
	for _, node := range n.nodes {
		if shardOf(node.Name, of) == i {
			kept = append(kept, node)
		}
	}
	return Nodes{nodes: kept}, nil
}

// shardOf is the shard of n that a node name falls in.
func shardOf(name string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(name))
	return int(h.Sum32() % uint32(n))
}

// List returns the nodes, in order.
func (n Nodes) List() []NodeInfo { return append([]NodeInfo(nil), n.nodes...) }

// Len is how many nodes there are.
func (n Nodes) Len() int { return len(n.nodes) }

// names are the nodes' names, in order.
func (n Nodes) names() []string {
	out := make([]string, 0, len(n.nodes))
	for _, node := range n.nodes {
		out = append(out, node.Name)
	}
	return out
}
