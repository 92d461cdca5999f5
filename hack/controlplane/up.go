package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ports are chosen once per directory so that a second "up" on the same
// directory serves at the same address and the kubeconfig stays valid.
type ports struct {
	Etcd          int `json:"etcd"`
	EtcdPeer      int `json:"etcdPeer"`
	APIServer     int `json:"apiserver"`
	MetricsServer int `json:"metricsServer,omitempty"`
}

type upOptions struct {
	dir                    string
	nodeMonitorGracePeriod time.Duration
	readyTimeout           time.Duration
	apiserverPort          int
	extraAPIServerArgs     []string
	extraControllerMgrArgs []string
	metricsServer          string
	metricResolution       time.Duration
	advertiseAddress       string
}

func newUpCommand() *cobra.Command {
	o := upOptions{}
	cmd := &cobra.Command{
		Use:          "up",
		Short:        "Run etcd, apiserver, scheduler and controller-manager (and metrics-server) in one directory until interrupted",
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return o.run(ctx)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.dir, "dir", ".local/controlplane", "directory for data, certificates, logs and admin.kubeconfig")
	f.DurationVar(&o.nodeMonitorGracePeriod, "node-monitor-grace-period", 20*time.Second, "how long a node may go without a heartbeat before it is marked NotReady")
	f.DurationVar(&o.readyTimeout, "ready-timeout", 3*time.Minute, "how long to wait for the apiserver to become ready")
	f.IntVar(&o.apiserverPort, "apiserver-port", 0, "apiserver port (0 picks a free one the first time)")
	f.StringVar(&o.advertiseAddress, "advertise-address", "", "the apiserver's address for pods, the endpoint of the kubernetes Service; it then serves on every address, loopback too "+
		"(empty: the host's IPv4 address on its default route, or 127.0.0.1 without one; 127.0.0.1: serve on loopback alone, no kubernetes Service endpoint)")
	f.StringArrayVar(&o.extraAPIServerArgs, "apiserver-arg", nil, "extra flag for the apiserver (repeatable)")
	f.StringArrayVar(&o.extraControllerMgrArgs, "controller-manager-arg", nil, "extra flag for the controller-manager (repeatable)")
	f.StringVar(&o.metricsServer, "metrics-server", "", "metrics-server binary to run as the v1beta1.metrics.k8s.io APIService, for kubectl top (empty: none)")
	f.DurationVar(&o.metricResolution, "metric-resolution", 10*time.Second, "with --metrics-server: how often it scrapes the nodes (at least 10s)")
	return cmd
}

