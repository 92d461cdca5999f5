package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodelet/nodelet/internal/app"
	nodeagent "github.com/nodelet/nodelet/pkg/agent"
	"github.com/nodelet/nodelet/pkg/config"
	"github.com/nodelet/nodelet/pkg/providertest"
	"github.com/nodelet/nodelet/test/fault"
)

// The provider kit (pkg/providertest) against nodelet's own three
// providers, each made by the constructor nodelet's binary uses and run
// by an agent in this process (the process provider's sandboxes are this
// binary's subcommands, TestMain), and against a provider with a planted
// bug, which it must fail with a message that names the bug.

// adminConfig is the admin's client configuration of the cluster.
func adminConfig(t *testing.T) *rest.Config {
	t.Helper()
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

// kitProvider is the constructor nodelet's binary makes for cfg.
func kitProvider(t *testing.T, cfg *config.Config) nodeagent.NewProviderFunc {
	t.Helper()
	newProvider, err := app.NewProvider(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return newProvider
}

// hostProviderConfig is the config of a process or cri node of the test's
// own: its root dir, the host's address and a free kubelet port; and the
// kubelet API server options that serve that port, trusting the control
// plane's CA for the API server's kubelet client certificate.
func hostProviderConfig(t *testing.T, provider, node string) (*config.Config, *nodeagent.ServerOptions) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("the %s provider needs root", provider)
	}
	ca := filepath.Join(filepath.Dir(kubeconfig), "pki", "ca.crt")
	if _, err := os.Stat(ca); err != nil {
		t.Skipf("no cluster CA next to the kubeconfig (%v): the API server's kubelet client certificate cannot be verified", err)
	}
	cfg := config.Default()
	cfg.Provider = provider
	cfg.NodeName = node
	cfg.RootDir = t.TempDir()
	cfg.Address = hostIP(t)
	cfg.Port = int32(fault.FreePort(t))
	server := &nodeagent.ServerOptions{
		Port:         cfg.Port,
		Hosts:        []string{node, cfg.Address},
		ClientCAFile: ca,
		CertDir:      filepath.Join(cfg.RootDir, "pki"),
	}
	return cfg, server
}

func TestProviderKitSim(t *testing.T) {
	t.Parallel()
	cfg := config.Default()
	cfg.RootDir = t.TempDir()
	start := time.Now()
	providertest.Run(t, providertest.Config{
		Client:      adminConfig(t),
		NewProvider: kitProvider(t, cfg),
		Options:     []nodeagent.Option{nodeagent.WithRootDir(cfg.RootDir)},
		KeepsPods:   true, // it restores them (PodRestorer)
	})
	t.Logf("the kit ran the sim provider in %s", time.Since(start).Round(time.Second))
}

func TestProviderKitProcess(t *testing.T) {
	t.Parallel()
	node := uniqueName(t)
	cfg, server := hostProviderConfig(t, config.ProviderProcess, node)
	uids := recordPodUIDs(t, node)
	start := time.Now()
	providertest.Run(t, providertest.Config{
		Client:      adminConfig(t),
		NewProvider: kitProvider(t, cfg),
		Options:     []nodeagent.Option{nodeagent.WithRootDir(cfg.RootDir)},
		Server:      server,
		NodeName:    node,
		KeepsPods:   true, // it finds its sandboxes again
	})
	t.Logf("the kit ran the process provider in %s", time.Since(start).Round(time.Second))
	checkNoLeaks(t, cfg.RootDir, uids())
}

// Not parallel: the cri tests share one containerd and check it one at a
// time.
func TestProviderKitCRI(t *testing.T) {
	env := criEnv(t)
	node := uniqueName(t)
	cfg, server := hostProviderConfig(t, config.ProviderCRI, node)
	cfg.ContainerRuntimeEndpoint = env.Endpoint()
	cfg.PodLogsDir = filepath.Join(t.TempDir(), "pods")
	uids := recordPodUIDs(t, node)
	start := time.Now()
	providertest.Run(t, providertest.Config{
		Client:      adminConfig(t),
		NewProvider: kitProvider(t, cfg),
		Options:     []nodeagent.Option{nodeagent.WithRootDir(cfg.RootDir)},
		Server:      server,
		NodeName:    node,
		KeepsPods:   true, // it finds its containers again
	})
	t.Logf("the kit ran the cri provider in %s", time.Since(start).Round(time.Second))
	(&criAgent{agent: &agent{t: t, node: node}, env: env, rootDir: cfg.RootDir, logsDir: cfg.PodLogsDir}).checkNoLeaks(t)
	for _, dir := range leftoverCgroups(uids()) {
		t.Errorf("cgroup left behind: %s", dir)
	}
}

