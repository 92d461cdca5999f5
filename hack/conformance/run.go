package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/pkg/mountinfo"
	"github.com/nodelet/nodelet/test/conformance"
	"github.com/nodelet/nodelet/test/crienv"
)

// report is one provider's run, kept as report.json beside its JUnit
// report so that the summary covers every provider's last run.
type report struct {
	// Suite is the suite that ran: e2e, or node (e2e_node.test).
	Suite    string
	Provider string
	Machine  string
	// Commit is nodelet's commit the run was built from, "+dirty" when
	// the tree had changes.
	Commit  string
	Date    time.Time
	Summary conformance.Summary
	Starts  latency
	// Agents are the node agents' peak RSS and CPU over the suite.
	Agents []usage
	Leaks  []string
}

func (r report) line() string {
	s := fmt.Sprintf("%s: %s; pod start p50 %s p99 %s over %d pods", r.Provider, r.Summary,
		r.Starts.P50.Round(100*time.Millisecond), r.Starts.P99.Round(100*time.Millisecond), r.Starts.N)
	for _, u := range r.Agents {
		s += "; " + u.String()
	}
	if len(r.Leaks) > 0 {
		s += fmt.Sprintf("; LEFT BEHIND: %s", strings.Join(r.Leaks, ", "))
	}
	return s
}

// runProvider runs the suite against a fresh cluster with nodes of the
// provider.
func runProvider(ctx context.Context, o options, provider string) (*report, error) {
	dir := filepath.Join(o.out, provider)
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	fmt.Printf("conformance: %s: starting a cluster in %s\n", provider, dir)
	c, err := startCluster(ctx, o, provider, dir)
	if err != nil {
		return nil, err
	}
	r := &report{Suite: o.suite, Provider: provider, Machine: machine(), Commit: commit(ctx), Date: time.Now().UTC()}
	junit := filepath.Join(dir, "junit_01.xml")
	var wall time.Duration
	runErr := func() error {
		starts := watchPodStarts(ctx, c)
		defer func() { r.Starts = starts() }()
		agents := measureAgents(c.nodes)
		defer func() { r.Agents = agents() }()
		kubectl := filepath.Join(dir, "kubectl")
		script := fmt.Sprintf("#!/bin/sh\nexec %q kubectl \"$@\"\n", filepath.Join(o.bin, "controlplane"))
		if err := os.WriteFile(kubectl, []byte(script), 0o755); err != nil {
			return err
		}
		s, err := c.suiteFor(ctx, o, kubectl)
		if err != nil {
			return err
		}
		skip := s.skip
		if o.skip != "" {
			skip += "|" + o.skip
		}
		focus := andFocus(s.focus, o.focus)
		procs := o.procs
		if provider == "process" {
			procs = o.procsProc
		}
		args := []string{"--procs", fmt.Sprint(procs), "--timeout", o.timeout.String(), "--no-color",
			"--focus", focus, "--skip", skip, s.binary, "--"}
		args = append(args, s.args...)
		log, err := os.Create(filepath.Join(dir, "e2e.log"))
		if err != nil {
			return err
		}
		defer log.Close()
		cmd := exec.CommandContext(ctx, filepath.Join(o.bin, "ginkgo"), args...)
		cmd.Stdout, cmd.Stderr = log, log
		// Away from any go.mod, whose ginkgo version the CLI would compare
		// with its own.
		cmd.Dir = "/"
		// Interrupted, ginkgo stops the specs and still writes the report.
		cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
		cmd.WaitDelay = 2 * time.Minute
		fmt.Printf("conformance: %s: running the suite (%d procs), log %s\n", provider, procs, log.Name())
		start := time.Now()
		err = cmd.Run()
		wall = time.Since(start)
		// ginkgo exits non-zero when a spec failed; the report says which.
		if _, statErr := os.Stat(junit); statErr != nil {
			return fmt.Errorf("ginkgo wrote no report (%v); see %s", err, log.Name())
		}
		return nil
	}()
	if runErr == nil {
		r.Summary, runErr = conformance.ReadJUnit(junit)
		r.Summary.Duration = wall
	}
	// Interrupted, the run still looks for what it left behind.
	r.Leaks = c.leftBehind(context.WithoutCancel(ctx))
	if err := c.stop(); err != nil {
		runErr = errors.Join(runErr, err)
	}
	if runErr == nil {
		runErr = r.save(filepath.Join(dir, "report.json"))
	}
	return r, runErr
}

