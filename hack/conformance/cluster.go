package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/mountinfo"
	"github.com/nodelet/nodelet/test/crienv"
)

// The cluster's DNS: the kube-dns Service at DNSServiceIP sends port 53 to
// CoreDNS, a host process on the node's address at dnsPort.
const (
	nodeName     = "nodelet-conformance"
	dnsDomain    = "cluster.local"
	dnsServiceIP = "10.96.0.10"
	dnsPort      = 10053
)

// cluster is one provider's fresh local cluster; stop undoes what start
// did, in reverse order.
type cluster struct {
	dir        string
	bin        string
	provider   string
	kubeconfig string
	client     kubernetes.Interface
	hostIP     string
	rootDir    string
	runtime    *crienv.Env
	stops      []func() error
}

func (c *cluster) onStop(f func() error) { c.stops = append(c.stops, f) }

// stop runs every stop in reverse order and joins their errors.
func (c *cluster) stop() error {
	var errs []error
	for i := len(c.stops) - 1; i >= 0; i-- {
		errs = append(errs, c.stops[i]())
	}
	c.stops = nil
	return errors.Join(errs...)
}

// startCluster brings up the control plane, the runtime (cri), the node,
// CoreDNS and kube-proxy. On error what was started is stopped.
func startCluster(ctx context.Context, o options, provider, dir string) (c *cluster, err error) {
	c = &cluster{dir: dir, bin: o.bin, provider: provider, rootDir: filepath.Join(dir, "nodelet")}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.stop())
		}
	}()
	if c.hostIP, err = defaultRouteIP(); err != nil {
		return c, err
	}
	if err := c.startControlPlane(ctx); err != nil {
		return c, err
	}
	var runtimeArgs []string
	if provider == "cri" {
		if err := c.startRuntime(ctx, o.images); err != nil {
			return c, err
		}
		runtimeArgs = []string{"--container-runtime-endpoint", c.runtime.Endpoint(),
			"--pod-logs-dir", filepath.Join(dir, "logs", "pods")}
	}
	if err := c.startNode(ctx, runtimeArgs); err != nil {
		return c, err
	}
	if err := c.startDNS(ctx); err != nil {
		return c, err
	}
	if err := c.startProxy(ctx); err != nil {
		return c, err
	}
	return c, nil
}

func (c *cluster) startControlPlane(ctx context.Context) error {
	cpDir := filepath.Join(c.dir, "controlplane")
	if _, err := c.daemon("controlplane", filepath.Join(c.bin, "controlplane"), "up", "--dir", cpDir); err != nil {
		return err
	}
	if _, err := waitFile(ctx, filepath.Join(cpDir, "ready"), 5*time.Minute); err != nil {
		return fmt.Errorf("control plane: %w (log %s)", err, c.logPath("controlplane"))
	}
	c.kubeconfig = filepath.Join(cpDir, "admin.kubeconfig")
	cfg, err := clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	if err != nil {
		return err
	}
	c.client, err = kubernetes.NewForConfig(cfg)
	return err
}

// startRuntime runs the registry of make images on loopback and a private
// containerd that mirrors registry.k8s.io and docker.io to it.
func (c *cluster) startRuntime(ctx context.Context, images string) error {
	ready := filepath.Join(c.dir, "registry-addr")
	if _, err := c.daemon("registry", filepath.Join(c.bin, "images"), "serve", "--dir", images,
		"--listen", "127.0.0.1:0", "--ready-file", ready); err != nil {
		return err
	}
	addr, err := waitFile(ctx, ready, time.Minute)
	if err != nil {
		return fmt.Errorf("registry: %w (log %s)", err, c.logPath("registry"))
	}
	env, err := crienv.Start(ctx, crienv.Options{BinDir: c.bin, Mirror: "http://" + addr})
	if err != nil {
		return err
	}
	c.runtime = env
	c.onStop(env.Stop)
	return nil
}

