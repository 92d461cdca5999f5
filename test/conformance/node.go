package conformance

// NodeFocus selects the node conformance test in e2e_node.test (test/e2e_node
// of k8s.io/kubernetes): every [NodeConformance] spec of the node suite,
// the specs of test/e2e/common it shares with e2e.test among them.
const NodeFocus = `\[NodeConformance\]`

// NodeSmoke is the smoke set of the node conformance test that make test
// runs (test/e2e): static pods and their mirror pods, read from the
// directory the node's /configz names, updated, and removed and written
// back at once. The names leave out the [NodeConformance] that ends them,
// which the run's own selection matches (NodeFocus).
var NodeSmoke = []string{
	"[sig-node] MirrorPod when create a mirror pod should be updated when static pod updated",
	"[sig-node] MirrorPod when create a mirror pod without changes should successfully recreate when file is removed and recreated",
}

// NodeSmokeFocus is the --ginkgo.focus of the node smoke set.
func NodeSmokeFocus() string { return focusOf(NodeSmoke) }

// NodeSkips are the specs of NodeFocus that the node conformance run does
// not run, each with its reason; docs/conformance.md lists them between
// NodeSkipTableStart and NodeSkipTableEnd. [Flaky] and [Disruptive] are
// what upstream's own node conformance image skips
// (test/e2e_node/conformance/build/Dockerfile, which skips [Serial] too);
// the run goes further and runs the [Serial] specs, one at a time after the
// rest (ginkgo's Serial decorator), but for those that restart the kubelet,
// which --conformance mode cannot do to an agent it did not start.
var NodeSkips = []Skip{
	{`\[Disruptive\]`, "stops or restarts the kubelet or the container runtime through systemd (and every such spec is [Serial] as well)"},
	{`\[Flaky\]`, "marked flaky upstream; upstream's node conformance image skips them"},
	{`\[Feature:[^\]]*\]`, "needs an alpha or beta feature gate that is off by default in v1.36 (WithFeatureGate marks those [Feature:OffByDefault]), which neither the control plane nor the node turns on"},
	{`Kubelet Endpoints .*when config is updated|KubletTLS .*certificate reload|ReloadKubeletClientCAFileTest|ImageGarbageCollect|OOMKiller .*The containers terminated by OOM killer`, restartsKubelet + ", with another configuration (updateKubeletConfig, tempSetCurrentKubeletConfig)"},
	{`restartable init containers reboots|MirrorPod .*when kubelet restarts|StaticPod .*kubelet restarts`, restartsKubelet + " (restartKubelet, or a node reboot it imitates by stopping the kubelet and removing its containers)"},
}

// restartsKubelet is why a [Serial] spec of the node suite does not run.
const restartsKubelet = "[Serial]: stops and starts the kubelet through systemd, which --conformance mode cannot do to an agent it did not start (the suite has no way to restart nodelet)"

// The markers around the table of NodeSkips in docs/conformance.md.
const (
	NodeSkipTableStart = "<!-- node skips: from NodeSkips in test/conformance; TestSkipsAreDocumented checks it -->"
	NodeSkipTableEnd   = "<!-- end of node skips -->"
)

// NodeSkipTable is the Markdown table of NodeSkips.
func NodeSkipTable() string { return skipTable(NodeSkips) }

// NodeSkipRegexp is the --ginkgo.skip of the node conformance run.
func NodeSkipRegexp() string { return skipRegexp(NodeSkips) }

// NodeOptions are what NodeE2EArgs needs to know of the node and its
// cluster. In node e2e mode the suite reaches the API server at Host with
// BearerToken alone (no kubeconfig), and the kubelet's /configz through
// the API server's node proxy with the same token.
type NodeOptions struct {
	// Host is the API server's URL.
	Host string
	// BearerToken authenticates the suite: it must be allowed everything
	// its specs do (cluster-admin).
	BearerToken string
	// NodeName is the node under test, the cluster's only node.
	NodeName string
	// ReportDir receives junit_01.xml.
	ReportDir string
	// KubectlPath is a kubectl of the same release.
	KubectlPath string
	// RuntimeEndpoint is the node's CRI endpoint.
	RuntimeEndpoint string
	// DNSDomain is the cluster's DNS domain.
	DNSDomain string
}

// NodeE2EArgs are the flags of e2e_node.test for a run in --conformance
// mode against a node that is already running: the suite starts no
// kubelet and no API server (--start-services=false) and pulls each
// spec's images as the spec runs (--prepull-images=false, as upstream's
// node conformance image: its pre-pull list names images that the spec
// selection never runs, such as cadvisor, perl, etcd and the node-perf
// and device-plugin images).
func NodeE2EArgs(o NodeOptions) []string {
	args := []string{
		"--conformance=true",
		"--start-services=false",
		"--stop-services=false",
		"--prepull-images=false",
		"--host=" + o.Host,
		"--bearer-token=" + o.BearerToken,
		"--node-name=" + o.NodeName,
		"--report-dir=" + o.ReportDir,
		"--kubectl-path=" + o.KubectlPath,
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
