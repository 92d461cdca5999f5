// Package conformance runs Kubernetes' own end-to-end tests (e2e.test of
// k8s.io/kubernetes, built by make bin/e2e.test) and its node conformance
// test (e2e_node.test --conformance, node.go) against a nodelet node: the
// selection of specs and the skips with their reasons, the command lines
// of the test binaries, and the JUnit report they write. hack/conformance
// (make conformance, make node-conformance) and the smoke test of test/e2e
// share it.
package conformance

import (
	"encoding/xml"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"
)

// Focus selects what a certification run runs: every [Conformance] spec
// of the whole suite (what the certification tools select, 446 in
// v1.36.3's test/conformance/testdata/conformance.yaml; the [Serial] ones
// run one at a time after the rest) and every [NodeConformance] spec.
const Focus = `\[Conformance\]|\[NodeConformance\]`

// Skip is a spec skipped, with why.
type Skip struct {
	// Pattern is a regular expression matched against the spec's full
	// text (as --ginkgo.skip).
	Pattern string
	// Reason says why the spec cannot run here; docs/conformance.md lists
	// each, and TestSkipsAreDocumented checks that it does.
	Reason string
}

// Skips are the specs of the selection that are not run, each with its
// reason. A spec is skipped only when one node truly cannot run it; no
// [Conformance] spec is skipped for a feature nodelet lacks.
var Skips = []Skip{
	{`\[Flaky\]`, "marked flaky upstream; no [Conformance] spec is, and no conformance profile runs them"},
	{`\[Feature:[^\]]*\]`, "needs an alpha or beta feature gate that is off by default in v1.36; no [Conformance] spec does"},
}

// The markers around the table of skips in docs/conformance.md.
const (
	SkipTableStart = "<!-- skips: from Skips in test/conformance; TestSkipsAreDocumented checks it -->"
	SkipTableEnd   = "<!-- end of skips -->"
)

// SkipTable is the Markdown table of Skips that docs/conformance.md holds.
func SkipTable() string { return skipTable(Skips) }

// SkipRegexp is the --ginkgo.skip of the run: every pattern of Skips.
func SkipRegexp() string { return skipRegexp(Skips) }

func skipTable(skips []Skip) string {
	var b strings.Builder
	b.WriteString("| skipped (--ginkgo.skip) | why |\n|---|---|\n")
	for _, s := range skips {
		fmt.Fprintf(&b, "| `%s` | %s |\n", strings.ReplaceAll(s.Pattern, "|", "\\|"), s.Reason)
	}
	return b.String()
}

func skipRegexp(skips []Skip) string {
	parts := make([]string, len(skips))
	for i, s := range skips {
		parts[i] = s.Pattern
	}
	return strings.Join(parts, "|")
}

// Smoke are the specs of the smoke set that make test runs (package
// test/e2e): pods, configmap/secret/downward API volumes, probes, init
// containers, logs and exec, and one spec of each group beyond
// test/e2e/common: a Deployment rolling out (apps), kubectl logs through
// the node (cli), a pod reading the API server's OIDC discovery through
// the kubernetes Service with its token (auth), pods resolving Services
// through the cluster's DNS (network). Each is matched as a
// literal substring of the spec's text, over the whole suite.
var Smoke = []string{
	"Pods should be submitted and removed",
	"Pods should get a host IP",
	"ConfigMap should be consumable from pods in volume with mappings",
	"Secrets should be consumable from pods in volume with defaultMode set",
	"Downward API volume should provide podname only",
	"Downward API should provide pod name, namespace and IP address as env vars",
	"Probing container with readiness probe should not be ready before initial delay and never restart",
	"Probing container should be restarted with a exec \"cat /tmp/health\" liveness probe",
	"InitContainer [NodeConformance] should invoke init containers on a RestartNever pod",
	"Kubelet when scheduling a busybox command in a pod should print the output to logs",
	"Pods should support remote command execution over websockets",
	"Container Runtime blackbox test on terminated container should report termination message from log output if TerminationMessagePolicy FallbackToLogsOnError is set",
	"[sig-apps] Deployment RollingUpdateDeployment should delete old pods and create new ones",
	"[sig-cli] Kubectl logs logs should be able to retrieve and filter logs",
	"[sig-auth] ServiceAccounts ServiceAccountIssuerDiscovery should support OIDC discovery of service account issuer",
	"[sig-network] DNS should provide DNS for services",
}

// SmokeFocus is the --ginkgo.focus of the smoke set.
func SmokeFocus() string { return focusOf(Smoke) }

// focusOf is the --ginkgo.focus that selects the specs named.
func focusOf(names []string) string {
	parts := make([]string, len(names))
	for i, s := range names {
		parts[i] = regexp.QuoteMeta(s)
	}
	return strings.Join(parts, "|")
}

