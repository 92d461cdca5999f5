// Command podservice-node joins a cluster as one node whose pods run on a
// remote pod service (package podservice).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/nodelet/nodelet/examples/podservice"
	"github.com/nodelet/nodelet/pkg/agent"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "podservice-node:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	flags := flag.NewFlagSet("podservice-node", flag.ContinueOnError)
	kubeconfig := flags.String("kubeconfig", "", "kubeconfig of the cluster to join (default: the pod's service account)")
	nodeName := flags.String("node-name", "podservice", "name of the node")
	serviceURL := flags.String("service-url", "", "base URL of the pod service")
	address := flags.String("address", "127.0.0.1", "the node's InternalIP, where the kubelet API listens")
	port := flags.Int("port", 10250, "port of the kubelet API (kubectl logs)")
	clientCA := flags.String("client-ca-file", "", "CA of the API server's kubelet client certificate")
	if err := flags.Parse(args); err != nil {
		return err
	}

	a, err := agent.New(agent.One(*nodeName),
		func(env *agent.Env) (agent.Provider, error) {
			return podservice.New(podservice.Options{
				NodeName: env.Node.Name,
				URL:      *serviceURL,
				Address:  *address,
				Port:     int32(*port),
				Version:  env.Version,
			})
		},
		agent.WithKubeconfig(*kubeconfig),
		agent.WithServer(agent.ServerOptions{Address: *address, Port: int32(*port), ClientCAFile: *clientCA}),
	)
	if err != nil {
		return err
	}
	return a.Run(ctx) // every loop, until ctx ends
}
