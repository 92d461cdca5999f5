package agent

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/node"
	"github.com/nodelet/nodelet/pkg/provider"
	"github.com/nodelet/nodelet/pkg/server"
	"github.com/nodelet/nodelet/pkg/shard"
)

// NodeSelector picks the Nodes, created by others, that an agent takes
// over, as kwok's --manage-single-node, --manage-all-nodes,
// --manage-nodes-with-label-selector and
// --manage-nodes-with-annotation-selector do: the Node of one name, every
// Node, or those matching the label selector and the annotation selector
// (both, when both are given). As kwok's, a selector never matches a Node
// that has no labels (or annotations) at all.
type NodeSelector struct {
	Name                string
	All                 bool
	Labels, Annotations labels.Selector
}

// KwokNodeAnnotation is the annotation kwok's own manifests select the
// Nodes it manages by ("kwok.x-k8s.io/node=fake").
const KwokNodeAnnotation = "kwok.x-k8s.io/node"

// Matches tells whether the selector picks n.
func (s NodeSelector) Matches(n *corev1.Node) bool {
	if s.Name != "" {
		return n.Name == s.Name
	}
	if s.All {
		return true
	}
	if s.Labels == nil && s.Annotations == nil {
		return false
	}
	if s.Labels != nil && (len(n.Labels) == 0 || !s.Labels.Matches(labels.Set(n.Labels))) {
		return false
	}
	if s.Annotations != nil && (len(n.Annotations) == 0 || !s.Annotations.Matches(labels.Set(n.Annotations))) {
		return false
	}
	return true
}

// WithNodeSelector takes over the Nodes others create that sel picks, as
// they appear, and lets each go when it is deleted or stops matching: no
// restart, no fixed count. Each gets a provider of its own (Env.Node.Node
// is the Node as found) and keeps what its creator wrote — labels, taints,
// capacity, allocatable, addresses; the agent adds what a kubelet adds
// (conditions, nodeInfo, daemonEndpoints, the provider's InternalIP when
// it has none, missing labels and annotations) and renews its Lease;
// WithServer serves their kubelet API with the agent's own nodes'. The
// agent's own nodes, if any, are managed as before and never taken over.
// WithSharding splits them among replicas.
func WithNodeSelector(sel NodeSelector) Option {
	return func(s *settings) error {
		bySelector := sel.Labels != nil || sel.Annotations != nil
		switch {
		case sel.Name != "" && (sel.All || bySelector):
			return errors.New("node selector: one node by name, or all, or by labels and annotations: one of the three")
		case sel.All && bySelector:
			return errors.New("node selector: all nodes, or by labels and annotations, not both")
		case sel.Name == "" && !sel.All && !bySelector:
			return errors.New("node selector: selects nothing")
		}
		s.selector = &sel
		return nil
	}
}

// ShardOptions split the Nodes an agent takes over among its replicas:
// either fixed, shard Index of Count by a hash of the node's name (as
// Nodes.Shard), or, with Group, among the replicas of the group alive
// now, each holding a Lease in Namespace (package shard): a replica that
// joins takes its share, one that dies leaves its share to the others
// within LeaseDuration.
type ShardOptions struct {
	Index, Count int

	Group     string
	Namespace string // default kube-node-lease
	// Identity is the replica's, unique in its group (default: the host
	// name and a random suffix).
	Identity string
	// LeaseDuration is how long a replica lives without renewing (default:
	// the node Lease's duration).
	LeaseDuration time.Duration
}