func (o *upOptions) run(ctx context.Context) error {
	dir, err := filepath.Abs(o.dir)
	if err != nil {
		return err
	}
	for _, d := range []string{dir, filepath.Join(dir, "logs")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	p, err := o.loadPorts(dir)
	if err != nil {
		return err
	}
	advertise, err := o.advertiseIP()
	if err != nil {
		return err
	}
	certs, err := ensurePKI(filepath.Join(dir, "pki"), advertise)
	if err != nil {
		return err
	}
	server := fmt.Sprintf("https://127.0.0.1:%d", p.APIServer)
	kubeconfig := filepath.Join(dir, "admin.kubeconfig")
	ms := metricsServer{path: o.metricsServer, kubeconfig: kubeconfig, resolution: o.metricResolution,
		certDir: filepath.Join(dir, metricsServerName), port: p.MetricsServer}
	if ms.path != "" {
		if ms.resolution < 10*time.Second {
			return fmt.Errorf("--metric-resolution %s: metrics-server scrapes at most every 10s", ms.resolution)
		}
		// Fail before anything starts if it cannot run.
		if _, err := exec.LookPath(ms.path); err != nil {
			return fmt.Errorf("--metrics-server: %w", err)
		}
		if ms.ip = advertise; advertise.IsLoopback() {
			if ms.ip, err = hostIPv4(); err != nil {
				return err
			}
		}
	}
	// The aggregator is always configured, as kubeadm configures it: any
	// extension API server a user runs (the conformance suite's sample
	// API server among them) trusts the front proxy's headers.
	if err := certs.ensureFrontProxy(); err != nil {
		return err
	}
	if err := writeKubeconfig(kubeconfig, server, certs); err != nil {
		return fmt.Errorf("write %s: %w", kubeconfig, err)
	}
	schedConfig := filepath.Join(dir, "scheduler.yaml")
	if err := writeSchedulerConfig(schedConfig, kubeconfig); err != nil {
		return fmt.Errorf("write %s: %w", schedConfig, err)
	}

	self, err := os.Executable()
	if err != nil {
		return err
	}
	g := &group{self: self, logDir: filepath.Join(dir, "logs"), exited: make(chan childExit, 8)}
	defer g.stopAll()

	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", p.Etcd)
	if err := g.start("etcd",
		"--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-url="+etcdURL,
		fmt.Sprintf("--listen-peer-url=http://127.0.0.1:%d", p.EtcdPeer),
	); err != nil {
		return err
	}
	if err := g.waitFor(ctx, "etcd", o.readyTimeout, func() bool { return dialable(p.Etcd) }); err != nil {
		return err
	}

	apiArgs := []string{
		"--etcd-servers=" + etcdURL,
		"--secure-port=" + strconv.Itoa(p.APIServer),
		"--tls-cert-file=" + certs.path("apiserver.crt"),
		"--tls-private-key-file=" + certs.path("apiserver.key"),
		"--client-ca-file=" + certs.path("ca.crt"),
		"--kubelet-client-certificate=" + certs.path("apiserver-kubelet-client.crt"),
		"--kubelet-client-key=" + certs.path("apiserver-kubelet-client.key"),
		// Local nodes' hostnames do not resolve; their InternalIP does.
		"--kubelet-preferred-address-types=InternalIP,Hostname",
		"--service-account-key-file=" + certs.path("sa.pub"),
		"--service-account-signing-key-file=" + certs.path("sa.key"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range=10.96.0.0/16",
		"--authorization-mode=Node,RBAC",
		"--allow-privileged=true",
		// A local control plane serves one user; let large simulated
		// clusters through without queueing.
		"--enable-priority-and-fairness=false",
		"--max-requests-inflight=3000",
		"--max-mutating-requests-inflight=1500",
		"--profiling=false",
	}
	apiArgs = append(apiArgs, advertiseArgs(advertise)...)
	apiArgs = append(apiArgs, bootstrapAPIServerArgs()...)
	apiArgs = append(apiArgs, aggregatorArgs(certs)...)
	if err := g.start("apiserver", append(apiArgs, o.extraAPIServerArgs...)...); err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cfg.Timeout = 5 * time.Second
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	if err := g.waitFor(ctx, "apiserver", o.readyTimeout, func() bool {
		resp, err := hc.Get(server + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}); err != nil {
		return err
	}

	if err := g.start("scheduler",
		"--config="+schedConfig,
		"--secure-port=0",
	); err != nil {
		return err
	}
	cmArgs := []string{
		"--kubeconfig=" + kubeconfig,
		"--secure-port=0",
		"--leader-elect=false",
		"--service-account-private-key-file=" + certs.path("sa.key"),
		"--root-ca-file=" + certs.path("ca.crt"),
		"--cluster-signing-cert-file=" + certs.path("ca.crt"),
		"--cluster-signing-key-file=" + certs.path("ca.key"),
		"--use-service-account-credentials=false",
		"--node-monitor-grace-period=" + o.nodeMonitorGracePeriod.String(),
		"--node-monitor-period=2s",
		"--kube-api-qps=500",
		"--kube-api-burst=1000",
		"--concurrent-deployment-syncs=10",
		"--concurrent-replicaset-syncs=10",
		"--concurrent-gc-syncs=50",
	}
	cmArgs = append(cmArgs, bootstrapControllerArgs()...)
	if err := g.start("controller-manager", append(cmArgs, o.extraControllerMgrArgs...)...); err != nil {
		return err
	}
	if ms.path != "" {
		if err := ms.start(ctx, g, cfg, o.readyTimeout); err != nil {
			return err
		}
	} else if err := unregisterMetricsServer(ctx, cfg); err != nil {
		return fmt.Errorf("unregister metrics-server: %w", err)
	}

	if !advertise.IsLoopback() {
		if err := waitAdvertised(ctx, cfg, advertise, p.APIServer, o.readyTimeout); err != nil {
			return err
		}
	}
	if err := setUpBootstrap(ctx, cfg, bootstrapKubeconfigPath(dir), server, certs.path("ca.crt")); err != nil {
		return fmt.Errorf("bootstrap token: %w", err)
	}

	fmt.Printf("control plane ready at %s\n", server)
	if !advertise.IsLoopback() {
		fmt.Printf("  pods reach it at https://kubernetes.default.svc (%s:%d)\n", advertise, p.APIServer)
	}
	fmt.Printf("  export KUBECONFIG=%s\n", kubeconfig)
	fmt.Printf("  nodes join with --bootstrap-kubeconfig %s\n", bootstrapKubeconfigPath(dir))
	fmt.Printf("  logs in %s\n", g.logDir)
	if err := serveControl(ctx, dir, g, o.readyTimeout); err != nil {
		return fmt.Errorf("control socket: %w", err)
	}
	fmt.Printf("  stop and start its servers with: controlplane ctl --dir %s stop|start NAME\n", dir)
	if err := os.WriteFile(filepath.Join(dir, "ready"), []byte(server+"\n"), 0o644); err != nil {
		return err
	}
	defer os.Remove(filepath.Join(dir, "ready"))

	select {
	case <-ctx.Done():
		fmt.Println("stopping control plane")
		return nil
	case e := <-g.exited:
		return fmt.Errorf("%s exited: %v (see %s)", e.name, e.err, filepath.Join(g.logDir, e.name+".log"))
	}
}

// loadPorts reads the ports of dir, choosing those it does not hold yet
// (metrics-server's only when it runs) and saving them.
func (o *upOptions) loadPorts(dir string) (ports, error) {
	path := filepath.Join(dir, "ports.json")
	var p ports
	data, err := os.ReadFile(path)
	switch {
	case err == nil:
		if err := json.Unmarshal(data, &p); err != nil {
			return p, fmt.Errorf("%s: %w", path, err)
		}
	case !errors.Is(err, os.ErrNotExist):
		return p, err
	}
	if p.APIServer == 0 {
		p.APIServer = o.apiserverPort
	}
	missing := []*int{&p.Etcd, &p.EtcdPeer, &p.APIServer}
	if o.metricsServer != "" {
		missing = append(missing, &p.MetricsServer)
	}
	// Each port's listener stays open until every port is picked, so that
	// the kernel cannot hand the same port out twice.
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	free := func() (int, error) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		held = append(held, l)
		return l.Addr().(*net.TCPAddr).Port, nil
	}
	changed := false
	for _, dst := range missing {
		if *dst != 0 {
			continue
		}
		if *dst, err = free(); err != nil {
			return p, err
		}
		changed = true
	}
	if !changed {
		return p, nil
	}
	data, _ = json.Marshal(p)
	return p, os.WriteFile(path, data, 0o644)
}

func writeKubeconfig(path, server string, certs *pki) error {
	read := func(name string) ([]byte, error) { return os.ReadFile(certs.path(name)) }
	ca, err := read("ca.crt")
	if err != nil {
		return err
	}
	crt, err := read("admin.crt")
	if err != nil {
		return err
	}
	key, err := read("admin.key")
	if err != nil {
		return err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: crt, ClientKeyData: key}
	cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "admin"}
	cfg.CurrentContext = "local"
	return clientcmd.WriteToFile(*cfg, path)
}

func writeSchedulerConfig(path, kubeconfig string) error {
	const tmpl = `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %q
  qps: 1000
  burst: 2000
leaderElection:
  leaderElect: false
`
	return os.WriteFile(path, []byte(fmt.Sprintf(tmpl, kubeconfig)), 0o644)
}

func dialable(port int) bool {
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}
