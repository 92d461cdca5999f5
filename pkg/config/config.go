// Package config owns nodelet's configuration: its type, defaults,
// validation and loading from a file, and the controller that picks the
// config the agent runs — the local one, or a remote one named by the
// Node's config.nodelet.io/source annotation, checkpointed on disk (package
// checkpoint), tried and rolled back to the last-known-good when it fails —
// and reports it as the Node's ConfigOK condition. The controller reads
// the agent's Node and that ConfigMap, and writes only checkpoints and its
// own state under <rootDir>/config and Events; the condition is written by
// the node controller's status report.
package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/nodelet/nodelet/pkg/eviction"
	"github.com/nodelet/nodelet/pkg/simrules"
	"github.com/nodelet/nodelet/pkg/stage"
)

const (
	// APIVersion and Kind identify a nodelet config file.
	APIVersion = "nodelet.io/v1alpha1"
	Kind       = "NodeletConfiguration"

	ProviderSim     = "sim"
	ProviderProcess = "process"
	ProviderCRI     = "cri"

	// The content types the agent's API client can use (contentType).
	ContentTypeProtobuf = "application/vnd.kubernetes.protobuf"
	ContentTypeJSON     = "application/json"
)

// Config is everything the agent is told. Field names follow the kubelet's
// where the meaning is the same.
type Config struct {
	APIVersion string `json:"apiVersion,omitempty"`
	Kind       string `json:"kind,omitempty"`

	// NodeName is the name of the Node this agent registers, or with Nodes
	// the prefix of the names <nodeName>-0 … <nodeName>-<Nodes-1>.
	NodeName string `json:"nodeName,omitempty"`
	// Nodes is how many nodes this agent registers; 0 means one node named
	// exactly NodeName.
	Nodes int32 `json:"nodes,omitempty"`
	// Shard "i/n" makes this agent manage only the nodes whose name hashes
	// to i of n, so that n agents together manage every node exactly once.
	// "auto" splits the Nodes taken over (manageAllNodes, manageNodesWith…)
	// among the replicas of ShardGroup alive now instead, each holding a
	// Lease in kube-node-lease: a replica that joins takes its share, and
	// the share of one that dies moves to the others within
	// NodeLeaseDurationSeconds.
	Shard string `json:"shard,omitempty"`
	// ShardGroup names the replicas that split one set of Nodes with
	// shard "auto" (default "nodelet").
	ShardGroup string `json:"shardGroup,omitempty"`
	// ManageSingleNode, ManageAllNodes, ManageNodesWithAnnotationSelector
	// and ManageNodesWithLabelSelector are kwok's options of the same
	// names (sim provider): the agent takes over the Nodes others create
	// that they select, as they appear, and lets each go when it is
	// deleted or stops matching, besides its own nodes (nodeName, nodes)
	// if any. The Node of one name, or all Nodes, or those matching the
	// annotation selector and the label selector (both, when both are set;
	// selectors in label selector syntax); the first two conflict with
	// the rest, as in kwok. With no nodeName and none of the four, a sim
	// agent takes over the Nodes with kwok's annotation, as kwok's
	// manifests set it: kwok.x-k8s.io/node=fake.
	ManageSingleNode                  string `json:"manageSingleNode,omitempty"`
	ManageAllNodes                    bool   `json:"manageAllNodes,omitempty"`
	ManageNodesWithAnnotationSelector string `json:"manageNodesWithAnnotationSelector,omitempty"`
	ManageNodesWithLabelSelector      string `json:"manageNodesWithLabelSelector,omitempty"`
	// Provider runs the pods: "sim", "process" or "cri".
	Provider string `json:"provider,omitempty"`
	// NodeLabels are added to the Node at registration and kept there.
	NodeLabels map[string]string `json:"nodeLabels,omitempty"`
	// RegisterWithTaints are the taints the Node is registered with.
	RegisterWithTaints []corev1.Taint `json:"registerWithTaints,omitempty"`

	// NodeLeaseDurationSeconds is the Lease's duration; it is renewed every
	// quarter of it.
	NodeLeaseDurationSeconds int32 `json:"nodeLeaseDurationSeconds,omitempty"`
	// NodeStatusReportFrequency is how often an unchanged status is
	// reported while leases keep the node alive.
	NodeStatusReportFrequency metav1.Duration `json:"nodeStatusReportFrequency,omitempty"`
	// PingInterval is how often the provider is pinged; it is also the
	// status heartbeat when the Lease API is missing.
	PingInterval metav1.Duration `json:"pingInterval,omitempty"`
	// PodStatusPollInterval is how often pods of providers that cannot push
	// status are polled.
	PodStatusPollInterval metav1.Duration `json:"podStatusPollInterval,omitempty"`

	// KubeAPIQPS and KubeAPIBurst limit the agent's API client.
	KubeAPIQPS   float32 `json:"kubeAPIQPS,omitempty"`
	KubeAPIBurst int32   `json:"kubeAPIBurst,omitempty"`
	// ContentType is what the agent's API client sends and asks for, as
	// the kubelet's contentType: protobuf (the default) costs the agent and
	// the API server far less to encode and decode than JSON.
	ContentType string `json:"contentType,omitempty"`
	// PodWorkers is how many pods are synced at once.
	PodWorkers int32 `json:"podWorkers,omitempty"`

	// GoMemoryLimit is the Go runtime's soft memory limit
	// (runtime/debug.SetMemoryLimit), set at start: as the agent's memory
	// nears it, the garbage collector runs more often (using at most about
	// half the CPU) instead of letting the heap grow to twice what is live.
	// Set it a little under the memory the agent may use, e.g. 90% of its
	// container's limit, so that it collects harder before it is
	// OOM-killed. Unset (default): no limit, as Go's default. The agent
	// cannot pick one itself: its live heap grows with the pods bound to
	// its nodes, and a limit under the live heap makes the collector run
	// all the time, taking the CPU that lease renewals need. The
	// environment variable GOMEMLIMIT, when set, wins.
	GoMemoryLimit *resource.Quantity `json:"goMemoryLimit,omitempty"`
	// GoGCPercent is the Go runtime's GC percent
	// (runtime/debug.SetGCPercent), set at start: a collection starts once
	// the heap has grown by that percent over what the last one left live;
	// -1 turns collections off until the heap nears goMemoryLimit, which
	// must then be set. Unset (default): Go's 100; lower trades CPU for
	// memory at every scale. The environment variable GOGC, when set,
	// wins.
	GoGCPercent *int32 `json:"goGCPercent,omitempty"`

	// Address is the node's InternalIP; Port is the kubelet API port
	// published in the node's daemonEndpoints.
	Address string `json:"address,omitempty"`
	Port    int32  `json:"port,omitempty"`

	// HealthzPort serves /healthz, without authentication, on
	// HealthzBindAddress: 200 once every node is registered and the pods
	// are synced, 500 with the reason before. Liveness and readiness probes
	// use it. Default 0: off (the kubelet's 10248 would clash between the
	// agents that share a host).
	HealthzPort        int32  `json:"healthzPort,omitempty"`
	HealthzBindAddress string `json:"healthzBindAddress,omitempty"`
	// ReadOnlyPort serves the kubelet API's read-only endpoints (/healthz,
	// /pods, /stats/summary, /metrics, /metrics/resource, /metrics/probes,
	// /metrics/cadvisor) over plain HTTP without authentication on every
	// interface, as the kubelet's readOnlyPort (10255 by custom). Default
	// 0: off. Anyone who reaches the port reads the node's pods, their
	// specs included: turn it on only where that is acceptable.
	ReadOnlyPort int32 `json:"readOnlyPort,omitempty"`

	// EnableServer runs the kubelet API server (logs, exec, attach,
	// port-forward) on Port. Default true with the process and cri
	// providers, false with sim (thousands of sim nodes share one address).
	EnableServer *bool `json:"enableServer,omitempty"`
	// EnableProfilingHandler serves the Go runtime's profiles at
	// /debug/pprof/ on the kubelet API, authorized as nodes/proxy.
	// Default true, as the kubelet's.
	EnableProfilingHandler *bool `json:"enableProfilingHandler,omitempty"`
	// TLSCertFile and TLSPrivateKeyFile are the server's certificate and
	// key; when unset (and serverTLSBootstrap is not set), a self-signed
	// certificate is generated at start.
	TLSCertFile       string `json:"tlsCertFile,omitempty"`
	TLSPrivateKeyFile string `json:"tlsPrivateKeyFile,omitempty"`
	// ServerTLSBootstrap requests the server's certificate through the
	// certificates API (signer kubernetes.io/kubelet-serving, as the
	// kubelet's serverTLSBootstrap does) instead of generating a
	// self-signed one; it is kept under <rootDir>/pki and renewed at 80% of
	// its lifetime. Someone (an administrator or an approver) must approve the
	// CSR. Excludes tlsCertFile.
	ServerTLSBootstrap bool `json:"serverTLSBootstrap,omitempty"`
	// Authentication of requests to the kubelet API server.
	Authentication ServerAuthentication `json:"authentication,omitempty"`

	// RootDir holds the process provider's pods: state, sandboxes, volumes
	// and logs.
	RootDir string `json:"rootDir,omitempty"`
	// MaxPods is the process provider node's pod capacity.
	MaxPods int32 `json:"maxPods,omitempty"`
	// SystemReserved and KubeReserved are taken from the host's capacity to
	// give the node's allocatable.
	SystemReserved corev1.ResourceList `json:"systemReserved,omitempty"`
	KubeReserved   corev1.ResourceList `json:"kubeReserved,omitempty"`
	// ContainerLogMaxSize is the size at which a container log file is
	// rotated; ContainerLogMaxFiles how many files are kept per container.
	ContainerLogMaxSize  resource.Quantity `json:"containerLogMaxSize,omitempty"`
	ContainerLogMaxFiles int32             `json:"containerLogMaxFiles,omitempty"`
	// VolumeSyncPeriod is how often ConfigMap, Secret, downward API and
	// projected volumes are refreshed.
	VolumeSyncPeriod metav1.Duration `json:"volumeSyncPeriod,omitempty"`

	// StaticPodPath is a directory of pod manifests (YAML or JSON, one pod
	// per file; names beginning with "." are skipped) that the node runs
	// as static pods, with a mirror pod each in the API (process and cri
	// providers). It is read every FileCheckFrequency (default 20s).
	StaticPodPath      string          `json:"staticPodPath,omitempty"`
	FileCheckFrequency metav1.Duration `json:"fileCheckFrequency,omitempty"`
	// StaticPodURL serves pod manifests (one pod or a list) that the node
	// runs as static pods, read every HTTPCheckFrequency (default 20s).
	StaticPodURL       string          `json:"staticPodURL,omitempty"`
	HTTPCheckFrequency metav1.Duration `json:"httpCheckFrequency,omitempty"`

	// ContainerRuntimeEndpoint is the CRI socket of the cri provider's
	// container runtime.
	ContainerRuntimeEndpoint string `json:"containerRuntimeEndpoint,omitempty"`
	// RuntimeRequestTimeout bounds each call to the container runtime but
	// image pulls.
	RuntimeRequestTimeout metav1.Duration `json:"runtimeRequestTimeout,omitempty"`
	// ClusterDNS are the cluster DNS servers' addresses and ClusterDomain
	// the cluster's domain, which pods with dnsPolicy ClusterFirst resolve
	// with (cri provider); ResolvConf is the host's resolver configuration
	// that pods with dnsPolicy Default get.
	ClusterDNS    []string `json:"clusterDNS,omitempty"`
	ClusterDomain string   `json:"clusterDomain,omitempty"`
	ResolvConf    string   `json:"resolvConf,omitempty"`
	// AllowedUnsafeSysctls are the sysctls beyond the kubelet's safe set
	// that pods may set (process and cri providers): names, or prefixes
	// ending in "*"; a pod setting any other is rejected SysctlForbidden.
	AllowedUnsafeSysctls []string `json:"allowedUnsafeSysctls,omitempty"`
	// PodLogsDir holds the cri provider's container logs,
	// <podLogsDir>/<namespace>_<pod>_<uid>/<container>/<restart>.log, linked
	// from the directory "containers" beside it.
	PodLogsDir string `json:"podLogsDir,omitempty"`
	// RuntimeCgroups and SystemCgroups name the cgroups (paths below
	// every hierarchy's root) where the container runtime and the host's
	// other system processes run, as the kubelet's runtimeCgroups and
	// systemCgroups: the stats summary of a cri or process node reports
	// them as the system containers "runtime" and "misc". nodelet moves
	// no process into them; whoever starts the runtime and the host's
	// services places them there.
	RuntimeCgroups string `json:"runtimeCgroups,omitempty"`
	SystemCgroups  string `json:"systemCgroups,omitempty"`

	// ImageGCHighThresholdPercent is the image filesystem usage at which
	// the cri provider removes unused images, down to
	// ImageGCLowThresholdPercent; images younger than ImageMinimumGCAge are
	// kept.
	ImageGCHighThresholdPercent int32           `json:"imageGCHighThresholdPercent,omitempty"`
	ImageGCLowThresholdPercent  int32           `json:"imageGCLowThresholdPercent,omitempty"`
	ImageMinimumGCAge           metav1.Duration `json:"imageMinimumGCAge,omitempty"`

	// EvictionHard are the hard eviction thresholds: signal (memory.available,
	// nodefs.available, nodefs.inodesFree, imagefs.available,
	// imagefs.inodesFree, pid.available) to the least that must stay
	// available, a quantity or a percentage of the capacity. Below it a pod
	// is evicted at once. When none is set they are the kubelet's:
	// memory.available 100Mi, nodefs.available 10%, nodefs.inodesFree 5%,
	// imagefs.available 15%, imagefs.inodesFree 5%. "0%" switches a
	// signal off.
	EvictionHard map[string]string `json:"evictionHard,omitempty"`
	// EvictionSoft are soft eviction thresholds, in the same form: they
	// evict once met for the signal's EvictionSoftGracePeriod (a duration,
	// required for each), giving the pod its own grace period, capped by
	// EvictionMaxPodGracePeriod.
	EvictionSoft            map[string]string `json:"evictionSoft,omitempty"`
	EvictionSoftGracePeriod map[string]string `json:"evictionSoftGracePeriod,omitempty"`
	// EvictionMinimumReclaim is, per signal, how much more than its
	// threshold must be available again before a met threshold is
	// resolved (a quantity or a percentage).
	EvictionMinimumReclaim map[string]string `json:"evictionMinimumReclaim,omitempty"`
	// EvictionPressureTransitionPeriod is how long a pressure node
	// condition stays True after its threshold was last met (default 5m).
	EvictionPressureTransitionPeriod metav1.Duration `json:"evictionPressureTransitionPeriod,omitempty"`
	// EvictionMaxPodGracePeriod caps, in seconds, the grace period of pods
	// evicted for a soft threshold; 0 (default) gives each pod its own.
	EvictionMaxPodGracePeriod int32 `json:"evictionMaxPodGracePeriod,omitempty"`

	// ShutdownGracePeriod is how long a graceful node shutdown (nodelet
	// shutdown) gives the pods to stop; 0 (default) turns it off.
	// ShutdownGracePeriodCriticalPods is the part of it kept for critical
	// pods (priority system-cluster-critical and above), stopped last.
	ShutdownGracePeriod             metav1.Duration `json:"shutdownGracePeriod,omitempty"`
	ShutdownGracePeriodCriticalPods metav1.Duration `json:"shutdownGracePeriodCriticalPods,omitempty"`
	// ShutdownGracePeriodByPodPriority, instead of the two above, gives
	// each range of pod priorities (from its priority up to the next
	// one's) its own time, the lowest priorities stopped first.
	ShutdownGracePeriodByPodPriority []ShutdownGracePeriodByPodPriority `json:"shutdownGracePeriodByPodPriority,omitempty"`

	// ConfigTrialDuration is how long a newly assigned remote config is on
	// trial: if it fails to load or the agent fails to become healthy
	// within it, nodelet rolls back to the last-known-good config; once it
	// has passed, the assigned config becomes the last-known-good.
	ConfigTrialDuration metav1.Duration `json:"configTrialDuration,omitempty"`

	// AttachDetach configures the attach/detach of the volumes that pods on
	// nodelet's nodes use.
	AttachDetach AttachDetachConfig `json:"attachDetach,omitempty"`

	// Sim configures the sim provider.
	Sim SimConfig `json:"sim,omitempty"`
}

