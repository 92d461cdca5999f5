// Command conformance runs Kubernetes' own conformance tests against
// nodelet nodes of each provider, on a fresh local cluster per provider:
// bin/controlplane up, the registry of make images and a private
// containerd per node (cri), the nodes (two for e2e.test, one for the node
// suite), CoreDNS and kube-proxy as host processes, then the suite through
// ginkgo in parallel. The suite is e2e.test of k8s.io/kubernetes v1.36.3 (--suite
// e2e, make conformance) or its node conformance test, e2e_node.test in
// --conformance mode (--suite node, make node-conformance); package
// test/conformance selects their specs. It writes a JUnit report and a
// summary per provider under --out, checks that the suite left nothing
// behind, and prints passed/failed/skipped per provider.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "conformance:", err)
		os.Exit(1)
	}
}

// The suites --suite runs.
const (
	suiteE2E  = "e2e"
	suiteNode = "node"
)

type options struct {
	suite     string
	providers []string
	out       string
	bin       string
	images    string
	procs     int
	procsProc int
	focus     string
	skip      string
	// nodes is how many nodelet nodes the cluster has.
	nodes int
	// kubeletPort is the first node's kubelet API port; the others take
	// the ports after it.
	kubeletPort int
	timeout     time.Duration
}

func run() error {
	var o options
	flag.StringVar(&o.suite, "suite", suiteE2E, "the suite: e2e (e2e.test: every [Conformance] spec and every [NodeConformance] one) or node (the node conformance test: e2e_node.test --conformance, every [NodeConformance] spec of the node suite)")
	providers := flag.String("providers", "cri", "comma-separated providers (cri, process) to run the suite against, each on its own fresh cluster; the certification run is cri's: the process provider runs no images")
	flag.StringVar(&o.out, "out", ".local/conformance", "directory for reports, logs and the clusters' state")
	flag.StringVar(&o.bin, "bin", "bin", "directory of controlplane, nodelet, e2e.test, ginkgo, kube-proxy, coredns, images, containerd")
	flag.StringVar(&o.images, "images", ".local/images", "the images directory of make images")
	flag.IntVar(&o.procs, "procs", 10, "ginkgo processes running specs in parallel (the specs mostly wait)")
	flag.IntVar(&o.procsProc, "process-procs", 30, "ginkgo processes for the process provider, whose specs of images mostly wait out the 5-minute pod start timeout")
	flag.StringVar(&o.focus, "focus", "", "extra --ginkgo.focus regexp, ANDed with the conformance selection (empty: all of it)")
	flag.StringVar(&o.skip, "skip", "", "extra --ginkgo.skip regexp, ORed with the listed skips")
	flag.DurationVar(&o.timeout, "timeout", 4*time.Hour, "ginkgo's timeout for one provider's run")
	flag.IntVar(&o.nodes, "nodes", 0, "nodelet nodes in the cluster, each with its own containerd on cri (0: the suite's: 2 for e2e, as certification needs two schedulable nodes; 1 for node, which tests one)")
	flag.IntVar(&o.kubeletPort, "kubelet-port", 10250, "the first node's kubelet API port, the others' the ports after it (the kubelet's 10250; another lets a run share the host with a node that has it, as the node suite's selection never reaches the port but through the API server)")
	summarize := flag.Bool("summarize", false, "only write the summary from the reports under --out, and print it")
	flag.Parse()
	if *summarize {
		if err := writeSummary(o.out); err != nil {
			return err
		}
		data, err := os.ReadFile(filepath.Join(o.out, "summary.md"))
		fmt.Print(string(data))
		return err
	}
	if o.suite != suiteE2E && o.suite != suiteNode {
		return fmt.Errorf("--suite: unknown suite %q (want %s or %s)", o.suite, suiteE2E, suiteNode)
	}
	switch {
	case o.nodes < 0:
		return fmt.Errorf("--nodes: %d, want 0 (the suite's) or more", o.nodes)
	case o.nodes == 0 && o.suite == suiteE2E:
		o.nodes = 2
	case o.nodes == 0:
		o.nodes = 1
	case o.nodes > 1 && o.suite == suiteNode:
		return fmt.Errorf("--nodes: %d, but the node suite tests one node", o.nodes)
	}
	o.providers = strings.Split(*providers, ",")
	for _, p := range o.providers {
		if p != "cri" && p != "process" {
			return fmt.Errorf("--providers: unknown provider %q (want cri or process)", p)
		}
	}
	var err error
	if o.out, err = filepath.Abs(o.out); err != nil {
		return err
	}
	if o.bin, err = filepath.Abs(o.bin); err != nil {
		return err
	}
	if o.images, err = filepath.Abs(o.images); err != nil {
		return err
	}
	suiteBin, target := "e2e.test", "conformance"
	if o.suite == suiteNode {
		suiteBin, target = "e2e_node.test", "node-conformance"
	}
	for _, b := range []string{"controlplane", "nodelet", suiteBin, "ginkgo", "kube-proxy", "coredns"} {
		if _, err := os.Stat(filepath.Join(o.bin, b)); err != nil {
			return fmt.Errorf("%s missing: run make %s, which builds it", filepath.Join(o.bin, b), target)
		}
	}
	if os.Geteuid() != 0 {
		return errors.New("needs root: the nodes run pods, kube-proxy writes iptables rules")
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var reports []report
	var failed []string
	for _, p := range o.providers {
		r, err := runProvider(ctx, o, p)
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", p, err))
		}
		if r != nil {
			reports = append(reports, *r)
		}
		if ctx.Err() != nil {
			break
		}
	}
	if err := writeSummary(o.out); err != nil {
		failed = append(failed, err.Error())
	}
	for _, r := range reports {
		fmt.Println(r.line())
	}
	failed = append(failed, verdicts(reports)...)
	if len(failed) > 0 {
		return errors.New(strings.Join(failed, "; "))
	}
	return nil
}

// verdicts says what makes each provider's run fail: a spec that failed,
// none that ran (a focus that selects nothing is a mistake, not a pass),
// something left behind.
func verdicts(reports []report) []string {
	var failed []string
	for _, r := range reports {
		if r.Summary.Failed > 0 {
			failed = append(failed, fmt.Sprintf("%s: %d specs failed", r.Provider, r.Summary.Failed))
		}
		if r.Summary.Passed+r.Summary.Failed == 0 {
			failed = append(failed, fmt.Sprintf("%s: no spec ran", r.Provider))
		}
		if len(r.Leaks) > 0 {
			failed = append(failed, fmt.Sprintf("%s: %d things left behind", r.Provider, len(r.Leaks)))
		}
	}
	return failed
}