func (c *cluster) startNode(ctx context.Context, extra []string) error {
	ca := filepath.Join(filepath.Dir(c.kubeconfig), "pki", "ca.crt")
	// The node joins as a kubelet does: with the control plane's bootstrap
	// token, then as system:node:<name> under NodeRestriction.
	bootstrap := filepath.Join(filepath.Dir(c.kubeconfig), "bootstrap.kubeconfig")
	args := append([]string{"--bootstrap-kubeconfig", bootstrap, "--kubeconfig", filepath.Join(c.rootDir, "kubeconfig"),
		"--node-name", nodeName, "--provider", c.provider,
		"--root-dir", c.rootDir, "--client-ca-file", ca, "--address", c.hostIP,
		"--cluster-dns", dnsServiceIP, "--cluster-domain", dnsDomain,
		// Memory is the only eviction signal: the node's disk is the
		// host's, shared with the builds and everything else the machine
		// runs, and a kubelet's 10-15% free default would make the run's
		// outcome the machine's fill level.
		"--eviction-hard=memory.available<100Mi"}, extra...)
	if _, err := c.daemon("nodelet", filepath.Join(c.bin, "nodelet"), args...); err != nil {
		return err
	}
	c.onStop(c.deleteNode)
	c.onStop(c.drain)
	err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := c.client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == corev1.ConditionTrue, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("node %s not Ready: %w (log %s)", nodeName, err, c.logPath("nodelet"))
	}
	return nil
}

// drain deletes every pod still on the node (an interrupted suite leaves
// some) and waits until the agent has torn them down, before the agent
// stops: a stopped agent leaves its pods running by design.
func (c *cluster) drain() error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	opts := metav1.ListOptions{FieldSelector: "spec.nodeName=" + nodeName}
	err := wait.PollUntilContextCancel(ctx, 2*time.Second, true, func(ctx context.Context) (bool, error) {
		pods, err := c.client.CoreV1().Pods("").List(ctx, opts)
		if err != nil {
			return false, nil
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil {
				_ = c.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](1)})
			}
		}
		mounts, err := mountinfo.Under(c.rootDir)
		return len(pods.Items) == 0 && err == nil && len(mounts) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("drain node %s: %w", nodeName, err)
	}
	return nil
}

// deleteNode removes the Node object once its agent has stopped, so a
// later run starts from none.
func (c *cluster) deleteNode() error {
	err := c.client.CoreV1().Nodes().Delete(context.Background(), nodeName, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// startDNS runs CoreDNS on the node's address, serving the cluster's
// Services and Pods, and points the kube-dns Service at it.
func (c *cluster) startDNS(ctx context.Context) error {
	corefile := filepath.Join(c.dir, "Corefile")
	conf := fmt.Sprintf(`.:%d {
    bind %s
    errors
    health 127.0.0.1:0
    kubernetes %s in-addr.arpa ip6.arpa {
        kubeconfig %s
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }
    forward . /etc/resolv.conf
    cache 30
}
`, dnsPort, c.hostIP, dnsDomain, c.kubeconfig)
	if err := os.WriteFile(corefile, []byte(conf), 0o644); err != nil {
		return err
	}
	if _, err := c.daemon("coredns", filepath.Join(c.bin, "coredns"), "-conf", corefile); err != nil {
		return err
	}
	svcs := c.client.CoreV1().Services(metav1.NamespaceSystem)
	labels := map[string]string{"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS"}
	_, err := svcs.Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Labels: labels},
		Spec: corev1.ServiceSpec{
			ClusterIP: dnsServiceIP,
			Ports: []corev1.ServicePort{
				{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, TargetPort: intstr.FromInt32(dnsPort)},
				{Name: "dns-tcp", Protocol: corev1.ProtocolTCP, Port: 53, TargetPort: intstr.FromInt32(dnsPort)},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("kube-dns Service: %w", err)
	}
	_, err = c.client.DiscoveryV1().EndpointSlices(metav1.NamespaceSystem).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-dns-coredns", Labels: map[string]string{
			discoveryv1.LabelServiceName: "kube-dns",
			discoveryv1.LabelManagedBy:   "conformance.nodelet.io",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{c.hostIP},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
			NodeName:   ptr.To(nodeName),
		}},
		Ports: []discoveryv1.EndpointPort{
			{Name: ptr.To("dns"), Protocol: ptr.To(corev1.ProtocolUDP), Port: ptr.To[int32](dnsPort)},
			{Name: ptr.To("dns-tcp"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](dnsPort)},
		},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("kube-dns EndpointSlice: %w", err)
	}
	return nil
}