// The attachers of AttachDetachConfig.Attacher.
const (
	// AttacherCSI attaches through VolumeAttachments, which a CSI
	// driver's external-attacher carries out.
	AttacherCSI = "csi"
	// AttacherSim attaches in memory, for simulated nodes.
	AttacherSim = "sim"
)

// AttachDetachConfig configures attach/detach. nodelet attaches and
// detaches the volumes of its own nodes, which it registers with the
// annotation volumes.kubernetes.io/controller-managed-attach-detach
// "false" so that the cluster's attach/detach controller leaves them alone.
type AttachDetachConfig struct {
	// Enabled runs attach/detach for the agent's nodes (default true).
	// When false the nodes are left to the cluster's controller.
	Enabled *bool `json:"enabled,omitempty"`
	// Attacher is "csi" (default) or "sim".
	Attacher string `json:"attacher,omitempty"`
	// ReconcilerLoopPeriod is the time between two reconcile passes
	// (default 100ms).
	ReconcilerLoopPeriod metav1.Duration `json:"reconcilerLoopPeriod,omitempty"`
	// ReconcilerSyncPeriod is how often attached volumes are checked to be
	// still attached (default 1m); below one second the check is off.
	ReconcilerSyncPeriod metav1.Duration `json:"reconcilerSyncPeriod,omitempty"`
	// MaxWaitForUnmount is how long a volume still mounted on an unhealthy
	// node is kept attached before it is detached anyway (default 6m).
	MaxWaitForUnmount metav1.Duration `json:"maxWaitForUnmount,omitempty"`
	// SimLatency is how long each attach and detach of the sim attacher
	// takes (default none).
	SimLatency metav1.Duration `json:"simLatency,omitempty"`
	// SimFailureRate is the probability, in [0, 1], that an attach or
	// detach of the sim attacher fails (default 0).
	SimFailureRate float64 `json:"simFailureRate,omitempty"`
}