// Options are what E2EArgs needs to know of the cluster.
type Options struct {
	Kubeconfig string
	// ReportDir receives junit_01.xml.
	ReportDir string
	// KubectlPath is a kubectl of the same release.
	KubectlPath string
	// RuntimeEndpoint is the node's CRI endpoint (empty: not a cri node).
	RuntimeEndpoint string
	// KubeletRootDir is the node's root directory.
	KubeletRootDir string
	// DNSDomain is the cluster's DNS domain.
	DNSDomain string
}

// E2EArgs are the flags of e2e.test for a run against one local node.
func E2EArgs(o Options) []string {
	args := []string{
		"--kubeconfig=" + o.Kubeconfig,
		"--provider=skeleton",
		"--report-dir=" + o.ReportDir,
		"--e2e-output-dir=" + o.ReportDir,
		"--kubectl-path=" + o.KubectlPath,
		"--kubelet-root-dir=" + o.KubeletRootDir,
		"--node-os-distro=debian",
		"--minStartupPods=-1",
		"--allowed-not-ready-nodes=0",
		"--disable-log-dump",
	}
	if o.RuntimeEndpoint != "" {
		args = append(args, "--container-runtime-endpoint="+o.RuntimeEndpoint)
	}
	if o.DNSDomain != "" {
		args = append(args, "--dns-domain="+o.DNSDomain)
	}
	return args
}

// Result is the outcome of one spec in a JUnit report.
type Result struct {
	Name     string
	Status   string // passed, failed, skipped, pending
	Duration time.Duration
	Failure  string
}

// Summary counts the results of a run. Skipped counts every spec of the
// suite that did not run: those outside the selection too.
type Summary struct {
	Passed, Failed, Skipped int
	Duration                time.Duration
	Results                 []Result
}

// Failures are the names of the specs that failed, sorted.
func (s Summary) Failures() []string {
	var out []string
	for _, r := range s.Results {
		if r.Status == "failed" {
			out = append(out, r.Name)
		}
	}
	sort.Strings(out)
	return out
}

func (s Summary) String() string {
	return fmt.Sprintf("passed %d, failed %d of %d run in %s", s.Passed, s.Failed, s.Passed+s.Failed, s.Duration.Round(time.Second))
}

type junitSuites struct {
	Suites []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Cases []junitCase `xml:"testcase"`
	Time  float64     `xml:"time,attr"`
}

type junitCase struct {
	Name    string  `xml:"name,attr"`
	Status  string  `xml:"status,attr"`
	Time    float64 `xml:"time,attr"`
	Failure *struct {
		Message string `xml:"message,attr"`
		Text    string `xml:",chardata"`
	} `xml:"failure"`
	Error *struct {
		Message string `xml:"message,attr"`
	} `xml:"error"`
	Skipped *struct{} `xml:"skipped"`
}

// ReadJUnit reads the JUnit report e2e.test wrote. The suite's set-up and
// tear-down nodes ([SynchronizedBeforeSuite] and the like) count only when
// they failed.
func ReadJUnit(path string) (Summary, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Summary{}, err
	}
	var doc junitSuites
	if err := xml.Unmarshal(data, &doc); err != nil {
		return Summary{}, fmt.Errorf("%s: %w", path, err)
	}
	var s Summary
	for _, suite := range doc.Suites {
		s.Duration += seconds(suite.Time)
		for _, c := range suite.Cases {
			r := Result{Name: c.Name, Status: c.Status, Duration: seconds(c.Time)}
			if r.Status == "" {
				switch {
				case c.Failure != nil || c.Error != nil:
					r.Status = "failed"
				case c.Skipped != nil:
					r.Status = "skipped"
				default:
					r.Status = "passed"
				}
			}
			if c.Failure != nil {
				r.Failure = c.Failure.Message
			} else if c.Error != nil {
				r.Failure = c.Error.Message
			}
			suiteNode := strings.HasPrefix(r.Name, "[") && strings.Contains(r.Name, "Suite]")
			switch r.Status {
			case "passed":
				if suiteNode {
					continue
				}
				s.Passed++
			case "failed", "panicked", "interrupted", "aborted", "timedout":
				r.Status = "failed"
				s.Failed++
			default:
				if suiteNode {
					continue
				}
				r.Status = "skipped"
				s.Skipped++
			}
			s.Results = append(s.Results, r)
		}
	}
	return s, nil
}

// Group is the group a spec belongs to, for tables: its SIG and the
// capitalised words that open its text ("[sig-node] Probing container
// [It] …" is "[sig-node] Probing").
func Group(name string) string {
	f := strings.Fields(strings.TrimPrefix(name, "[It] "))
	if len(f) == 0 {
		return ""
	}
	out := []string{f[0]}
	for _, w := range f[1:] {
		if w == "" || w[0] < 'A' || w[0] > 'Z' {
			break
		}
		out = append(out, w)
	}
	return strings.Join(out, " ")
}

func seconds(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }
