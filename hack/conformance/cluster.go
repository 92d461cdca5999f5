package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/mountinfo"
	"github.com/nodelet/nodelet/test/clusteraddons"
	"github.com/nodelet/nodelet/test/crienv"
)

// nodeName is the name of the cluster's first node; the others are
// nodeName-2, nodeName-3 and so on.
const nodeName = "nodelet-conformance"

// cluster is one provider's fresh local cluster; stop undoes what start
// did, in reverse order.
type cluster struct {
	dir        string
	bin        string
	provider   string
	suite      string
	kubeconfig string
	host       string // the API server's URL
	client     kubernetes.Interface
	hostIP     string
	nodes      []*node
	stops      []func() error
	// cgroups, for the node suite on cri, holds the agent, the runtime
	// and the rest of the run apart; nil otherwise.
	cgroups *hostCgroups
}

// node is one nodelet of the cluster and what it alone uses: its root
// directory, its kubelet API port and, on cri, its own containerd (with
// its own bridge and pod subnet).
type node struct {
	name    string
	rootDir string
	port    int
	runtime *crienv.Env
	agent   *clusteraddons.Daemon
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
// and for the e2e suite CoreDNS and kube-proxy. On error what was started
// is stopped.
func startCluster(ctx context.Context, o options, provider, dir string) (c *cluster, err error) {
	c = &cluster{dir: dir, bin: o.bin, provider: provider, suite: o.suite}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.stop())
		}
	}()
	if provider == "cri" && o.suite == suiteNode {
		if c.cgroups, err = placeInCgroups(); err != nil {
			return c, err
		}
		// Registered first, so run last: once everything in them is gone.
		c.onStop(c.cgroups.remove)
	}
	if err := c.startControlPlane(ctx); err != nil {
		return c, err
	}
	// The nodes' address is the one the API server advertises to pods.
	if c.hostIP, err = clusteraddons.APIServerAddress(ctx, c.client); err != nil {
		return c, err
	}
	var registry string
	if provider == "cri" {
		if registry, err = c.startRegistry(ctx, o.images); err != nil {
			return c, err
		}
	}
	for i := range o.nodes {
		n := &node{name: nodeName, rootDir: filepath.Join(dir, "nodelet"), port: o.kubeletPort + i}
		if i > 0 {
			n.name = fmt.Sprintf("%s-%d", nodeName, i+1)
			n.rootDir = filepath.Join(dir, n.name)
		}
		var nodeArgs []string
		if o.suite == suiteNode {
			if nodeArgs, err = c.prepareNodeSuite(n); err != nil {
				return c, err
			}
		}
		if provider == "cri" {
			if n.runtime, err = c.startRuntime(ctx, registry); err != nil {
				return c, err
			}
			nodeArgs = append(nodeArgs, "--container-runtime-endpoint", n.runtime.Endpoint())
			if o.suite != suiteNode {
				nodeArgs = append(nodeArgs, "--pod-logs-dir", filepath.Join(dir, "logs", "pods", n.name))
			}
		}
		nodeArgs = append(nodeArgs, "--port", strconv.Itoa(n.port))
		if err := c.startNode(ctx, n, nodeArgs); err != nil {
			return c, err
		}
		c.nodes = append(c.nodes, n)
	}
	// The node suite needs no cluster DNS or Service proxy, as upstream's
	// node e2e runs without them: its pods resolve with the node's
	// resolver (dnsPolicy Default) and it tests no Service.
	if o.suite == suiteNode {
		return c, nil
	}
	if err := c.startAddons(ctx); err != nil {
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
	c.host = cfg.Host
	c.client, err = kubernetes.NewForConfig(cfg)
	return err
}

// startRegistry runs the registry of make images on loopback and returns
// its address.
func (c *cluster) startRegistry(ctx context.Context, images string) (string, error) {
	ready := filepath.Join(c.dir, "registry-addr")
	if _, err := c.daemon("registry", filepath.Join(c.bin, "images"), "serve", "--dir", images,
		"--listen", "127.0.0.1:0", "--ready-file", ready); err != nil {
		return "", err
	}
	addr, err := waitFile(ctx, ready, time.Minute)
	if err != nil {
		return "", fmt.Errorf("registry: %w (log %s)", err, c.logPath("registry"))
	}
	return addr, nil
}

// startRuntime runs a private containerd that mirrors registry.k8s.io and
// docker.io to the registry.
func (c *cluster) startRuntime(ctx context.Context, registry string) (*crienv.Env, error) {
	var env *crienv.Env
	err := c.startIn(runtimeCgroup, func() (err error) {
		env, err = crienv.Start(ctx, crienv.Options{BinDir: c.bin, Mirror: "http://" + registry})
		return err
	})
	if err != nil {
		return nil, err
	}
	c.onStop(env.Stop)
	return env, nil
}