// AttachDetachEnabled tells whether nodelet runs attach/detach.
func (c *Config) AttachDetachEnabled() bool {
	return c.AttachDetach.Enabled == nil || *c.AttachDetach.Enabled
}

// ServerAuthentication says how the kubelet API server authenticates.
type ServerAuthentication struct {
	// X509 authenticates client certificates signed by ClientCAFile (the
	// API server's kubelet client certificate).
	X509 struct {
		ClientCAFile string `json:"clientCAFile,omitempty"`
	} `json:"x509,omitempty"`
	// Webhook authenticates bearer tokens with TokenReviews. Default true.
	Webhook struct {
		Enabled *bool `json:"enabled,omitempty"`
	} `json:"webhook,omitempty"`
}

// ServerEnabled tells whether the kubelet API server runs.
func (c *Config) ServerEnabled() bool {
	if c.EnableServer != nil {
		return *c.EnableServer
	}
	return c.RunsHostPods()
}

// RunsHostPods tells whether the provider runs real pods on this host
// (process or cri), one node per agent.
func (c *Config) RunsHostPods() bool {
	return c.Provider == ProviderProcess || c.Provider == ProviderCRI
}

// SimConfig configures simulated pods and nodes. Left at their defaults,
// pods run at once, terminate at once when deleted and never fail, and
// nodes stay healthy.
type SimConfig struct {
	// PodCIDR is the range pod IPs are taken from. With several nodes,
	// node i takes the i-th /24 of it.
	PodCIDR string `json:"podCIDR,omitempty"`
	// StartDelay is how long a pod stays Pending before it runs.
	StartDelay metav1.Duration `json:"startDelay,omitempty"`
	// StartJitter adds to each pod's startDelay a random extra, uniform in
	// [0, startJitter). Default 0.
	StartJitter metav1.Duration `json:"startJitter,omitempty"`
	// DeleteDelay is how long a deleted pod takes to terminate (at most its
	// grace period).
	DeleteDelay metav1.Duration `json:"deleteDelay,omitempty"`
	// DeleteJitter adds to each pod's deleteDelay a random extra, uniform
	// in [0, deleteJitter), before the grace period caps it. Default 0.
	DeleteJitter metav1.Duration `json:"deleteJitter,omitempty"`
	// CompleteRatio is the share of pods, in [0, 1], whose containers exit
	// with code 0 (reason Completed) after runDuration. Which pods is
	// decided by a hash of the pod UID, so an agent restart does not change
	// it. With restartPolicy Never or OnFailure the pod then Succeeds; with
	// Always its containers restart after a crash-loop back-off (10s,
	// doubling with each restart up to 5m) and exit again after the next
	// run. Default 0.
	CompleteRatio float64 `json:"completeRatio,omitempty"`
	// FailRatio is the share of pods, in [0, 1], whose containers exit with
	// code 1 (reason Error) after runDuration, chosen like completeRatio's
	// and never the same pods; completeRatio + failRatio is at most 1.
	// With restartPolicy Never the pod then Fails; with OnFailure or Always
	// its containers restart after the crash-loop back-off. Default 0.
	FailRatio float64 `json:"failRatio,omitempty"`
	// RunDuration is how long the containers of a completing or failing pod
	// run each time before they exit. Default 10s when completeRatio or
	// failRatio is set.
	RunDuration metav1.Duration `json:"runDuration,omitempty"`
	// RunJitter adds to each run a random extra, uniform in [0, runJitter).
	// Default 0.
	RunJitter metav1.Duration `json:"runJitter,omitempty"`
	// NodeConditions are node conditions that a share of the nodes shows
	// for a while on a schedule.
	NodeConditions []SimNodeCondition `json:"nodeConditions,omitempty"`
	// Capacity is the node's capacity (cpu, memory, pods, ephemeral-storage).
	Capacity corev1.ResourceList `json:"capacity,omitempty"`
	// NodeAddresses, a CIDR, gives each node its own InternalIP: node i
	// takes the (i+1)-th address of the range (with several nodes; a
	// single node takes the first). The kubelet API serves every node on
	// its one listener and tells them apart by the address a request was
	// sent to, so metrics-server scrapes each node's own stats. The
	// addresses must route to this host (all of 127.0.0.0/8 does).
	// Default empty: every node has `address`.
	NodeAddresses string `json:"nodeAddresses,omitempty"`
	// Zones spreads the nodes over zones: node i gets the label
	// topology.kubernetes.io/zone=zones[i % len(zones)], by its index and
	// not by shard, so every shard agrees. Default none: no zone label.
	Zones []string `json:"zones,omitempty"`
	// Region, when set, is every node's topology.kubernetes.io/region
	// label. Default none.
	Region string `json:"region,omitempty"`
	// InstanceType is every node's node.kubernetes.io/instance-type label.
	// Default nodelet-sim.
	InstanceType string `json:"instanceType,omitempty"`
	// Usage is how the pods use CPU and memory, as /stats/summary and
	// /metrics/resource report it. A pod's annotations
	// sim.nodelet.io/cpu-usage and sim.nodelet.io/memory-usage (quantities,
	// for the whole pod) set its usage outright, and may be changed while
	// it runs.
	Usage SimUsage `json:"usage,omitempty"`
	// Stages are YAML files, or directories of them, holding kwok's Stage
	// objects (kwok.x-k8s.io/v1alpha1; other kinds, such as a
	// KwokConfiguration in the same file, are skipped). Their stages for
	// Pods play the pods' lifecycles, as kwok plays them, in place of
	// startDelay, startJitter, deleteDelay, deleteJitter, completeRatio,
	// failRatio, runDuration and runJitter, which must then be left
	// unset. Default none: the built-in lifecycle.
	// The same files may hold kwok's Logs, Exec, PortForward and
	// ResourceUsage objects and their Cluster kinds, as a kwok --config
	// file does: they say what the pods' logs, exec, port-forward and
	// usage are (see docs/kwok.md).
	Stages []string `json:"stages,omitempty"`
	// EnableCRDs names kwok's CRDs whose objects in the cluster the sim
	// provider follows, as kwok's --enable-crds: "Stage", and "Logs",
	// "ClusterLogs", "Exec", "ClusterExec", "Attach", "ClusterAttach",
	// "PortForward", "ClusterPortForward", "ResourceUsage",
	// "ClusterResourceUsage", whose
	// objects are followed live beside those of the stages' files. With
	// Stage, the Stage objects of the cluster (stages.kwok.x-k8s.io) are
	// watched and played after those of stages, live: a pod created while
	// there are stages for Pods is played by them, one created while there
	// are none by the settings above. A Stage that does not compile is
	// left out, with an Event on it. Default none.
	EnableCRDs []string `json:"enableCRDs,omitempty"`
}