// plain is a provider with no optional interface: the sim provider's
// PodLifecycleHandler and NodeProvider alone.
type plain struct{ nodeagent.Provider }

// A provider with only the two required interfaces passes too: its status
// is polled, and the pods it lost in a restart (all of them) are created
// again or, with restartPolicy Never, failed as lost.
func TestProviderKitPlainProvider(t *testing.T) {
	t.Parallel()
	cfg := config.Default()
	cfg.RootDir = t.TempDir()
	sim := kitProvider(t, cfg)
	providertest.Run(t, providertest.Config{
		Client: adminConfig(t),
		NewProvider: func(env *nodeagent.Env) (nodeagent.Provider, error) {
			p, err := sim(env)
			if err != nil {
				return nil, err
			}
			return plain{p}, nil
		},
		Options: []nodeagent.Option{nodeagent.WithRootDir(cfg.RootDir),
			nodeagent.WithPodOptions(nodeagent.PodOptions{StatusPollInterval: time.Second})},
	})
}

// neverGone is the sim provider with a planted bug: DeletePod does
// nothing, so a deleted pod is never reported gone. (It hides the sim
// provider's optional interfaces too: its status is polled.)
type neverGone struct{ nodeagent.Provider }

func (neverGone) DeletePod(context.Context, *corev1.Pod) error { return nil }

func TestProviderKitFailsAPlantedBug(t *testing.T) {
	t.Parallel()
	cfg := config.Default()
	cfg.RootDir = t.TempDir()
	sim := kitProvider(t, cfg)
	rec := &providertest.Record{Log: t.Logf}
	providertest.Check(t.Context(), rec, providertest.Config{
		Client: adminConfig(t),
		NewProvider: func(env *nodeagent.Env) (nodeagent.Provider, error) {
			p, err := sim(env)
			if err != nil {
				return nil, err
			}
			return neverGone{p}, nil
		},
		Options: []nodeagent.Option{nodeagent.WithRootDir(cfg.RootDir),
			nodeagent.WithPodOptions(nodeagent.PodOptions{StatusPollInterval: time.Second})},
		Grace:    time.Second,
		Slack:    3 * time.Second,
		FailFast: true,
	})
	for _, r := range rec.Results() {
		t.Logf("part %s (%s): %v", r.Part, r.Took.Round(100*time.Millisecond), r.Err)
	}
	for _, part := range []string{"setup", "node", "create", "update"} {
		if r, ok := rec.Result(part); !ok || r.Err != nil {
			t.Errorf("part %s: ran %t, error %v; want it to hold: the planted bug is in DeletePod", part, ok, r.Err)
		}
	}
	r, ok := rec.Result("delete")
	if !ok || r.Err == nil {
		t.Fatalf("part delete: ran %t, error %v; want it to fail on a provider whose DeletePod does nothing", ok, r.Err)
	}
	for _, want := range []string{"pod grace deleted with grace 1s: still in the API", "the provider's GetPod still returns it"} {
		if !strings.Contains(r.Err.Error(), want) {
			t.Errorf("part delete failed with %q; want a message saying %q", r.Err, want)
		}
	}
	if _, ran := rec.Result("restart"); ran {
		t.Error("part restart ran after delete failed; want FailFast to stop there")
	}
	if r, ok := rec.Result("cleanup"); !ok || r.Err == nil || !strings.Contains(r.Err.Error(), "the provider still runs pods gone from the API") {
		t.Errorf("cleanup: ran %t, error %v; want it to say that the provider still runs the deleted pods", ok, r.Err)
	}
}