// WithSharding splits the Nodes of WithNodeSelector among replicas.
func WithSharding(o ShardOptions) Option {
	return func(s *settings) error {
		switch {
		case o.Group == "" && (o.Count < 1 || o.Index < 0 || o.Index >= o.Count):
			return fmt.Errorf("sharding: shard %d/%d: want 0 <= i < n, or a group", o.Index, o.Count)
		case o.Group != "" && o.Count != 0:
			return errors.New("sharding: a fixed shard or a group, not both")
		case o.LeaseDuration < 0:
			return errors.New("sharding: lease duration must not be negative")
		}
		if o.Group != "" && o.Namespace == "" {
			o.Namespace = corev1.NamespaceNodeLease
		}
		if o.Group != "" && o.Identity == "" {
			o.Identity = defaultIdentity()
		}
		s.shards = &o
		return nil
	}
}

// defaultIdentity is the host name, as a DNS label, and a random suffix:
// two agents on one host are two replicas.
func defaultIdentity() string {
	host, _ := os.Hostname()
	host = strings.Trim(strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-':
			return r
		case r >= 'A' && r <= 'Z':
			return r + 'a' - 'A'
		}
		return '-'
	}, host), "-")
	if len(host) > 40 {
		host = host[:40]
	}
	if host == "" {
		host = "nodelet"
	}
	return host + "-" + strings.ToLower(rand.Text()[:6])
}

// takeover takes over the Nodes of the selector that this replica owns,
// and lets go those it no longer should: it adds each to the node and pod
// controllers with a provider of its own, and removes it from both. It is
// a controller over the Node informer: handlers queue names, sync decides.
type takeover struct {
	sel    NodeSelector
	owns   func(name string) bool
	own    map[string]bool // the agent's own nodes: never taken over
	nodes  corelisters.NodeLister
	synced cache.InformerSynced
	queue  workqueue.TypedRateLimitingInterface[string]

	// served says that the agent serves the Nodes' kubelet API.
	served bool
	// newNode makes a taken-over node's provider and what it runs.
	newNode func(ctx context.Context, n *corev1.Node) (*takenNode, error)
	ctrl    *node.Controller
	// follow are told of each node taken over and let go: the pod
	// controller first, then the kubelet API's nodes.
	follow []nodeFollower

	mu    sync.Mutex
	taken map[string]*takenNode
	// ready is closed once the Nodes there at start were taken over.
	ready chan struct{}
}

// nodeFollower is what runs or serves the nodes taken over: it is told
// of each node as it is taken over, and let go.
type nodeFollower interface {
	AddNode(node string, p provider.PodLifecycleHandler)
	RemoveNode(node string)
}

// takenNode is a node taken over: its provider and the end of what runs
// for it (the provider's own loops).
type takenNode struct {
	provider Provider
	stop     context.CancelFunc
}

// newTakeover builds the takeover of the agent's selector over the Node
// informer; owns tells which names are this replica's.
func (a *Agent) newTakeover(p *parts, follow []nodeFollower, owns func(string) bool) (*takeover, error) {
	nodes := p.inf.nodes.Core().V1().Nodes()
	t := &takeover{
		sel: *a.s.selector, owns: owns, own: map[string]bool{},
		nodes: nodes.Lister(), synced: nodes.Informer().HasSynced,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, 30*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "nodelet_takeover"}),
		ctrl: p.nodes, follow: follow, served: a.s.server != nil,
		taken: map[string]*takenNode{}, ready: make(chan struct{}),
	}
	for _, n := range a.nodes.nodes {
		t.own[n.Name] = true
	}
	t.newNode = func(ctx context.Context, n *corev1.Node) (*takenNode, error) { return a.buildTaken(ctx, p, n) }
	_, err := nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    t.enqueue,
		UpdateFunc: func(_, obj any) { t.enqueue(obj) },
		DeleteFunc: t.enqueue,
	})
	if err != nil {
		return nil, fmt.Errorf("take over nodes: %w", err)
	}
	return t, nil
}

func (t *takeover) enqueue(obj any) {
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
		t.queue.Add(key)
	}
}

