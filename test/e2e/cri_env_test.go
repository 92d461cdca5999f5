package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/test/crienv"
	"github.com/nodelet/nodelet/test/fault"
)

// The cri tests share one private containerd and one image registry per
// test binary, started by the first test that needs them and stopped when
// the binary ends; each test runs a node of its own, and the node's label
// on every sandbox and container keeps the nodes' pods apart in the
// runtime.

var (
	criOnce sync.Once
	criRT   *crienv.Env
	criReg  *crienv.Registry
	criErr  error
)

// criEnv is the shared containerd, started on first use; the test is
// skipped where it cannot run (not root, binaries or images missing).
func criEnv(t *testing.T) *crienv.Env {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the cri provider's tests run containerd: they need root")
	}
	criOnce.Do(func() {
		criReg, criErr = crienv.StartRegistry(filepath.Join(root, "bin", "images"), filepath.Join(root, ".local", "images"))
		if criErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		criRT, criErr = crienv.Start(ctx, crienv.Options{Mirror: "http://" + criReg.Addr})
	})
	if errors.Is(criErr, crienv.ErrUnavailable) {
		t.Skipf("cri environment unavailable: %v", criErr)
	}
	if criErr != nil {
		t.Fatalf("cri environment: %v", criErr)
	}
	return criRT
}

// stopCRI stops the shared containerd and registry, if they were started.
func stopCRI() {
	if criRT != nil {
		if err := criRT.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stop containerd: %v\n", err)
		}
	}
	if criReg != nil {
		criReg.Stop()
	}
}

// criAgent is a cri-provider node and its agent.
type criAgent struct {
	*agent
	env     *crienv.Env
	rootDir string
	logsDir string
}

// startCRINodelet runs a cri-provider node on the shared containerd with
// its own root and log directories and kubelet port. When the test ends it
// checks that nothing of its pods is left in the runtime or on disk.
func startCRINodelet(t *testing.T, node string, extra ...string) *criAgent {
	t.Helper()
	env := criEnv(t)
	ca := filepath.Join(filepath.Dir(kubeconfig), "pki", "ca.crt")
	if _, err := os.Stat(ca); err != nil {
		t.Skipf("no cluster CA next to the kubeconfig (%v)", err)
	}
	rootDir, logsDir := t.TempDir(), t.TempDir()
	c := &criAgent{env: env, rootDir: rootDir, logsDir: filepath.Join(logsDir, "pods")}
	uids := recordPodUIDs(t, node)
	t.Cleanup(func() {
		c.checkNoLeaks(t)
		for _, dir := range leftoverCgroups(uids()) {
			t.Errorf("cgroup left behind: %s", dir)
		}
		if err := crienv.UnmountRootDir(rootDir); err != nil {
			t.Error(err)
		}
	})
	args := append([]string{"--provider", "cri", "--container-runtime-endpoint", env.Endpoint(),
		"--root-dir", rootDir, "--pod-logs-dir", c.logsDir,
		"--port", strconv.Itoa(fault.FreePort(t)), "--client-ca-file", ca, "--address", hostIP(t), fault.MemoryEvictionOnly}, nodeIdentity(t, node, kubeconfig, rootDir)...)
	args = append(args, extra...)
	c.agent = startNodelet(t, node, args...)
	waitReady(t, node, time.Minute)
	return c
}

// runtimePods are the node's sandboxes and containers in the runtime.
func (c *criAgent) runtimePods(t *testing.T) ([]*runtimeapi.PodSandbox, []*runtimeapi.Container) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sel := map[string]string{"nodelet.io/node": c.node}
	sbs, err := c.env.RuntimeClient().ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{LabelSelector: sel}})
	if err != nil {
		t.Fatalf("list sandboxes: %v", err)
	}
	cs, err := c.env.RuntimeClient().ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{LabelSelector: sel}})
	if err != nil {
		t.Fatalf("list containers: %v", err)
	}
	return sbs.Items, cs.Containers
}

// checkNoLeaks fails the test if a sandbox, container, pod directory, log
// directory or log link of the node is left once its pods are gone.
func (c *criAgent) checkNoLeaks(t *testing.T) {
	t.Helper()
	sbs, cs := c.runtimePods(t)
	for _, s := range sbs {
		t.Errorf("sandbox left behind: %s %s/%s", s.Id, s.GetMetadata().GetNamespace(), s.GetMetadata().GetName())
	}
	for _, ct := range cs {
		t.Errorf("container left behind: %s %s", ct.Id, ct.GetMetadata().GetName())
	}
	for _, dir := range []string{filepath.Join(c.rootDir, "pods"), c.logsDir, filepath.Join(filepath.Dir(c.logsDir), "containers")} {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			t.Errorf("left behind: %s", filepath.Join(dir, e.Name()))
		}
	}
	// The cri tests run one at a time on the shared containerd: once a
	// test's pods are gone, no pod's network namespace (a mount under
	// containerd's state directory) nor veth on the bridge is left.
	if data, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			// The root directory's binding onto itself, which makes it a
			// shared mount, may stay (UnmountRootDir).
			switch {
			case strings.Contains(line, c.rootDir+"/"):
				t.Errorf("mount left behind: %s", line)
			case strings.Contains(line, c.env.Dir()) && strings.Contains(line, "/netns/"):
				t.Errorf("network namespace left behind: %s", line)
			}
		}
	}
	out, err := exec.Command("ip", "-o", "link", "show", "master", c.env.Bridge()).Output()
	if err != nil {
		t.Errorf("list the bridge's ports: %v", err)
	} else if veths := strings.TrimSpace(string(out)); veths != "" {
		t.Errorf("veths left on %s:\n%s", c.env.Bridge(), veths)
	}
}
