// Command controlplane is a multicall binary holding a whole local Kubernetes
// control plane: embedded etcd, the upstream kube-apiserver, kube-scheduler,
// kube-controller-manager and kubectl, plus "up", which runs all four servers
// as child processes in one directory for development and end-to-end tests.
// With --metrics-server, "up" also runs metrics-server (built apart, by the
// hack/metrics-server module) as the metrics.k8s.io APIService.
// It also holds the upstream kubelet, which "up" never starts: the benchmarks
// run it as the reference node agent for nodelet's cri provider.
// "ctl" stops, kills and starts the servers of a running "up" one at a time
// (etcd or the apiserver going away under a cluster, for fault injection).
//
// It is a separate Go module so that nodelet itself never depends on
// k8s.io/kubernetes.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"
	kubectlcmd "k8s.io/kubectl/pkg/cmd"
	cmdutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

var commands = map[string]func() *cobra.Command{
	"apiserver":          apiserver.NewAPIServerCommand,
	"scheduler":          func() *cobra.Command { return scheduler.NewSchedulerCommand() },
	"controller-manager": controllermanager.NewControllerManagerCommand,
	"kubectl":            kubectlcmd.NewDefaultKubectlCommand,
	"kubelet":            func() *cobra.Command { return kubelet.NewKubeletCommand(context.Background()) },
	"etcd":               newEtcdCommand,
	"up":                 newUpCommand,
	"ctl":                newCtlCommand,
}

func main() {
	name := filepath.Base(os.Args[0])
	args := os.Args[1:]
	if _, ok := commands[name]; !ok {
		if len(args) == 0 {
			usage()
			os.Exit(2)
		}
		name, args = args[0], args[1:]
	}
	newCmd, ok := commands[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "controlplane: unknown command %q\n", name)
		usage()
		os.Exit(2)
	}
	// Upstream commands read os.Args themselves (kubectl's plugin lookup does),
	// so present them exactly what their own binary would have seen.
	os.Args = append([]string{name}, args...)
	cmd := newCmd()
	cmd.SetArgs(args)
	if name == "kubectl" {
		if err := cli.RunNoErrOutput(cmd); err != nil {
			// kubectl prints its own errors, with its own exit codes.
			cmdutil.CheckErr(err)
		}
		os.Exit(0)
	}
	os.Exit(cli.Run(cmd))
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: controlplane up|ctl|etcd|apiserver|scheduler|controller-manager|kubectl|kubelet [flags]")
}