func (c *cluster) startNode(ctx context.Context, n *node, extra []string) error {
	ca := filepath.Join(filepath.Dir(c.kubeconfig), "pki", "ca.crt")
	// The node joins as a kubelet does: with the control plane's bootstrap
	// token, then as system:node:<name> under NodeRestriction.
	bootstrap := filepath.Join(filepath.Dir(c.kubeconfig), "bootstrap.kubeconfig")
	args := append([]string{"--bootstrap-kubeconfig", bootstrap, "--kubeconfig", filepath.Join(n.rootDir, "kubeconfig"),
		"--node-name", n.name, "--provider", c.provider,
		"--root-dir", n.rootDir, "--client-ca-file", ca, "--address", c.hostIP,
		"--cluster-dns", clusteraddons.DNSServiceIP, "--cluster-domain", clusteraddons.DNSDomain,
		// Memory is the only eviction signal: the node's disk is the
		// host's, shared with the builds and everything else the machine
		// runs, and a kubelet's 10-15% free default would make the run's
		// outcome the machine's fill level.
		"--eviction-hard=memory.available<100Mi"}, extra...)
	// Once the agent has stopped: the binding of its root directory onto
	// itself, which it leaves when it stops with volumes mounted.
	c.onStop(func() error { return crienv.UnmountRootDir(n.rootDir) })
	var d *clusteraddons.Daemon
	err := c.startIn(agentCgroup, func() (err error) {
		d, err = c.daemon(n.name, filepath.Join(c.bin, "nodelet"), args...)
		return err
	})
	if err != nil {
		return err
	}
	n.agent = d
	c.onStop(func() error { return c.deleteNode(n) })
	c.onStop(func() error { return c.drain(n) })
	err = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := c.client.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, cond := range got.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == corev1.ConditionTrue, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("node %s not Ready: %w (log %s)", n.name, err, c.logPath(n.name))
	}
	return nil
}

// drain deletes every pod still on the node (an interrupted suite leaves
// some) and waits until the agent has torn them down, before the agent
// stops: a stopped agent leaves its pods running by design. Static pods
// whose manifests a failed spec left go with their manifests (the leak
// check has listed them already).
func (c *cluster) drain(n *node) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if c.suite == suiteNode {
		manifests, _ := filepath.Glob(filepath.Join(c.manifestsDir(), "*"))
		for _, m := range manifests {
			if err := os.Remove(m); err != nil {
				return fmt.Errorf("drain node %s: %w", n.name, err)
			}
		}
	}
	opts := metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.name}
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
		mounts, err := mountinfo.Under(n.rootDir)
		if len(pods.Items) > 0 || err != nil || len(mounts) > 0 {
			return false, nil
		}
		if n.runtime == nil {
			return true, nil
		}
		// Static pods have no API pod once their namespace is gone: the
		// runtime says when they are down too.
		sandboxes, _, err := runtimeObjects(ctx, n.runtime)
		return err == nil && len(sandboxes) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("drain node %s: %w", n.name, err)
	}
	return nil
}

// deleteNode removes the Node object once its agent has stopped, so a
// later run starts from none.
func (c *cluster) deleteNode(n *node) error {
	err := c.client.CoreV1().Nodes().Delete(context.Background(), n.name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// startAddons runs CoreDNS and one kube-proxy for the nodes, which share
// the host and so its iptables; they stop, and kube-proxy's rules go, when
// the cluster stops.
func (c *cluster) startAddons(ctx context.Context) error {
	opts := clusteraddons.Options{BinDir: c.bin, Dir: filepath.Join(c.dir, "addons"), Kubeconfig: c.kubeconfig,
		NodeName: c.nodes[0].name, HostIP: c.hostIP}
	if c.nodes[0].runtime != nil {
		opts.ClusterCIDR = crienv.Subnets
	}
	a, err := clusteraddons.Start(ctx, opts)
	if err != nil {
		return err
	}
	c.onStop(a.Stop)
	return nil
}

// daemon starts a process that runs until the cluster stops, its output
// in logs/<name>.log.
func (c *cluster) daemon(name, path string, args ...string) (*clusteraddons.Daemon, error) {
	dir := filepath.Join(c.dir, "logs")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	d, err := clusteraddons.StartDaemon(dir, name, path, args...)
	if err != nil {
		return nil, err
	}
	c.onStop(d.Stop)
	return d, nil
}

// startIn runs start in the named cgroup of the run's, where there are
// any.
func (c *cluster) startIn(cgroup string, start func() error) error {
	if c.cgroups == nil {
		return start()
	}
	return c.cgroups.startIn(cgroup, start)
}

func (c *cluster) logPath(name string) string { return filepath.Join(c.dir, "logs", name+".log") }

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
