package virtualkubelet

import (
	"errors"
	"sync"

	vknode "github.com/virtual-kubelet/virtual-kubelet/node"
	"github.com/virtual-kubelet/virtual-kubelet/node/nodeutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/pkg/provider"
)

// Adapter is a virtual-kubelet provider as nodelet sees it: the pods of one
// node and the node itself. The value New returns also implements the
// optional interfaces of package provider that the wrapped provider can
// serve, and no others (see the package documentation).
type Adapter interface {
	provider.PodLifecycleHandler
	provider.NodeProvider
	provider.NodeNotifier
}

// New wraps a virtual-kubelet provider for nodelet. pods may also be a
// node.PodNotifier and a nodeutil.Provider; nodes may be nil, which behaves
// as virtual-kubelet's NaiveNodeProvider (see the package documentation for
// how the node's Ready condition is then decided). New does no I/O.
func New(pods vknode.PodLifecycleHandler, nodes vknode.NodeProvider) (Adapter, error) {
	if pods == nil {
		return nil, errors.New("virtual-kubelet adapter: the pod lifecycle handler is nil")
	}
	c := &core{pods: pods, nodes: nodes, deleting: map[string]types.UID{}}
	notifier, notifies := pods.(vknode.PodNotifier)
	full, isFull := pods.(nodeutil.Provider)
	switch {
	case notifies && isFull:
		return notifyingFull{core: c, podNotifier: podNotifier{notifier}, extras: extras{full}}, nil
	case notifies:
		return notifying{core: c, podNotifier: podNotifier{notifier}}, nil
	case isFull:
		return polledFull{core: c, extras: extras{full}}, nil
	default:
		return polled{core: c}, nil
	}
}

// The four shapes New returns: the wrapped provider pushes pod status or is
// polled, and it is a whole nodeutil.Provider or only a PodLifecycleHandler.
type (
	polled struct {
		*core
	}
	notifying struct {
		*core
		podNotifier
	}
	polledFull struct {
		*core
		extras
	}
	notifyingFull struct {
		*core
		podNotifier
		extras
	}
)

// fullAdapter is what a nodeutil.Provider offers nodelet.
type fullAdapter interface {
	Adapter
	provider.LogsProvider
	provider.ExecProvider
	provider.AttachProvider
	provider.PortForwardProvider
	provider.StatsProvider
	provider.NodeStatsProvider
}

var (
	_ Adapter              = polled{}
	_ provider.PodNotifier = notifying{}
	_ fullAdapter          = polledFull{}
	_ fullAdapter          = notifyingFull{}
	_ provider.PodNotifier = notifyingFull{}
)

// core serves what every wrapped provider offers: its pods and its node.
type core struct {
	pods  vknode.PodLifecycleHandler
	nodes vknode.NodeProvider // nil: virtual-kubelet's NaiveNodeProvider

	mu sync.Mutex
	// deleting holds, by namespace/name, the UID of each pod DeletePod was
	// asked to stop, until the provider no longer reports that pod.
	deleting map[string]types.UID
	// node is a copy of the last node the NodeProvider pushed, nil before
	// the first; never changed once stored.
	node *corev1.Node
}

// podNotifier passes nodelet's status callback to a provider that pushes.
type podNotifier struct {
	notifier vknode.PodNotifier
}
