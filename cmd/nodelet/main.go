// Command nodelet is a Kubernetes node agent: it registers Nodes, keeps them
// alive and runs the pods bound to them through a provider.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/internal/app"
	"github.com/nodelet/nodelet/pkg/agent"
	"github.com/nodelet/nodelet/pkg/config"
	"github.com/nodelet/nodelet/pkg/providers/process/sandbox"
)

func main() {
	if len(os.Args) > 1 && sandbox.IsSubcommand(os.Args[1]) {
		os.Exit(sandbox.Main(os.Args[1:]))
	}
	var err error
	switch {
	case len(os.Args) > 1 && os.Args[1] == "config":
		err = runConfig(os.Args[2:], os.Stdout)
	case len(os.Args) > 1 && os.Args[1] == "shutdown":
		err = runShutdown(os.Args[2:], os.Stdout)
	default:
		err = run(os.Args[1:])
	}
	if err != nil {
		if !errors.Is(err, pflag.ErrHelp) {
			fmt.Fprintf(os.Stderr, "nodelet: %v\n", err)
		}
		os.Exit(1)
	}
}

// options are the command-line settings that are not part of the config.
type options struct {
	kubeconfig          string
	bootstrapKubeconfig string
	configFile          string
}

func run(args []string) error {
	var o options
	cfg, file, source, err := loadConfig(&o, args)
	if err != nil {
		return err
	}
	if err := config.ValidationError(source, cfg.Validate()); err != nil {
		return err
	}
	reapInherited()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	logger := klog.Background()
	if cfg.NodeName != "" { // none when the agent only takes Nodes over
		logger = logger.WithValues("node", cfg.NodeName)
	}
	ctx = klog.NewContext(ctx, logger)

	// The config to run: the local one, or the remote one assigned to
	// this node (flags override it too), or the last-known-good.
	remote, err := config.NewController(config.Local{
		Config: cfg,
		File:   file,
		Flags: func(c *config.Config) error {
			var ignored options
			return newFlagSet(&ignored, c).Parse(args)
		},
	}, config.ControllerOptions{})
	if err != nil {
		return err
	}
	defer remote.Close()
	if cfg, err = remote.Bootstrap(logger); err != nil {
		return err
	}

	logger.Info("Starting nodelet", "version", agent.Version, "provider", cfg.Provider)
	err = app.Run(ctx, app.Credentials{Kubeconfig: o.kubeconfig, BootstrapKubeconfig: o.bootstrapKubeconfig}, cfg, remote)
	if errors.Is(err, config.ErrRestart) {
		logger.Info("Restarting nodelet in place to use the newly assigned config")
		klog.Flush()
		stop()
		remote.Close()
		return reexec()
	}
	logger.Info("nodelet stopped")
	klog.Flush()
	return err
}

// loadConfig applies the flags over the config file over the defaults and
// says where the result came from. It does not validate. file is the config
// file as decoded, before defaults and flags (nil without one).
func loadConfig(o *options, args []string) (cfg, file *config.Config, source string, err error) {
	// The file is named by a flag, so parse once to find it, load it, then
	// parse again on top of it.
	if err := newFlagSet(o, config.Default()).Parse(args); err != nil {
		return nil, nil, "", err
	}
	cfg = &config.Config{}
	if o.configFile != "" {
		if file, err = config.LoadFile(o.configFile); err != nil {
			return nil, nil, "", err
		}
		if cfg, err = clone(file); err != nil {
			return nil, nil, "", err
		}
	}
	config.SetDefaults(cfg)
	if err := newFlagSet(o, cfg).Parse(args); err != nil {
		return nil, nil, "", err
	}
	source = "flags"
	if o.configFile != "" {
		source = "config file " + o.configFile + " and flags"
	}
	return cfg, file, source, nil
}

