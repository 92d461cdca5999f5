package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/mountinfo"
	"github.com/nodelet/nodelet/test/clusteraddons"
	"github.com/nodelet/nodelet/test/conformance"
	"github.com/nodelet/nodelet/test/crienv"
)

// suiteRun is how the suite runs against the cluster: its test binary,
// its selection and its flags.
type suiteRun struct {
	binary      string
	focus, skip string
	args        []string
}

// suiteFor is the run of the suite o names against c.
func (c *cluster) suiteFor(ctx context.Context, o options, kubectl string) (suiteRun, error) {
	if o.suite == suiteNode {
		return c.nodeSuite(ctx, o, kubectl)
	}
	e2eOpts := conformance.Options{
		Kubeconfig:     c.kubeconfig,
		ReportDir:      c.dir,
		KubectlPath:    kubectl,
		KubeletRootDir: c.nodes[0].rootDir,
		DNSDomain:      clusteraddons.DNSDomain,
	}
	if c.nodes[0].runtime != nil {
		e2eOpts.RuntimeEndpoint = c.nodes[0].runtime.Endpoint()
	}
	return suiteRun{binary: filepath.Join(o.bin, "e2e.test"), focus: conformance.Focus,
		skip: conformance.SkipRegexp(), args: conformance.E2EArgs(e2eOpts)}, nil
}

// nodeSuite is the node conformance test: e2e_node.test in --conformance
// mode, which reaches the API server with a bearer token alone.
func (c *cluster) nodeSuite(ctx context.Context, o options, kubectl string) (suiteRun, error) {
	token, err := c.suiteToken(ctx, o.timeout+time.Hour)
	if err != nil {
		return suiteRun{}, err
	}
	// ginkgo runs a compiled suite in the binary's directory, where
	// e2e_node.test keeps the files of the kubelet it would configure
	// (kubelet.conf.d): run through a link, it keeps them in the run's
	// directory.
	runDir := filepath.Join(c.dir, "run")
	if err := os.MkdirAll(runDir, 0o755); err != nil {
		return suiteRun{}, err
	}
	link := filepath.Join(runDir, "e2e_node.test")
	if err := os.Symlink(filepath.Join(o.bin, "e2e_node.test"), link); err != nil {
		return suiteRun{}, err
	}
	nodeOpts := conformance.NodeOptions{
		Host:        c.host,
		BearerToken: token,
		NodeName:    c.nodes[0].name,
		ReportDir:   c.dir,
		KubectlPath: kubectl,
		DNSDomain:   clusteraddons.DNSDomain,
	}
	if c.nodes[0].runtime != nil {
		nodeOpts.RuntimeEndpoint = c.nodes[0].runtime.Endpoint()
	}
	return suiteRun{binary: link, focus: conformance.NodeFocus, skip: conformance.NodeSkipRegexp(),
		args: conformance.NodeE2EArgs(nodeOpts)}, nil
}

// suiteAccount is the service account whose token the node suite uses.
const suiteAccount = "nodelet-node-e2e"

// suiteToken makes a service account bound to cluster-admin and returns a
// token of it valid for ttl: the node suite authenticates with a bearer
// token alone, to the API server and, through its node proxy, to the
// node's /configz.
func (c *cluster) suiteToken(ctx context.Context, ttl time.Duration) (string, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: suiteAccount}}
	if _, err := c.client.CoreV1().ServiceAccounts(sa.Namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("service account of the suite: %w", err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: suiteAccount},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: sa.Namespace, Name: sa.Name}},
	}
	if _, err := c.client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("cluster role binding of the suite: %w", err)
	}
	c.onStop(func() error {
		ctx := context.Background()
		return errors.Join(
			ignoreNotFound(c.client.RbacV1().ClusterRoleBindings().Delete(ctx, binding.Name, metav1.DeleteOptions{})),
			ignoreNotFound(c.client.CoreV1().ServiceAccounts(sa.Namespace).Delete(ctx, sa.Name, metav1.DeleteOptions{})))
	})
	tr, err := c.client.CoreV1().ServiceAccounts(sa.Namespace).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(ttl.Seconds()))},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token of the suite: %w", err)
	}
	return tr.Status.Token, nil
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// The paths the node suite reads as the kubelet's, whatever the node's
// configuration: its root directory (the pods' volumes under
// /var/lib/kubelet/pods, the sockets of device plugins and pod
// resources), its container logs (ContainerLogPath reads
// /var/log/containers and /var/log/pods) and the host's root at /rootfs
// (in --conformance mode, the system validation chroots there, as in
// upstream's node test image, which mounts the host's / there).
const (
	kubeletRootDir   = "/var/lib/kubelet"
	podLogsDir       = "/var/log/pods"
	containerLogsDir = "/var/log/containers"
	rootfs           = "/rootfs"
)

