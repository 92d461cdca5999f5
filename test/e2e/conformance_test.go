package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/test/clusteraddons"
	"github.com/nodelet/nodelet/test/conformance"
	"github.com/nodelet/nodelet/test/fault"
)

// TestConformanceSmoke runs the smoke set of Kubernetes' node conformance
// tests (e2e.test of k8s.io/kubernetes; make conformance runs them all)
// against a cri node: pods, configmap, secret and downward API volumes,
// probes, init containers, logs and exec, a Deployment's rollout and
// kubectl logs, OIDC discovery through the kubernetes Service and DNS for
// Services (conformance.Smoke says which), with the cluster's DNS, CoreDNS
// and kube-proxy as make run has them. It is not parallel, so while it
// runs its node is the only one the suite's pods can land on.
func TestConformanceSmoke(t *testing.T) {
	e2eTest := filepath.Join(root, "bin", "e2e.test")
	if _, err := os.Stat(e2eTest); err != nil {
		t.Fatalf("%s missing: make bin/e2e.test builds it", e2eTest)
	}
	const node = "conformance-smoke"
	c := startCRINodelet(t, node, "--cluster-dns", clusteraddons.DNSServiceIP, "--cluster-domain", clusteraddons.DNSDomain)
	startAddons(t, node, c.env.Subnet())
	dir := t.TempDir()
	kubectl := filepath.Join(dir, "kubectl")
	script := fmt.Sprintf("#!/bin/sh\nexec %q kubectl \"$@\"\n", filepath.Join(root, "bin", "controlplane"))
	if err := os.WriteFile(kubectl, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	args := append([]string{
		"--ginkgo.focus=" + conformance.SmokeFocus(),
		"--ginkgo.skip=" + conformance.SkipRegexp(),
		"--ginkgo.no-color",
	}, conformance.E2EArgs(conformance.Options{
		Kubeconfig:      kubeconfig,
		ReportDir:       dir,
		KubectlPath:     kubectl,
		RuntimeEndpoint: c.env.Endpoint(),
		KubeletRootDir:  c.rootDir,
		DNSDomain:       clusteraddons.DNSDomain,
	})...)
	cmd := exec.Command(e2eTest, args...)
	cmd.SysProcAttr = stopWithParent()
	out, err := cmd.CombinedOutput()
	summary, readErr := conformance.ReadJUnit(filepath.Join(dir, "junit_01.xml"))
	if readErr != nil {
		t.Fatalf("e2e.test wrote no report (%v, exit %v):\n%s", readErr, err, lastLines(string(out), 80))
	}
	t.Logf("conformance smoke set: %s", summary)
	// The suite deletes its namespaces as it goes; their pods must be gone
	// from the node before the agent stops, or the leak check finds them.
	eventually(t, 3*time.Minute, "the suite's pods gone from the node", func() (bool, string) {
		pods, err := client.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
		if err != nil {
			return false, err.Error()
		}
		return len(pods.Items) == 0, fmt.Sprintf("%d pods left", len(pods.Items))
	})
	if f := summary.Failures(); len(f) > 0 {
		t.Errorf("failed:\n  %s\n%s", strings.Join(f, "\n  "), lastLines(string(out), 150))
	}
	checkPassed(t, summary, conformance.Smoke)
}

// checkPassed fails the test unless every one of names matches a spec of
// summary that ran and passed.
func checkPassed(t *testing.T, summary conformance.Summary, names []string) {
	t.Helper()
	for _, name := range names {
		if !slices.ContainsFunc(summary.Results, func(r conformance.Result) bool {
			return strings.Contains(r.Name, name) && r.Status == "passed"
		}) {
			t.Errorf("no passed spec matches %q", name)
		}
	}
}

// TestNodeConformanceSmoke runs the smoke set of Kubernetes' node
// conformance test (e2e_node.test --conformance; make node-conformance
// runs all of it, conformance.NodeSmoke says which) through the same
// runner, hack/conformance --suite node, which brings up a cluster of its
// own: the suite wants a cluster whose only node is the one under test,
// with the kubelet's paths (/var/lib/kubelet, /var/log/pods), and checks
// that nothing is left behind. Its kubelet port is a free one; its
// read-only port is the suite's 10255.
func TestNodeConformanceSmoke(t *testing.T) {
	bin := filepath.Join(root, "bin")
	for _, b := range []string{"e2e_node.test", "conformance", "ginkgo"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			t.Fatalf("%s missing: make test builds it", filepath.Join(bin, b))
		}
	}
	out := t.TempDir()
	cmd := exec.Command(filepath.Join(bin, "conformance"), "--suite", "node", "--bin", bin, "--out", out,
		"--images", filepath.Join(root, ".local", "images"), "--kubelet-port", strconv.Itoa(fault.FreePort(t)),
		"--procs", "2", "--focus", conformance.NodeSmokeFocus())
	cmd.SysProcAttr = stopWithParent()
	output, err := cmd.CombinedOutput()
	summary, readErr := conformance.ReadJUnit(filepath.Join(out, "cri", "junit_01.xml"))
	if readErr != nil {
		t.Fatalf("the node suite wrote no report (%v, exit %v):\n%s", readErr, err, lastLines(string(output), 80))
	}
	t.Logf("node conformance smoke set: %s", summary)
	if err != nil {
		t.Errorf("the runner failed (%v): a spec failed or the suite left something behind:\n%s", err, lastLines(string(output), 150))
	}
	checkPassed(t, summary, conformance.NodeSmoke)
}