// startProxy runs kube-proxy in iptables mode for the node; its rules are
// removed with kube-proxy --cleanup when the cluster stops.
func (c *cluster) startProxy(ctx context.Context) error {
	healthz, err := freePort()
	if err != nil {
		return err
	}
	metrics, err := freePort()
	if err != nil {
		return err
	}
	kp := filepath.Join(c.bin, "kube-proxy")
	// kube-proxy adds a KUBE-FIREWALL chain to the filter table that its
	// --cleanup keeps; it goes too unless the host had it before.
	hadFirewall := exec.Command("iptables", "-S", "KUBE-FIREWALL").Run() == nil
	c.onStop(func() error {
		out, err := exec.Command(kp, "--cleanup").CombinedOutput()
		if err != nil {
			return fmt.Errorf("kube-proxy --cleanup: %v: %s", err, out)
		}
		if !hadFirewall {
			removeFirewallChain()
		}
		return nil
	})
	args := []string{"--kubeconfig", c.kubeconfig, "--hostname-override", nodeName,
		"--proxy-mode", "iptables", "--conntrack-max-per-core", "0",
		"--iptables-localhost-nodeports=false",
		"--healthz-bind-address", fmt.Sprintf("127.0.0.1:%d", healthz),
		"--metrics-bind-address", fmt.Sprintf("127.0.0.1:%d", metrics)}
	if c.runtime != nil {
		args = append(args, "--cluster-cidr", c.runtime.Subnet())
	}
	if _, err := c.daemon("kube-proxy", kp, args...); err != nil {
		return err
	}
	// kube-proxy answers its health check once it has synced its rules.
	return wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		out, err := exec.Command("iptables", "-t", "nat", "-S", "KUBE-SERVICES").Output()
		return err == nil && strings.Contains(string(out), dnsServiceIP), nil
	})
}

// removeFirewallChain deletes kube-proxy's KUBE-FIREWALL chain and the
// jumps to it; a step that finds nothing to delete is not an error.
func removeFirewallChain() {
	for _, chain := range []string{"INPUT", "OUTPUT"} {
		for exec.Command("iptables", "-D", chain, "-j", "KUBE-FIREWALL").Run() == nil {
		}
	}
	_ = exec.Command("iptables", "-F", "KUBE-FIREWALL").Run()
	_ = exec.Command("iptables", "-X", "KUBE-FIREWALL").Run()
}

// daemon starts a process that runs until the cluster stops, its output
// in logs/<name>.log. The process gets SIGTERM if this one dies first.
func (c *cluster) daemon(name, path string, args ...string) (*exec.Cmd, error) {
	if err := os.MkdirAll(filepath.Join(c.dir, "logs"), 0o755); err != nil {
		return nil, err
	}
	log, err := os.Create(c.logPath(name))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	c.onStop(func() error {
		defer log.Close()
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
			return nil
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			<-done
			return fmt.Errorf("%s did not stop within a minute of SIGTERM; killed", name)
		}
	})
	return cmd, nil
}

func (c *cluster) logPath(name string) string { return filepath.Join(c.dir, "logs", name+".log") }

// defaultRouteIP is the IPv4 address of the interface the default route
// leaves by: the node's address, which pods and the API server reach.
func defaultRouteIP() (string, error) {
	conn, err := net.Dial("udp4", "192.0.2.1:53")
	if err != nil {
		return "", fmt.Errorf("find the node's address: %w", err)
	}
	defer conn.Close()
	return conn.LocalAddr().(*net.UDPAddr).IP.String(), nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitFile waits until path holds a line and returns it.
func waitFile(ctx context.Context, path string, timeout time.Duration) (string, error) {
	var line string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		data, err := os.ReadFile(path)
		line = strings.TrimSpace(string(data))
		return err == nil && line != "", nil
	})
	if err != nil {
		return "", fmt.Errorf("%s not written within %s: %w", path, timeout, err)
	}
	return line, nil
}