// CRDStage is kwok's Stage CRD; the others of sim.enableCRDs are
// simrules.Kinds.
const CRDStage = "Stage"

// SupportedCRDs are the kinds sim.enableCRDs accepts.
func SupportedCRDs() []string {
	out := []string{CRDStage}
	for _, k := range simrules.Kinds {
		out = append(out, k.Name)
	}
	return out
}

// SimUsage is how simulated pods use CPU and memory when no annotation
// says.
type SimUsage struct {
	// CPURequestRatio and MemoryRequestRatio are the shares of its
	// requests each container uses (a container without a request counts
	// as requesting 100m and 128Mi). Default 0.5 each.
	CPURequestRatio    *float64 `json:"cpuRequestRatio,omitempty"`
	MemoryRequestRatio *float64 `json:"memoryRequestRatio,omitempty"`
	// Noise, in [0, 1], varies each sample by up to that share either
	// way. Default 0.
	Noise float64 `json:"noise,omitempty"`
}

// SimNodeCondition is a node condition that a share of the simulated
// nodes shows for `for` out of every `every`, each node at its own offset
// in the period so that they do not all flip together. Which nodes and
// which offsets are decided by a hash of the node name and the entry's
// index, so an agent restart does not change them; nodelet reports the
// node status at each flip.
type SimNodeCondition struct {
	// Type is the condition type: Ready, MemoryPressure, DiskPressure,
	// PIDPressure or any other. Required. Outside the window the four
	// standard conditions are healthy; a condition of another type shows
	// the opposite status (False, or True when status is False).
	Type corev1.NodeConditionType `json:"type"`
	// Status is the condition's status during the window: True, False or
	// Unknown. Default False for Ready, True for any other type.
	Status corev1.ConditionStatus `json:"status,omitempty"`
	// Reason is the condition's reason during the window; it replaces the
	// healthy one (Ready False shows it instead of KubeletReady). Default
	// Simulated.
	Reason string `json:"reason,omitempty"`
	// Message is the condition's message during the window. Default: a
	// message that says the condition is simulated, and on which schedule.
	Message string `json:"message,omitempty"`
	// Every is the period. Required.
	Every metav1.Duration `json:"every"`
	// For is how long the condition shows in each period, at most every
	// (equal to every: all the time). Required.
	For metav1.Duration `json:"for"`
	// NodeRatio is the share of nodes, in [0, 1], that show the condition.
	// Default 1.
	NodeRatio *float64 `json:"nodeRatio,omitempty"`
}

// Default returns the configuration with every default filled in.
func Default() *Config {
	c := &Config{}
	SetDefaults(c)
	return c
}

// SetDefaults fills in every unset field. It is the one place defaults live.
func SetDefaults(c *Config) {
	if c.APIVersion == "" {
		c.APIVersion = APIVersion
	}
	if c.Kind == "" {
		c.Kind = Kind
	}
	if c.Provider == "" {
		c.Provider = ProviderSim
	}
	if c.NodeLeaseDurationSeconds == 0 {
		c.NodeLeaseDurationSeconds = 40
	}
	setDuration(&c.NodeStatusReportFrequency, 5*time.Minute)
	setDuration(&c.PingInterval, 10*time.Second)
	if c.ShardGroup == "" {
		c.ShardGroup = "nodelet"
	}
	setDuration(&c.PodStatusPollInterval, 5*time.Second)
	// High enough not to throttle thousands of nodes on a local control
	// plane; lower them to share a production API server.
	if c.KubeAPIQPS == 0 {
		c.KubeAPIQPS = 5000
	}
	if c.KubeAPIBurst == 0 {
		c.KubeAPIBurst = 10000
	}
	if c.ContentType == "" {
		c.ContentType = ContentTypeProtobuf
	}
	if c.PodWorkers == 0 {
		c.PodWorkers = 64
	}
	if c.Address == "" {
		c.Address = "127.0.0.1"
	}
	if c.Port == 0 {
		c.Port = 10250
	}
	if c.HealthzBindAddress == "" {
		c.HealthzBindAddress = "127.0.0.1"
	}
	if c.RootDir == "" {
		c.RootDir = "/var/lib/nodelet"
	}
	if c.MaxPods == 0 {
		c.MaxPods = 110
	}
	if c.ContainerRuntimeEndpoint == "" {
		c.ContainerRuntimeEndpoint = "unix:///run/containerd/containerd.sock"
	}
	setDuration(&c.RuntimeRequestTimeout, 2*time.Minute)
	if c.ClusterDomain == "" {
		c.ClusterDomain = "cluster.local"
	}
	if c.ResolvConf == "" {
		c.ResolvConf = "/etc/resolv.conf"
	}
	if c.PodLogsDir == "" {
		c.PodLogsDir = "/var/log/pods"
	}
	if c.ImageGCHighThresholdPercent == 0 {
		c.ImageGCHighThresholdPercent = 85
	}
	if c.ImageGCLowThresholdPercent == 0 {
		c.ImageGCLowThresholdPercent = 80
	}
	setDuration(&c.ImageMinimumGCAge, 2*time.Minute)
	if c.ContainerLogMaxSize.IsZero() {
		c.ContainerLogMaxSize = resource.MustParse("10Mi")
	}
	if c.ContainerLogMaxFiles == 0 {
		c.ContainerLogMaxFiles = 5
	}
	setDuration(&c.VolumeSyncPeriod, 10*time.Second)
	setDuration(&c.FileCheckFrequency, 20*time.Second)
	setDuration(&c.HTTPCheckFrequency, 20*time.Second)
	setDuration(&c.ConfigTrialDuration, 10*time.Minute)
	// As the kubelet: the default hard thresholds only when none is set,
	// never merged into the user's.
	if c.EvictionHard == nil {
		c.EvictionHard = DefaultEvictionHard()
	}
	setDuration(&c.EvictionPressureTransitionPeriod, 5*time.Minute)
	if c.Authentication.Webhook.Enabled == nil {
		yes := true
		c.Authentication.Webhook.Enabled = &yes
	}
	if c.AttachDetach.Enabled == nil {
		yes := true
		c.AttachDetach.Enabled = &yes
	}
	if c.AttachDetach.Attacher == "" {
		c.AttachDetach.Attacher = AttacherCSI
	}
	setDuration(&c.AttachDetach.ReconcilerLoopPeriod, 100*time.Millisecond)
	setDuration(&c.AttachDetach.ReconcilerSyncPeriod, time.Minute)
	setDuration(&c.AttachDetach.MaxWaitForUnmount, 6*time.Minute)
	if c.Sim.PodCIDR == "" {
		c.Sim.PodCIDR = "100.64.0.0/10"
	}
	if c.Sim.InstanceType == "" {
		c.Sim.InstanceType = "nodelet-sim"
	}
	for _, r := range []**float64{&c.Sim.Usage.CPURequestRatio, &c.Sim.Usage.MemoryRequestRatio} {
		if *r == nil {
			half := 0.5
			*r = &half
		}
	}
	if c.Sim.CompleteRatio > 0 || c.Sim.FailRatio > 0 {
		setDuration(&c.Sim.RunDuration, 10*time.Second)
	}
	for i := range c.Sim.NodeConditions {
		nc := &c.Sim.NodeConditions[i]
		if nc.Status == "" {
			nc.Status = corev1.ConditionTrue
			if nc.Type == corev1.NodeReady {
				nc.Status = corev1.ConditionFalse
			}
		}
		if nc.Reason == "" {
			nc.Reason = "Simulated"
		}
		if nc.NodeRatio == nil {
			one := 1.0
			nc.NodeRatio = &one
		}
	}
	defaults := corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse("32"),
		corev1.ResourceMemory:           resource.MustParse("256Gi"),
		corev1.ResourcePods:             resource.MustParse("110"),
		corev1.ResourceEphemeralStorage: resource.MustParse("1Ti"),
	}
	if c.Sim.Capacity == nil {
		c.Sim.Capacity = corev1.ResourceList{}
	}
	for name, q := range defaults {
		if _, ok := c.Sim.Capacity[name]; !ok {
			c.Sim.Capacity[name] = q
		}
	}
}

// DefaultEvictionHard returns the kubelet's default hard eviction
// thresholds (Linux).
func DefaultEvictionHard() map[string]string {
	return map[string]string{
		"memory.available":   "100Mi",
		"nodefs.available":   "10%",
		"nodefs.inodesFree":  "5%",
		"imagefs.available":  "15%",
		"imagefs.inodesFree": "5%",
	}
}

func setDuration(d *metav1.Duration, def time.Duration) {
	if d.Duration == 0 {
		d.Duration = def
	}
}

// Validate returns every error in c, each with its field path.
func (c *Config) Validate() field.ErrorList {
	var errs field.ErrorList
	if c.APIVersion != APIVersion {
		errs = append(errs, field.NotSupported(field.NewPath("apiVersion"), c.APIVersion, []string{APIVersion}))
	}
	if c.Kind != Kind {
		errs = append(errs, field.NotSupported(field.NewPath("kind"), c.Kind, []string{Kind}))
	}
	switch {
	case c.NodeName == "" && (c.Provider != ProviderSim || c.Nodes > 0):
		errs = append(errs, field.Required(field.NewPath("nodeName"), "set --node-name or nodeName in the config file"))
	case c.NodeName == "":
	default:
		for _, msg := range utilvalidation.IsDNS1123Subdomain(c.NodeName) {
			errs = append(errs, field.Invalid(field.NewPath("nodeName"), c.NodeName, msg))
		}
	}
	if c.Nodes < 0 {
		errs = append(errs, field.Invalid(field.NewPath("nodes"), c.Nodes, "must not be negative"))
	}
	switch {
	case c.Shard == ShardAuto:
		if !c.TakesOverNodes() {
			errs = append(errs, field.Invalid(field.NewPath("shard"), c.Shard, "--shard auto splits the Nodes taken over: set --manage-all-nodes or a --manage-nodes-with-… selector"))
		}
		if c.Nodes > 0 {
			errs = append(errs, field.Invalid(field.NewPath("shard"), c.Shard, "--shard auto splits the Nodes taken over, not the agent's own (--nodes): use --shard i/n for those"))
		}
	case c.Shard != "":
		if _, _, err := ParseShard(c.Shard); err != nil {
			errs = append(errs, field.Invalid(field.NewPath("shard"), c.Shard, err.Error()))
		}
	}
	if c.ShardGroup != "" {
		for _, msg := range utilvalidation.IsDNS1123Label(c.ShardGroup) {
			errs = append(errs, field.Invalid(field.NewPath("shardGroup"), c.ShardGroup, "--shard-group: "+msg))
		}
	}
	errs = append(errs, c.validateTakeOver()...)
	switch c.Provider {
	case ProviderSim:
	case ProviderProcess, ProviderCRI:
		if c.Nodes > 0 {
			errs = append(errs, field.Invalid(field.NewPath("nodes"), c.Nodes, "the "+c.Provider+" provider runs one node per host: must be 0"))
		}
	default:
		errs = append(errs, field.NotSupported(field.NewPath("provider"), c.Provider, []string{ProviderSim, ProviderProcess, ProviderCRI}))
	}
	if !strings.HasPrefix(c.ContainerRuntimeEndpoint, "unix://") || len(c.ContainerRuntimeEndpoint) == len("unix://") {
		errs = append(errs, field.Invalid(field.NewPath("containerRuntimeEndpoint"), c.ContainerRuntimeEndpoint, "must be unix:///path/to/socket"))
	}
	if c.RuntimeRequestTimeout.Duration <= 0 {
		errs = append(errs, field.Invalid(field.NewPath("runtimeRequestTimeout"), c.RuntimeRequestTimeout.Duration.String(), "must be greater than 0"))
	}
	for i, s := range c.AllowedUnsafeSysctls {
		if s == "" || strings.Contains(strings.TrimSuffix(s, "*"), "*") {
			errs = append(errs, field.Invalid(field.NewPath("allowedUnsafeSysctls").Index(i), s, `must be a sysctl name, or a prefix ending in "*"`))
		}
	}
	for i, ip := range c.ClusterDNS {
		if net.ParseIP(ip) == nil {
			errs = append(errs, field.Invalid(field.NewPath("clusterDNS").Index(i), ip, "must be an IP address"))
		}
	}
	if c.ImageGCHighThresholdPercent < 0 || c.ImageGCHighThresholdPercent > 100 {
		errs = append(errs, field.Invalid(field.NewPath("imageGCHighThresholdPercent"), c.ImageGCHighThresholdPercent, "must be between 0 and 100"))
	}
	if c.ImageGCLowThresholdPercent < 0 || c.ImageGCLowThresholdPercent >= c.ImageGCHighThresholdPercent {
		errs = append(errs, field.Invalid(field.NewPath("imageGCLowThresholdPercent"), c.ImageGCLowThresholdPercent, "must be at least 0 and less than imageGCHighThresholdPercent"))
	}
	if !filepath.IsAbs(c.PodLogsDir) {
		errs = append(errs, field.Invalid(field.NewPath("podLogsDir"), c.PodLogsDir, "must be an absolute path"))
	}
	for name, cg := range map[string]string{"runtimeCgroups": c.RuntimeCgroups, "systemCgroups": c.SystemCgroups} {
		if cg != "" && (!filepath.IsAbs(cg) || cg == "/") {
			errs = append(errs, field.Invalid(field.NewPath(name), cg, "must be an absolute cgroup path other than the root"))
		}
	}
	if !filepath.IsAbs(c.RootDir) {
		errs = append(errs, field.Invalid(field.NewPath("rootDir"), c.RootDir, "must be an absolute path"))
	}
	if c.MaxPods <= 0 {
		errs = append(errs, field.Invalid(field.NewPath("maxPods"), c.MaxPods, "must be greater than 0"))
	}
	if c.ContainerLogMaxSize.Sign() <= 0 {
		errs = append(errs, field.Invalid(field.NewPath("containerLogMaxSize"), c.ContainerLogMaxSize.String(), "must be greater than 0"))
	}
	if c.ContainerLogMaxFiles < 2 {
		errs = append(errs, field.Invalid(field.NewPath("containerLogMaxFiles"), c.ContainerLogMaxFiles, "must be at least 2"))
	}
	if (c.StaticPodPath != "" || c.StaticPodURL != "") && !c.RunsHostPods() {
		errs = append(errs, field.Invalid(field.NewPath("provider"), c.Provider, "static pods (staticPodPath, staticPodURL) need the process or cri provider"))
	}
	if c.StaticPodPath != "" && !filepath.IsAbs(c.StaticPodPath) {
		errs = append(errs, field.Invalid(field.NewPath("staticPodPath"), c.StaticPodPath, "must be an absolute path"))
	}
	if c.StaticPodURL != "" {
		if u, err := url.Parse(c.StaticPodURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, field.Invalid(field.NewPath("staticPodURL"), c.StaticPodURL, "must be an http or https URL"))
		}
	}
	if c.VolumeSyncPeriod.Duration <= 0 {
		errs = append(errs, field.Invalid(field.NewPath("volumeSyncPeriod"), c.VolumeSyncPeriod.Duration.String(), "must be greater than 0"))
	}
	if (c.TLSCertFile == "") != (c.TLSPrivateKeyFile == "") {
		errs = append(errs, field.Required(field.NewPath("tlsPrivateKeyFile"), "tlsCertFile and tlsPrivateKeyFile are set together"))
	}
	if c.ServerTLSBootstrap && c.TLSCertFile != "" {
		errs = append(errs, field.Invalid(field.NewPath("serverTLSBootstrap"), c.ServerTLSBootstrap, "cannot be combined with tlsCertFile: the serving certificate is either requested or given"))
	}
	for name, list := range map[string]corev1.ResourceList{"systemReserved": c.SystemReserved, "kubeReserved": c.KubeReserved} {
		for r, q := range list {
			if q.Sign() < 0 {
				errs = append(errs, field.Invalid(field.NewPath(name).Key(string(r)), q.String(), "must not be negative"))
			}
		}
	}
	for k, v := range c.NodeLabels {
		p := field.NewPath("nodeLabels").Key(k)
		for _, msg := range utilvalidation.IsQualifiedName(k) {
			errs = append(errs, field.Invalid(p, k, msg))
		}
		for _, msg := range utilvalidation.IsValidLabelValue(v) {
			errs = append(errs, field.Invalid(p, v, msg))
		}
	}
	for i, t := range c.RegisterWithTaints {
		p := field.NewPath("registerWithTaints").Index(i)
		for _, msg := range utilvalidation.IsQualifiedName(t.Key) {
			errs = append(errs, field.Invalid(p.Child("key"), t.Key, msg))
		}
		switch t.Effect {
		case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		default:
			errs = append(errs, field.NotSupported(p.Child("effect"), t.Effect, []string{"NoSchedule", "PreferNoSchedule", "NoExecute"}))
		}
	}
	if c.NodeLeaseDurationSeconds <= 0 {
		errs = append(errs, field.Invalid(field.NewPath("nodeLeaseDurationSeconds"), c.NodeLeaseDurationSeconds, "must be greater than 0"))
	}
	for _, d := range []struct {
		name string
		v    metav1.Duration
	}{
		{"nodeStatusReportFrequency", c.NodeStatusReportFrequency},
		{"pingInterval", c.PingInterval},
		{"podStatusPollInterval", c.PodStatusPollInterval},
		{"fileCheckFrequency", c.FileCheckFrequency},
		{"httpCheckFrequency", c.HTTPCheckFrequency},
		{"configTrialDuration", c.ConfigTrialDuration},
	} {
		if d.v.Duration <= 0 {
			errs = append(errs, field.Invalid(field.NewPath(d.name), d.v.Duration.String(), "must be greater than 0"))
		}
	}
	if c.KubeAPIQPS < 0 {
		errs = append(errs, field.Invalid(field.NewPath("kubeAPIQPS"), c.KubeAPIQPS, "must not be negative"))
	}
	if c.KubeAPIBurst < 0 {
		errs = append(errs, field.Invalid(field.NewPath("kubeAPIBurst"), c.KubeAPIBurst, "must not be negative"))
	}
	if c.ContentType != ContentTypeProtobuf && c.ContentType != ContentTypeJSON {
		errs = append(errs, field.NotSupported(field.NewPath("contentType"), c.ContentType, []string{ContentTypeProtobuf, ContentTypeJSON}))
	}
	if c.PodWorkers <= 0 {
		errs = append(errs, field.Invalid(field.NewPath("podWorkers"), c.PodWorkers, "must be greater than 0"))
	}
	if q := c.GoMemoryLimit; q != nil && q.Sign() <= 0 {
		errs = append(errs, field.Invalid(field.NewPath("goMemoryLimit"), q.String(), "must be greater than 0 (unset for no limit)"))
	}
	if p := c.GoGCPercent; p != nil {
		switch {
		case *p < -1:
			errs = append(errs, field.Invalid(field.NewPath("goGCPercent"), *p, "must be -1 (off) or at least 0"))
		case *p == -1 && c.GoMemoryLimit == nil:
			errs = append(errs, field.Invalid(field.NewPath("goGCPercent"), *p, "-1 turns the garbage collector off: set goMemoryLimit too, or the heap grows without bound"))
		}
	}
	if c.Port <= 0 || c.Port > 65535 {
		errs = append(errs, field.Invalid(field.NewPath("port"), c.Port, "must be between 1 and 65535"))
	}
	for _, msg := range utilvalidation.IsValidIP(field.NewPath("address"), c.Address) {
		errs = append(errs, msg)
	}
	if c.HealthzPort < 0 || c.HealthzPort > 65535 {
		errs = append(errs, field.Invalid(field.NewPath("healthzPort"), c.HealthzPort, "must be between 0 (off) and 65535"))
	}
	for _, msg := range utilvalidation.IsValidIP(field.NewPath("healthzBindAddress"), c.HealthzBindAddress) {
		errs = append(errs, msg)
	}
	if c.ReadOnlyPort < 0 || c.ReadOnlyPort > 65535 {
		errs = append(errs, field.Invalid(field.NewPath("readOnlyPort"), c.ReadOnlyPort, "must be between 0 (off) and 65535"))
	} else if c.ReadOnlyPort != 0 && c.ReadOnlyPort == c.Port {
		errs = append(errs, field.Invalid(field.NewPath("readOnlyPort"), c.ReadOnlyPort, "must differ from port"))
	}
	errs = append(errs, eviction.ValidateThresholds(c.EvictionHard, c.EvictionSoft, c.EvictionSoftGracePeriod, c.EvictionMinimumReclaim)...)
	if c.EvictionPressureTransitionPeriod.Duration < 0 {
		errs = append(errs, field.Invalid(field.NewPath("evictionPressureTransitionPeriod"), c.EvictionPressureTransitionPeriod.Duration.String(), "must not be negative"))
	}
	if c.EvictionMaxPodGracePeriod < 0 {
		errs = append(errs, field.Invalid(field.NewPath("evictionMaxPodGracePeriod"), c.EvictionMaxPodGracePeriod, "must not be negative"))
	}
	errs = append(errs, c.validateShutdown()...)
	errs = append(errs, c.AttachDetach.validate(field.NewPath("attachDetach"))...)
	errs = append(errs, c.Sim.validate(field.NewPath("sim"))...)
	return errs
}