// prepareNodeSuite readies the host for the node suite and returns the
// flags of the node that the suite expects, as it configures a kubelet of
// its own (test/e2e_node/services/kubelet.go): the kubelet's root
// directory, static pods from a directory read every 10 seconds, the
// read-only port 10255, container logs under /var/log/pods. The
// directories must be empty, and go when the cluster stops (the root
// directory only once nothing is mounted below it).
func (c *cluster) prepareNodeSuite(n *node) ([]string, error) {
	for _, d := range []string{kubeletRootDir, podLogsDir, containerLogsDir} {
		entries, err := os.ReadDir(d)
		if err == nil && len(entries) > 0 {
			return nil, fmt.Errorf("%s is not empty: another node agent's, or one a run left; the node suite needs it to itself", d)
		}
		c.onStop(func() error {
			if mounts, err := mountinfo.Under(d); err != nil || len(mounts) > 0 {
				return fmt.Errorf("%s left in place: mounts below it %v (%v)", d, mounts, err)
			}
			// The root directory's binding onto itself, which the agent
			// leaves when it stops with volumes mounted.
			if err := crienv.UnmountRootDir(d); err != nil {
				return err
			}
			return os.RemoveAll(d)
		})
	}
	n.rootDir = kubeletRootDir
	if _, err := os.Lstat(rootfs); errors.Is(err, os.ErrNotExist) {
		if err := os.Symlink("/", rootfs); err != nil {
			return nil, fmt.Errorf("the host's root at %s: %w", rootfs, err)
		}
		c.onStop(func() error {
			if target, err := os.Readlink(rootfs); err == nil && target == "/" {
				return os.Remove(rootfs)
			}
			return nil
		})
	} else if err != nil {
		return nil, err
	}
	manifests := c.manifestsDir()
	if err := os.MkdirAll(manifests, 0o755); err != nil {
		return nil, err
	}
	cfg := filepath.Join(c.dir, "nodelet.yaml")
	lines := []string{
		"apiVersion: nodelet.io/v1alpha1",
		"kind: NodeletConfiguration",
		"staticPodPath: " + manifests,
		"fileCheckFrequency: 10s",
		"readOnlyPort: 10255",
		"podLogsDir: " + podLogsDir,
	}
	if c.cgroups != nil {
		// The node's system containers, as upstream's harness names the
		// kubelet's: where the runner put the runtime and itself.
		lines = append(lines, "runtimeCgroups: "+c.cgroups.path(runtimeCgroup), "systemCgroups: "+c.cgroups.path(systemCgroup))
	}
	data := strings.Join(lines, "\n") + "\n"
	if err := os.WriteFile(cfg, []byte(data), 0o644); err != nil {
		return nil, err
	}
	return []string{"--config", cfg}, nil
}

// manifestsDir is the node suite's static pod directory.
func (c *cluster) manifestsDir() string { return filepath.Join(c.dir, "manifests") }

// nodeSuiteLeft lists what the node suite left on the host: container
// logs and static pod manifests.
func (c *cluster) nodeSuiteLeft() []string {
	var left []string
	for _, d := range []string{podLogsDir, containerLogsDir, c.manifestsDir()} {
		entries, err := os.ReadDir(d)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			left = append(left, fmt.Sprintf("%s unknown (read: %v)", d, err))
		}
		for _, e := range entries {
			left = append(left, "file "+filepath.Join(d, e.Name()))
		}
	}
	return left
}