// enqueueAll queues every Node and every node taken: whom this replica
// owns changed.
func (t *takeover) enqueueAll() {
	nodes, err := t.nodes.List(labels.Everything())
	if err == nil {
		for _, n := range nodes {
			t.queue.Add(n.Name)
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for name := range t.taken {
		t.queue.Add(name)
	}
}

// wanted tells whether the agent should manage n (nil: no such Node).
func (t *takeover) wanted(n *corev1.Node) bool {
	return n != nil && n.DeletionTimestamp == nil && !t.own[n.Name] && t.sel.Matches(n) && t.owns(n.Name)
}

// Run takes over the Nodes there are, then follows them until ctx is done,
// when it lets every one go.
func (t *takeover) Run(ctx context.Context) error {
	defer utilruntime.HandleCrashWithContext(ctx)
	defer t.queue.ShutDown()
	logger := klog.FromContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), t.synced) {
		return nil
	}
	// The Nodes there at start are taken over before anything else, so
	// that ready says they are.
	nodes, err := t.nodes.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("list nodes: %w", err)
	}
	for _, n := range nodes {
		if err := t.sync(ctx, n.Name); err != nil {
			logger.Error(err, "Taking over a node failed; retrying", "node", n.Name)
			t.queue.AddRateLimited(n.Name)
		}
	}
	close(t.ready)
	logger.Info("Took over the nodes there were", "nodes", t.count())
	const workers = 4
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for t.processNext(ctx) {
			}
		})
	}
	<-ctx.Done()
	t.queue.ShutDown()
	wg.Wait()
	t.mu.Lock()
	for name := range t.taken {
		t.releaseLocked(name)
	}
	t.mu.Unlock()
	logger.Info("Let every node taken over go")
	return nil
}

func (t *takeover) processNext(ctx context.Context) bool {
	name, quit := t.queue.Get()
	if quit {
		return false
	}
	defer t.queue.Done(name)
	if err := t.sync(ctx, name); err != nil {
		klog.FromContext(ctx).Error(err, "Taking over a node failed; retrying", "node", name)
		t.queue.AddRateLimited(name)
		return true
	}
	t.queue.Forget(name)
	return true
}

// sync takes the node over or lets it go, as wanted says.
func (t *takeover) sync(ctx context.Context, name string) error {
	n, err := t.nodes.Get(name)
	if apierrors.IsNotFound(err) {
		n, err = nil, nil
	}
	if err != nil {
		return err
	}
	want := t.wanted(n)
	t.mu.Lock()
	_, have := t.taken[name]
	t.mu.Unlock()
	logger := klog.FromContext(ctx).WithValues("node", klog.KRef("", name))
	switch {
	case want && !have:
		taken, err := t.newNode(ctx, n.DeepCopy())
		if err != nil {
			return err
		}
		t.mu.Lock()
		defer t.mu.Unlock()
		t.taken[name] = taken
		if err := t.ctrl.Add(node.Node{Template: takenTemplate(name, t.served), Provider: taken.provider, TakenOver: true, Seen: n}); err != nil {
			t.releaseLocked(name)
			return err
		}
		for _, f := range t.follow {
			f.AddNode(name, taken.provider)
		}
		logger.V(2).Info("Took the node over")
	case !want && have:
		t.mu.Lock()
		defer t.mu.Unlock()
		t.releaseLocked(name)
		logger.V(2).Info("Let the node go")
	}
	return nil
}

// releaseLocked lets a node taken over go. The caller holds t.mu.
func (t *takeover) releaseLocked(name string) {
	taken, ok := t.taken[name]
	if !ok {
		return
	}
	delete(t.taken, name)
	for _, f := range slices.Backward(t.follow) {
		f.RemoveNode(name)
	}
	t.ctrl.Remove(name)
	taken.stop()
}

// count is how many nodes are taken over now.
func (t *takeover) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.taken)
}

