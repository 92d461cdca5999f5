// Package agent turns providers into a running node agent: it registers
// the nodes (its own, and with WithNodeSelector the Nodes others create
// that it takes over at run time) and keeps their Leases and status, syncs
// the pods bound to them
// with each node's provider and reports their status, and, as options ask,
// serves the kubelet API (logs, exec, attach, port-forward, stats),
// evicts under node pressure, shuts a node down gracefully, runs static
// pods, attaches volumes, follows a remote config and serves /healthz.
//
// A provider author needs only this package and package provider:
//
//	a, err := agent.New(agent.One("my-node"), func(env *agent.Env) (agent.Provider, error) {
//		return myprovider.New(env.Node.Name, env.Client)
//	}, agent.WithKubeconfig(path), agent.WithServer(server.Options{}))
//	…
//	err = a.Run(ctx)
//
// New only checks the options; Run loads the credentials, builds every
// part (each node's provider among them) and then runs every loop until
// its context ends. The package owns the wiring and no control loop of its
// own; it never imports a provider.
package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/config"
	"github.com/nodelet/nodelet/pkg/node"
)

// Agent is a node agent, checked and not yet running.
type Agent struct {
	nodes       Nodes
	newProvider NewProviderFunc
	s           settings
}

// New checks an agent's nodes, provider constructor and options; it does
// no I/O. Each error names its option.
func New(nodes Nodes, newProvider NewProviderFunc, opts ...Option) (*Agent, error) {
	s := settings{
		qps: 5000, burst: 10000, contentType: config.ContentTypeProtobuf,
		version: Version, rootDir: "/var/lib/nodelet",
	}
	var errs []error
	for _, o := range opts {
		if err := o(&s); err != nil {
			errs = append(errs, err)
		}
	}
	if nodes.Len() == 0 && s.selector == nil {
		errs = append(errs, errors.New("nodes: none to manage, and none to take over (WithNodeSelector)"))
	}
	if s.shards != nil && s.selector == nil {
		errs = append(errs, errors.New("sharding: splits the nodes taken over; give WithNodeSelector"))
	}
	if s.selector != nil {
		for _, one := range []struct {
			set  bool
			what string
		}{
			{s.eviction != nil, "eviction"},
			{s.attachDetach != nil, "attach/detach"},
			{s.remote != nil && nodes.Len() == 0, "remote config (it follows the agent's first own node)"},
		} {
			if one.set {
				errs = append(errs, errors.New(one.what+": not yet with nodes taken over (WithNodeSelector)"))
			}
		}
	}
	if s.server != nil && s.server.TLSBootstrap && nodes.Len() == 0 {
		// The certificate requested is a node's (system:node:NAME).
		errs = append(errs, errors.New("kubelet API server: TLS bootstrap requests an own node's serving certificate; an agent that only takes Nodes over serves with a certificate file or a self-signed one"))
	}
	seen := map[string]bool{}
	for _, n := range nodes.nodes {
		if n.Name == "" || seen[n.Name] {
			errs = append(errs, fmt.Errorf("nodes: name %q empty or given twice", n.Name))
		}
		seen[n.Name] = true
	}
	if newProvider == nil {
		errs = append(errs, errors.New("provider constructor: nil"))
	}
	if s.client.config != nil && (s.client.kubeconfig != "" || s.client.bootstrap != "") {
		errs = append(errs, errors.New("client config: given with a kubeconfig or bootstrap; pick one"))
	}
	if nodes.Len() > 1 || s.selector != nil {
		for _, one := range []struct {
			set bool
			why string
		}{
			{s.client.bootstrap != "", "bootstrap: a node's identity covers one node; run several nodes with a service account or a kubeconfig"},
			{s.staticPods != nil, "static pods: run on one node"},
			{s.shutdownSet, "graceful shutdown: shuts one node down"},
		} {
			if one.set {
				errs = append(errs, errors.New(one.why))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &Agent{nodes: nodes, newProvider: newProvider, s: s}, nil
}

// Run loads the credentials (with TLS bootstrap, requesting the node's
// certificate), builds every part, then runs every loop until ctx is done
// or one of them fails, which stops the others. The error joins those of
// the loops, each named, less context.Canceled; with a remote config it
// may be config.ErrRestart, when the agent must restart to use a newly
// assigned config. Run is called once.
func (a *Agent) Run(ctx context.Context) error {
	creds, err := a.loadCredentials(ctx)
	if err != nil {
		return err
	}
	b, err := a.build(creds.config)
	if err != nil {
		return err
	}
	if creds.renew != nil {
		b.loops["client certificate"] = creds.renew
	}
	return b.run(ctx)
}

// built is an agent with every part made: what Run starts.
type built struct {
	client      kubernetes.Interface
	broadcaster record.EventBroadcaster
	// factories are the pods of the managed nodes, their Nodes, and
	// cluster-wide objects.
	factories []informers.SharedInformerFactory
	// loops are the blocking Run of every part, by the name their errors
	// carry.
	loops map[string]func(context.Context) error
	nodes *node.Controller
	count int
	// takingOver says whether the agent takes over Nodes others create.
	takingOver bool
}

// run starts the informers and every loop, and returns once they have all
// returned.
func (b *built) run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	b.broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: b.client.CoreV1().Events("")})
	defer b.broadcaster.Shutdown()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, f := range b.factories {
		f.Start(ctx.Done())
		defer f.Shutdown()
	}
	errs := make(chan error, len(b.loops))
	var wg sync.WaitGroup
	for name, run := range b.loops {
		wg.Go(func() {
			if err := run(ctx); err != nil {
				errs <- fmt.Errorf("%s: %w", name, err)
				cancel()
			}
		})
	}
	go func() {
		select {
		case <-b.nodes.Ready():
			logger.Info("Nodes registered", "count", b.count, "takingOver", b.takingOver)
		case <-ctx.Done():
		}
	}()
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		if !errors.Is(err, context.Canceled) {
			all = append(all, err)
		}
	}
	return errors.Join(all...)
}

// eventSource is who the agent's Events come from.
func (a *Agent) eventSource() corev1.EventSource {
	if a.nodes.Len() == 0 {
		return corev1.EventSource{Component: "nodelet"}
	}
	return corev1.EventSource{Component: "nodelet", Host: a.nodes.nodes[0].Name}
}