// ShutdownGracePeriodByPodPriority is the shutdown time of the pods of a
// priority and above (up to the next range), as the kubelet's.
type ShutdownGracePeriodByPodPriority struct {
	Priority                   int32 `json:"priority"`
	ShutdownGracePeriodSeconds int64 `json:"shutdownGracePeriodSeconds"`
}

func (c *Config) validateShutdown() field.ErrorList {
	var errs field.ErrorList
	grace, critical := c.ShutdownGracePeriod.Duration, c.ShutdownGracePeriodCriticalPods.Duration
	if grace < 0 {
		errs = append(errs, field.Invalid(field.NewPath("shutdownGracePeriod"), grace.String(), "must not be negative"))
	}
	if critical < 0 || critical > max(grace, 0) {
		errs = append(errs, field.Invalid(field.NewPath("shutdownGracePeriodCriticalPods"), critical.String(),
			"must be between 0 and shutdownGracePeriod"))
	}
	byPriority := field.NewPath("shutdownGracePeriodByPodPriority")
	if len(c.ShutdownGracePeriodByPodPriority) > 0 && (grace != 0 || critical != 0) {
		errs = append(errs, field.Forbidden(byPriority, "cannot be set with shutdownGracePeriod or shutdownGracePeriodCriticalPods"))
	}
	seen := map[int32]bool{}
	for i, g := range c.ShutdownGracePeriodByPodPriority {
		if seen[g.Priority] {
			errs = append(errs, field.Duplicate(byPriority.Index(i).Child("priority"), g.Priority))
		}
		seen[g.Priority] = true
		if g.ShutdownGracePeriodSeconds < 0 {
			errs = append(errs, field.Invalid(byPriority.Index(i).Child("shutdownGracePeriodSeconds"), g.ShutdownGracePeriodSeconds, "must not be negative"))
		}
	}
	if (grace > 0 || len(c.ShutdownGracePeriodByPodPriority) > 0) && !c.RunsHostPods() {
		errs = append(errs, field.Invalid(field.NewPath("shutdownGracePeriod"), grace.String(),
			"graceful node shutdown needs a provider of this host's pods (process or cri)"))
	}
	return errs
}

func (a *AttachDetachConfig) validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch a.Attacher {
	case AttacherCSI, AttacherSim:
	default:
		errs = append(errs, field.NotSupported(p.Child("attacher"), a.Attacher, []string{AttacherCSI, AttacherSim}))
	}
	for _, d := range []struct {
		name   string
		v      metav1.Duration
		zeroOK bool
	}{
		{name: "reconcilerLoopPeriod", v: a.ReconcilerLoopPeriod},
		{name: "reconcilerSyncPeriod", v: a.ReconcilerSyncPeriod},
		{name: "maxWaitForUnmount", v: a.MaxWaitForUnmount},
		{name: "simLatency", v: a.SimLatency, zeroOK: true},
	} {
		switch {
		case d.v.Duration < 0:
			errs = append(errs, field.Invalid(p.Child(d.name), d.v.Duration.String(), "must not be negative"))
		case d.v.Duration == 0 && !d.zeroOK:
			errs = append(errs, field.Invalid(p.Child(d.name), d.v.Duration.String(), "must be greater than 0"))
		}
	}
	errs = append(errs, validateRatio(p.Child("simFailureRate"), a.SimFailureRate)...)
	return errs
}

func (s *SimConfig) validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range utilvalidation.IsValidCIDR(p.Child("podCIDR"), s.PodCIDR) {
		errs = append(errs, msg)
	}
	for _, d := range []struct {
		name string
		v    metav1.Duration
	}{
		{"startDelay", s.StartDelay},
		{"startJitter", s.StartJitter},
		{"deleteDelay", s.DeleteDelay},
		{"deleteJitter", s.DeleteJitter},
		{"runDuration", s.RunDuration},
		{"runJitter", s.RunJitter},
	} {
		if d.v.Duration < 0 {
			errs = append(errs, field.Invalid(p.Child(d.name), d.v.Duration.String(), "must not be negative"))
		}
	}
	errs = append(errs, validateRatio(p.Child("completeRatio"), s.CompleteRatio)...)
	errs = append(errs, validateRatio(p.Child("failRatio"), s.FailRatio)...)
	// A little slack for sums such as 0.7 + 0.3 that round above 1.
	if sum := s.CompleteRatio + s.FailRatio; sum > 1+1e-9 {
		errs = append(errs, field.Invalid(p.Child("failRatio"), s.FailRatio, fmt.Sprintf("completeRatio + failRatio must not exceed 1 (is %v)", sum)))
	}
	for i := range s.NodeConditions {
		errs = append(errs, s.NodeConditions[i].validate(p.Child("nodeConditions").Index(i))...)
	}
	errs = append(errs, s.validateStages(p)...)
	for i, crd := range s.EnableCRDs {
		if !slices.Contains(SupportedCRDs(), crd) {
			errs = append(errs, field.NotSupported(p.Child("enableCRDs").Index(i), crd, SupportedCRDs()))
		}
	}
	if s.NodeAddresses != "" {
		for _, msg := range utilvalidation.IsValidCIDR(p.Child("nodeAddresses"), s.NodeAddresses) {
			errs = append(errs, msg)
		}
	}
	seen := map[string]bool{}
	for i, z := range s.Zones {
		zp := p.Child("zones").Index(i)
		switch {
		case z == "":
			errs = append(errs, field.Invalid(zp, z, "must not be empty"))
		case seen[z]:
			errs = append(errs, field.Duplicate(zp, z))
		}
		seen[z] = true
		for _, msg := range utilvalidation.IsValidLabelValue(z) {
			errs = append(errs, field.Invalid(zp, z, msg))
		}
	}
	for _, l := range []struct{ name, v string }{{"region", s.Region}, {"instanceType", s.InstanceType}} {
		for _, msg := range utilvalidation.IsValidLabelValue(l.v) {
			errs = append(errs, field.Invalid(p.Child(l.name), l.v, msg))
		}
	}
	for _, r := range []struct {
		name string
		v    *float64
	}{{"cpuRequestRatio", s.Usage.CPURequestRatio}, {"memoryRequestRatio", s.Usage.MemoryRequestRatio}} {
		if r.v != nil && !(*r.v >= 0) { // NaN too
			errs = append(errs, field.Invalid(p.Child("usage", r.name), *r.v, "must not be negative"))
		}
	}
	errs = append(errs, validateRatio(p.Child("usage", "noise"), s.Usage.Noise)...)
	for name, q := range s.Capacity {
		if q.Sign() < 0 {
			errs = append(errs, field.Invalid(p.Child("capacity").Key(string(name)), q.String(), "must not be negative"))
		}
	}
	return errs
}