// clone is a deep copy of c.
func clone(c *config.Config) (*config.Config, error) {
	data, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	var out config.Config
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

func newFlagSet(o *options, cfg *config.Config) *pflag.FlagSet {
	fs := pflag.NewFlagSet("nodelet", pflag.ContinueOnError)
	fs.StringVar(&o.kubeconfig, "kubeconfig", o.kubeconfig, "path to a kubeconfig; empty means in-cluster (with --bootstrap-kubeconfig: where the node's kubeconfig is written, default <root-dir>/kubeconfig)")
	fs.StringVar(&o.bootstrapKubeconfig, "bootstrap-kubeconfig", o.bootstrapKubeconfig, "TLS bootstrap: a kubeconfig with a bootstrap token, used to request the node's client certificate when none valid is kept under <root-dir>/pki")
	fs.StringVar(&o.configFile, "config", o.configFile, "path to a "+config.Kind+" YAML file; flags override it")
	fs.StringVar(&cfg.NodeName, "node-name", cfg.NodeName, "name of the Node to register (sim provider: may be empty when the agent only takes Nodes over)")
	fs.Int32Var(&cfg.Nodes, "nodes", cfg.Nodes, "register this many nodes named <node-name>-<i>; 0 registers one node named <node-name>")
	fs.StringVar(&cfg.Shard, "shard", cfg.Shard, `manage only shard "i/n" of the nodes (by hash of node name); "auto": split the Nodes taken over among the live replicas of --shard-group`)
	fs.StringVar(&cfg.ShardGroup, "shard-group", cfg.ShardGroup, "with --shard auto: the replicas that split one set of Nodes, each holding a Lease in kube-node-lease")
	fs.StringVar(&cfg.ManageSingleNode, "manage-single-node", cfg.ManageSingleNode, "take over the Node of this name, when it appears (kwok's flag; sim provider); conflicts with --manage-all-nodes and the --manage-nodes-with-… selectors")
	fs.BoolVar(&cfg.ManageAllNodes, "manage-all-nodes", cfg.ManageAllNodes, "take over every Node (kwok's flag; sim provider); conflicts with the --manage-nodes-with-… selectors")
	fs.StringVar(&cfg.ManageNodesWithAnnotationSelector, "manage-nodes-with-annotation-selector", cfg.ManageNodesWithAnnotationSelector,
		"take over the Nodes whose annotations match this selector, as they appear (kwok's flag; sim provider; default "+config.KwokNodeSelector+" when the agent has no --node-name)")
	fs.StringVar(&cfg.ManageNodesWithLabelSelector, "manage-nodes-with-label-selector", cfg.ManageNodesWithLabelSelector, "take over the Nodes whose labels match this selector, as they appear (kwok's flag; sim provider); with the annotation selector, both must match")
	fs.StringVar(&cfg.Provider, "provider", cfg.Provider, "provider that runs the pods: sim, process or cri")
	fs.StringVar(&cfg.ContainerRuntimeEndpoint, "container-runtime-endpoint", cfg.ContainerRuntimeEndpoint, "cri provider: the container runtime's CRI socket")
	fs.StringSliceVar(&cfg.ClusterDNS, "cluster-dns", cfg.ClusterDNS, "cri provider: cluster DNS server addresses, comma-separated")
	fs.StringVar(&cfg.ClusterDomain, "cluster-domain", cfg.ClusterDomain, "cri provider: the cluster's DNS domain")
	fs.StringSliceVar(&cfg.AllowedUnsafeSysctls, "allowed-unsafe-sysctls", cfg.AllowedUnsafeSysctls, "sysctls beyond the safe set that pods may set (names or prefixes ending in *), comma-separated")
	fs.StringVar(&cfg.PodLogsDir, "pod-logs-dir", cfg.PodLogsDir, "cri provider: directory of the containers' logs")
	fs.StringVar(&cfg.RootDir, "root-dir", cfg.RootDir, "process provider: directory of the pods' state, volumes and logs")
	fs.Int32Var(&cfg.MaxPods, "max-pods", cfg.MaxPods, "process provider: the node's pod capacity")
	fs.Var(&optionalBool{&cfg.EnableServer}, "enable-server", "run the kubelet API server on --port (default: with the process and cri providers)")
	fs.Lookup("enable-server").NoOptDefVal = "true"
	fs.StringVar(&cfg.Authentication.X509.ClientCAFile, "client-ca-file", cfg.Authentication.X509.ClientCAFile, "kubelet API server: CA bundle that signs the client certificates it accepts")
	fs.StringVar(&cfg.TLSCertFile, "tls-cert-file", cfg.TLSCertFile, "kubelet API server: serving certificate (default: self-signed)")
	fs.StringVar(&cfg.TLSPrivateKeyFile, "tls-private-key-file", cfg.TLSPrivateKeyFile, "kubelet API server: serving key")
	fs.Var(cliflag.NewLangleSeparatedMapStringString(&cfg.EvictionHard), "eviction-hard",
		`hard eviction thresholds, signal<quantity or signal<percent,...; "0%" switches a signal off; replaces the config file's whole set`)
	fs.StringToStringVar(&cfg.NodeLabels, "node-labels", cfg.NodeLabels, "labels to add to the Node, key=value,...")
	fs.Var(&taintsValue{&cfg.RegisterWithTaints}, "register-with-taints", "taints to register the Node with, key=value:Effect,...")
	fs.Int32Var(&cfg.NodeLeaseDurationSeconds, "node-lease-duration-seconds", cfg.NodeLeaseDurationSeconds, "duration of the node Lease; renewed every quarter of it")
	fs.DurationVar(&cfg.NodeStatusReportFrequency.Duration, "node-status-report-frequency", cfg.NodeStatusReportFrequency.Duration, "how often an unchanged node status is reported")
	fs.DurationVar(&cfg.PingInterval.Duration, "ping-interval", cfg.PingInterval.Duration, "how often the provider is pinged")
	fs.StringVar(&cfg.Address, "address", cfg.Address, "the node's InternalIP")
	fs.Int32Var(&cfg.Port, "port", cfg.Port, "kubelet API port published in the node's daemonEndpoints")
	fs.Int32Var(&cfg.HealthzPort, "healthz-port", cfg.HealthzPort, "port of the unauthenticated /healthz for liveness and readiness probes; 0 turns it off")
	fs.StringVar(&cfg.HealthzBindAddress, "healthz-bind-address", cfg.HealthzBindAddress, "IP address that /healthz listens on (0.0.0.0 for every interface)")
	fs.Int32Var(&cfg.ReadOnlyPort, "read-only-port", cfg.ReadOnlyPort, "port of the kubelet API's read-only endpoints (/pods, /stats/summary, /metrics…) over plain HTTP without authentication, as the kubelet's; 0 turns it off")
	fs.Float32Var(&cfg.KubeAPIQPS, "kube-api-qps", cfg.KubeAPIQPS, "queries per second to the API server")
	fs.Int32Var(&cfg.KubeAPIBurst, "kube-api-burst", cfg.KubeAPIBurst, "burst of queries to the API server")
	fs.StringVar(&cfg.ContentType, "kube-api-content-type", cfg.ContentType, "content type of requests to the API server: application/vnd.kubernetes.protobuf or application/json")
	fs.DurationVar(&cfg.Sim.StartDelay.Duration, "sim-start-delay", cfg.Sim.StartDelay.Duration, "sim provider: how long a pod stays Pending")
	fs.DurationVar(&cfg.Sim.DeleteDelay.Duration, "sim-delete-delay", cfg.Sim.DeleteDelay.Duration, "sim provider: how long a deleted pod takes to terminate")
	fs.StringSliceVar(&cfg.Sim.EnableCRDs, "enable-crds", cfg.Sim.EnableCRDs, "sim provider: kwok's CRDs whose objects in the cluster are followed (kwok's flag): Stage, Logs, ClusterLogs, Exec, ClusterExec, Attach, ClusterAttach, PortForward, ClusterPortForward, ResourceUsage, ClusterResourceUsage, comma-separated")
	fs.StringSliceVar(&cfg.Sim.Stages, "sim-stages", cfg.Sim.Stages, "sim provider: files or directories of kwok Stage objects (kwok.x-k8s.io/v1alpha1; a kwok --config file works) that play the pods' lifecycles, and of its Logs, Exec, PortForward, ResourceUsage objects (and Cluster kinds), comma-separated")
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	fs.AddGoFlagSet(klogFlags)
	return fs
}

// optionalBool is a flag for a *bool that stays nil unless given.
type optionalBool struct{ v **bool }

func (b *optionalBool) String() string {
	if b.v == nil || *b.v == nil {
		return ""
	}
	return strconv.FormatBool(**b.v)
}

func (b *optionalBool) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	*b.v = &v
	return nil
}

func (b *optionalBool) Type() string { return "bool" }

// taintsValue parses key=value:Effect,... into taints.
type taintsValue struct{ taints *[]corev1.Taint }

func (v *taintsValue) String() string {
	if v.taints == nil {
		return ""
	}
	var parts []string
	for _, t := range *v.taints {
		parts = append(parts, t.ToString())
	}
	return strings.Join(parts, ",")
}

func (v *taintsValue) Set(s string) error {
	var taints []corev1.Taint
	for _, spec := range strings.Split(s, ",") {
		if spec == "" {
			continue
		}
		keyValue, effect, ok := strings.Cut(spec, ":")
		if !ok {
			return fmt.Errorf("taint %q: want key=value:Effect", spec)
		}
		key, value, _ := strings.Cut(keyValue, "=")
		taints = append(taints, corev1.Taint{Key: key, Value: value, Effect: corev1.TaintEffect(effect)})
	}
	*v.taints = taints
	return nil
}

func (v *taintsValue) Type() string { return "taints" }
