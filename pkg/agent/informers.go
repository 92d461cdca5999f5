package agent

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"

	"github.com/nodelet/nodelet/pkg/cachetrim"
	"github.com/nodelet/nodelet/pkg/node"
)

// agentInformers are the agent's shared informer factories, which Run
// starts: the pods bound to the managed nodes, those Nodes, and
// cluster-wide objects. Every informer they make trims what it caches
// (cachetrim): with thousands of pods, managedFields alone would be a
// large part of the agent's heap.
type agentInformers struct {
	pods, nodes, cluster informers.SharedInformerFactory
}

// With takeOver (WithNodeSelector) they see every bound pod and every
// Node, whatever the agent's own nodes.
func newAgentInformers(client kubernetes.Interface, names []string, takeOver bool) agentInformers {
	return agentInformers{
		pods: cachetrim.NewFactory(client, cachetrim.Transform, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = podSelector(names, takeOver).String()
		})),
		// The last-applied status is read from a fresh GET only.
		nodes: cachetrim.NewFactory(client, cachetrim.Dropping(node.LastAppliedAnnotation), informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			if len(names) == 1 && !takeOver {
				o.FieldSelector = fields.OneTermEqualSelector("metadata.name", names[0]).String()
			}
		})),
		cluster: cachetrim.NewFactory(client, cachetrim.Transform),
	}
}

// all are the factories, for Run to start.
func (i agentInformers) all() []informers.SharedInformerFactory {
	return []informers.SharedInformerFactory{i.pods, i.nodes, i.cluster}
}

// podSelector selects the pods bound to names: exactly one node's by field
// selector, or every bound pod when there are several or nodes are taken
// over (filtered by index).
func podSelector(names []string, takeOver bool) fields.Selector {
	if len(names) == 1 && !takeOver {
		return fields.OneTermEqualSelector("spec.nodeName", names[0])
	}
	return fields.OneTermNotEqualSelector("spec.nodeName", "")
}