func (c *SimNodeCondition) validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if c.Type == "" {
		errs = append(errs, field.Required(p.Child("type"), "Ready, MemoryPressure, DiskPressure, PIDPressure or another condition type"))
	} else {
		for _, msg := range utilvalidation.IsQualifiedName(string(c.Type)) {
			errs = append(errs, field.Invalid(p.Child("type"), c.Type, msg))
		}
	}
	switch c.Status {
	case corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionUnknown:
	default:
		errs = append(errs, field.NotSupported(p.Child("status"), c.Status, []string{"True", "False", "Unknown"}))
	}
	if c.Every.Duration <= 0 {
		errs = append(errs, field.Invalid(p.Child("every"), c.Every.Duration.String(), "must be greater than 0"))
	}
	switch {
	case c.For.Duration <= 0:
		errs = append(errs, field.Invalid(p.Child("for"), c.For.Duration.String(), "must be greater than 0"))
	case c.Every.Duration > 0 && c.For.Duration > c.Every.Duration:
		errs = append(errs, field.Invalid(p.Child("for"), c.For.Duration.String(), "must not exceed every ("+c.Every.Duration.String()+")"))
	}
	if c.NodeRatio != nil {
		errs = append(errs, validateRatio(p.Child("nodeRatio"), *c.NodeRatio)...)
	}
	return errs
}

func validateRatio(p *field.Path, r float64) field.ErrorList {
	if r >= 0 && r <= 1 { // false for NaN
		return nil
	}
	return field.ErrorList{field.Invalid(p, r, "must be between 0 and 1")}
}

// ShardAuto is the shard of replicas that split the Nodes they take over
// among those alive.
const ShardAuto = "auto"

// KwokNodeSelector is the annotation selector of kwok's manifests, which
// a sim agent without nodes of its own takes over Nodes by.
const KwokNodeSelector = "kwok.x-k8s.io/node=fake"

// TakesOverNodes tells whether the agent takes over Nodes others create.
func (c *Config) TakesOverNodes() bool {
	return c.NodeSelection() != NodeSelection{}
}

// NodeSelection is which Nodes others create the agent takes over, by
// kwok's options.
type NodeSelection struct {
	All                 bool
	Single              string
	Annotations, Labels string
}

// NodeSelection is the Nodes the agent takes over, as kwok's options
// say: one by name, all, or by annotation and label selectors; kwok's
// annotation selector for a sim agent with neither a node of its own nor
// any of them.
func (c *Config) NodeSelection() NodeSelection {
	s := NodeSelection{All: c.ManageAllNodes, Single: c.ManageSingleNode,
		Annotations: c.ManageNodesWithAnnotationSelector, Labels: c.ManageNodesWithLabelSelector}
	if s == (NodeSelection{}) && c.NodeName == "" && c.Nodes == 0 && c.Provider == ProviderSim {
		s.Annotations = KwokNodeSelector
	}
	return s
}

// validateTakeOver checks kwok's options: the selectors parse, all
// conflicts with them (as in kwok), and only sim nodes are taken over.
func (c *Config) validateTakeOver() field.ErrorList {
	var errs field.ErrorList
	for _, sel := range []struct{ path, flag, value string }{
		{"manageNodesWithAnnotationSelector", "--manage-nodes-with-annotation-selector", c.ManageNodesWithAnnotationSelector},
		{"manageNodesWithLabelSelector", "--manage-nodes-with-label-selector", c.ManageNodesWithLabelSelector},
	} {
		if sel.value == "" {
			continue
		}
		if _, err := labels.Parse(sel.value); err != nil {
			errs = append(errs, field.Invalid(field.NewPath(sel.path), sel.value, sel.flag+": "+err.Error()))
		}
	}
	selectors := c.ManageNodesWithAnnotationSelector != "" || c.ManageNodesWithLabelSelector != ""
	if c.ManageSingleNode != "" {
		for _, msg := range utilvalidation.IsDNS1123Subdomain(c.ManageSingleNode) {
			errs = append(errs, field.Invalid(field.NewPath("manageSingleNode"), c.ManageSingleNode, "--manage-single-node: "+msg))
		}
		if c.ManageAllNodes || selectors {
			errs = append(errs, field.Invalid(field.NewPath("manageSingleNode"), c.ManageSingleNode,
				"--manage-single-node conflicts with --manage-all-nodes, --manage-nodes-with-annotation-selector and --manage-nodes-with-label-selector"))
		}
	}
	if c.ManageAllNodes && selectors {
		errs = append(errs, field.Invalid(field.NewPath("manageAllNodes"), true,
			"--manage-all-nodes conflicts with --manage-nodes-with-annotation-selector and --manage-nodes-with-label-selector"))
	}
	if c.TakesOverNodes() && c.Provider != ProviderSim {
		errs = append(errs, field.Invalid(field.NewPath("provider"), c.Provider,
			"only the sim provider takes over Nodes (--manage-all-nodes, --manage-nodes-with-…)"))
	}
	return errs
}

// ParseShard parses "i/n" with 0 <= i < n.
func ParseShard(s string) (index, count int, err error) {
	if _, err := fmt.Sscanf(s, "%d/%d", &index, &count); err != nil || fmt.Sprintf("%d/%d", index, count) != s {
		return 0, 0, errors.New(`must be "i/n", for example "0/2"`)
	}
	if count < 1 || index < 0 || index >= count {
		return 0, 0, errors.New("must have 0 <= i < n")
	}
	return index, count, nil
}

// LoadFile reads a config file with Decode: strictly, and every error names
// the file. The result is not defaulted.
func LoadFile(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config file: %w", err)
	}
	return Decode(data, "config file "+path)
}

// ErrInvalid marks a configuration that failed validation.
var ErrInvalid = errors.New("invalid configuration")

// ValidationError wraps field errors as one error.
func ValidationError(source string, errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w (%s): %v", ErrInvalid, source, errs.ToAggregate())
}

// validateStages loads and compiles the stage files: an error names the
// file, the stage and its field. Pod stages replace the pod lifecycle
// settings, which must then be unset.
func (s *SimConfig) validateStages(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	podStages := 0
	for i, path := range s.Stages {
		ip := p.Child("stages").Index(i)
		if path == "" {
			errs = append(errs, field.Invalid(ip, path, "must not be empty"))
			continue
		}
		l, err := stage.LoadLifecycle(path)
		if err != nil {
			errs = append(errs, field.Invalid(ip, path, err.Error()))
			continue
		}
		podStages += len(l.For("v1", "Pod"))
		// kwok's other kinds in the same files.
		if _, err := simrules.Load(nil, path); err != nil {
			errs = append(errs, field.Invalid(ip, path, err.Error()))
		}
	}
	if podStages == 0 {
		return errs
	}
	for _, d := range []struct {
		name string
		set  bool
	}{
		{"startDelay", s.StartDelay.Duration != 0}, {"startJitter", s.StartJitter.Duration != 0},
		{"deleteDelay", s.DeleteDelay.Duration != 0}, {"deleteJitter", s.DeleteJitter.Duration != 0},
		{"completeRatio", s.CompleteRatio != 0}, {"failRatio", s.FailRatio != 0},
		// runDuration defaults to 10s beside either ratio: that one is
		// said once.
		{"runDuration", s.RunDuration.Duration != 0 && s.CompleteRatio == 0 && s.FailRatio == 0},
		{"runJitter", s.RunJitter.Duration != 0},
	} {
		if d.set {
			errs = append(errs, field.Forbidden(p.Child(d.name), "must be unset when sim.stages has stages for Pods, which play the pods' lifecycles"))
		}
	}
	return errs
}