// leftBehind lists what the suite left in the cluster, the runtime and on
// the node: namespaces of the suite, pods, sandboxes, containers, mounts
// under the node's root directory. Namespaces are deleted by the suite at
// the end of each spec and may take a while to go.
func (c *cluster) leftBehind(ctx context.Context) []string {
	var left []string
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		left = c.listLeft(ctx)
		return len(left) == 0, nil
	})
	if err != nil {
		// The last look may have run out of the poll's time: look once
		// more with time to answer, so that the report names what is
		// left, not the deadline.
		lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		left = c.listLeft(lctx)
	}
	return left
}

// listLeft lists once what leftBehind looks for. What it cannot list is
// itself left: a check that could not look never passes.
func (c *cluster) listLeft(ctx context.Context) []string {
	var left []string
	nss, err := c.client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		left = append(left, fmt.Sprintf("namespaces unknown (list: %v)", err))
	} else {
		for _, ns := range nss.Items {
			switch ns.Name {
			case "default", "kube-system", "kube-public", "kube-node-lease":
				continue
			}
			left = append(left, "namespace "+ns.Name)
		}
	}
	pods, err := c.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		left = append(left, fmt.Sprintf("pods unknown (list: %v)", err))
	} else {
		for _, p := range pods.Items {
			left = append(left, "pod "+p.Namespace+"/"+p.Name)
		}
	}
	for _, n := range c.nodes {
		if n.runtime != nil {
			sandboxes, containers, err := runtimeObjects(ctx, n.runtime)
			if err != nil {
				left = append(left, fmt.Sprintf("%s: sandboxes and containers unknown (list: %v)", n.name, err))
			}
			left = append(left, sandboxes...)
			left = append(left, containers...)
		}
		mounts, err := mountinfo.Under(n.rootDir)
		if err != nil {
			left = append(left, fmt.Sprintf("%s: mounts unknown (read: %v)", n.name, err))
		}
		for _, m := range mounts {
			left = append(left, "mount "+m)
		}
	}
	if c.suite == suiteNode {
		left = append(left, c.nodeSuiteLeft()...)
	}
	return left
}

func runtimeObjects(ctx context.Context, env *crienv.Env) (sandboxes, containers []string, err error) {
	rt := env.RuntimeClient()
	sb, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return nil, nil, err
	}
	for _, s := range sb.Items {
		sandboxes = append(sandboxes, "sandbox "+s.Metadata.Namespace+"/"+s.Metadata.Name)
	}
	cs, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		return nil, nil, err
	}
	for _, ct := range cs.Containers {
		containers = append(containers, "container "+ct.Metadata.Name+" "+ct.Id)
	}
	return sandboxes, containers, nil
}

// latency is the distribution of pod start latencies: from a pod's
// creation to the first time it was seen Running.
type latency struct {
	N        int
	P50, P99 time.Duration
}

// watchPodStarts watches every pod until the returned function is called,
// which gives the distribution of creation → Running. Every pod of the
// cluster runs on its nodes (CoreDNS is a host process).
func watchPodStarts(ctx context.Context, c *cluster) func() latency {
	ctx, cancel := context.WithCancel(ctx)
	var mu sync.Mutex
	seen := map[string]time.Duration{}
	factory := informers.NewSharedInformerFactory(c.client, 0)
	record := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok || p.Status.Phase != corev1.PodRunning {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if _, ok := seen[string(p.UID)]; !ok {
			seen[string(p.UID)] = time.Since(p.CreationTimestamp.Time)
		}
	}
	_, _ = factory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    record,
		UpdateFunc: func(_, obj any) { record(obj) },
	})
	factory.Start(ctx.Done())
	return func() latency {
		cancel()
		factory.Shutdown()
		mu.Lock()
		defer mu.Unlock()
		var all []time.Duration
		for _, d := range seen {
			all = append(all, d)
		}
		return percentiles(all)
	}
}

func percentiles(all []time.Duration) latency {
	if len(all) == 0 {
		return latency{}
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	at := func(q float64) time.Duration { return all[int(q*float64(len(all)-1)+0.5)] }
	return latency{N: len(all), P50: at(0.5), P99: at(0.99)}
}

// andFocus is the ginkgo --focus of the specs that both selection and
// extra ("": none) match, in either order within a spec's name. The two
// may not overlap: an extra focus that names a spec with the selection's
// own marker ([NodeConformance]) selects nothing.
func andFocus(selection, extra string) string {
	if extra == "" {
		return selection
	}
	return "(?:" + selection + ").*(?:" + extra + ")|(?:" + extra + ").*(?:" + selection + ")"
}