// takenTemplate is what a taken-over node is adopted with: only what a
// kubelet adds to a Node it did not create and, when the agent serves
// the Nodes' kubelet API (served), the path of the node's own resource
// metrics, which metrics-server needs to tell apart Nodes that share the
// agent's address. Annotations the creator wrote stay theirs.
func takenTemplate(name string, served bool) *corev1.Node {
	annotations := map[string]string{ManagedAttachDetachAnnotation: "true"}
	if served {
		annotations[server.ResourceMetricsPathAnnotation] = server.ResourceMetricsPath(name)
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations}}
}

// buildTaken makes the provider of a Node taken over, and starts what it
// runs (its own loop, those it adds with Env.Go) until the node is let go.
func (a *Agent) buildTaken(ctx context.Context, p *parts, n *corev1.Node) (*takenNode, error) {
	m := &managedNode{info: NodeInfo{Name: n.Name, Index: -1, Node: n}}
	loops := map[string]func(context.Context) error{}
	env := &Env{
		Node: m.info, Client: p.client, Recorder: p.recorder,
		Cluster: p.inf.cluster, Nodes: p.inf.nodes,
		Admit: m.admit, NodeConditions: m.setConditions, NotReady: m.notReady,
		Metrics: p.registry, ProbeMetrics: p.probes,
		RootDir: a.s.rootDir, Version: a.s.version,
		loops: loops,
	}
	prov, err := a.newProvider(env)
	// The provider has read the Node; what the agent keeps of a node
	// taken over stays a few KB.
	m.info.Node = nil
	if err != nil {
		return nil, fmt.Errorf("provider of node %s: %w", n.Name, err)
	}
	if prov == nil {
		return nil, fmt.Errorf("provider of node %s: the constructor returned none", n.Name)
	}
	if r, ok := prov.(provider.Runner); ok {
		loops["provider"] = r.Run
	}
	// Informers the provider asked for start with the agent's.
	p.inf.cluster.Start(ctx.Done())
	p.inf.nodes.Start(ctx.Done())
	nodeCtx, stop := context.WithCancel(ctx)
	logger := klog.FromContext(ctx).WithValues("node", klog.KRef("", n.Name))
	for name, run := range loops {
		go func() {
			if err := run(nodeCtx); err != nil && nodeCtx.Err() == nil {
				logger.Error(err, "A loop of a node taken over ended", "loop", name)
			}
		}()
	}
	return &takenNode{provider: prov, stop: stop}, nil
}

// takeoverLoops builds the takeover of WithNodeSelector and, with
// WithSharding, who owns which Node: nil without a selector. follow are
// told of each node taken over in their order, and of each let go in the
// reverse order.
func (a *Agent) takeoverLoops(p *parts, follow ...nodeFollower) (*takeover, error) {
	if a.s.selector == nil {
		return nil, nil
	}
	owns := func(string) bool { return true }
	if o := a.s.shards; o != nil && o.Group == "" {
		owns = func(name string) bool { return shardOf(name, o.Count) == o.Index }
	}
	var members *shard.Members
	if o := a.s.shards; o != nil && o.Group != "" {
		duration := o.LeaseDuration
		if duration == 0 {
			duration = a.s.node.LeaseDuration
		}
		f := informers.NewSharedInformerFactoryWithOptions(p.client, 0, informers.WithNamespace(o.Namespace),
			informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
				lo.LabelSelector = labels.SelectorFromSet(labels.Set{shard.GroupLabel: o.Group}).String()
			}))
		var err error
		members, err = shard.New(p.client, f.Coordination().V1().Leases(), shard.Options{
			Namespace: o.Namespace, Group: o.Group, Identity: o.Identity, LeaseDuration: duration,
		})
		if err != nil {
			return nil, err
		}
		p.factories = append(p.factories, f)
		p.loops["shard membership"] = members.Run
		owns = members.Owns
	}
	t, err := a.newTakeover(p, follow, owns)
	if err != nil {
		return nil, err
	}
	if members != nil {
		members.OnChange(t.enqueueAll)
	}
	p.loops["node takeover"] = t.Run
	return t, nil
}
