// Package provider defines what nodelet asks of a runtime: the small
// interfaces a provider implements to run the pods bound to one node and to
// describe that node. Optional capabilities (status notification, restoring
// pods after an agent restart, logs, exec, stats) are separate interfaces
// found by type assertion.
//
// This package owns no behaviour and must never import the controllers or
// any other nodelet package. The kubelet's rules about a pod's spec that
// providers and loops apply alike (admission, QoS, sidecars, back-off,
// grace period, static pods) live in pkg/podrules, which does not import
// this package either: a provider turns an admission refusal into a
// Rejection itself.
package provider

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	corev1 "k8s.io/api/core/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// ErrNotFound is returned (wrapped or not) by a provider that does not know
// the pod asked for.
var ErrNotFound = errors.New("pod not found in provider")

// ErrNotSupported is returned (wrapped) by an optional capability
// (logs, exec, port-forward …) that the provider has but that does not
// apply to the pod asked about: the kubelet API answers as if the
// provider had no such capability.
var ErrNotSupported = errors.New("not supported by the provider")

// PodLifecycleHandler runs the pods bound to one node. Calls for different
// pods may come concurrently; calls for one pod never do. The pods passed in
// are the caller's copies: a provider may keep them, and the caller does not
// change them afterwards.
type PodLifecycleHandler interface {
	// CreatePod starts the pod. It returns once the pod is accepted; the pod
	// then progresses on its own and reports through its status.
	CreatePod(ctx context.Context, pod *corev1.Pod) error
	// UpdatePod applies the mutable fields of a pod that is already running.
	UpdatePod(ctx context.Context, pod *corev1.Pod) error
	// DeletePod begins stopping the pod, honouring its grace period
	// (pod.DeletionGracePeriodSeconds, else spec.terminationGracePeriodSeconds).
	// It returns without waiting: when the pod has terminated, GetPod reports
	// ErrNotFound and, for a PodNotifier, the final pod is notified.
	DeletePod(ctx context.Context, pod *corev1.Pod) error
	// GetPod returns the pod with its current status, or ErrNotFound. The
	// status is the caller's; the metadata and spec may be shared with the
	// provider's and are not to be changed.
	GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error)
	// GetPods returns every pod the provider runs (including those still
	// terminating), each with its current status, shared as GetPod's.
	GetPods(ctx context.Context) ([]*corev1.Pod, error)
}

// PodNotifier is implemented by providers that push pod status changes. The
// callback must be called with the pod whenever its status changes, and once
// more when a deleted pod has terminated; it never blocks. The pod it is
// given, status included, may be shared with the provider and is not to be
// changed: the provider copies what it would change of it afterwards, so
// that the callback may keep it without a copy.
// Providers without it are polled.
type PodNotifier interface {
	NotifyPods(ctx context.Context, notify func(*corev1.Pod))
}

// PodRestorer is implemented by providers that can take over a pod they lost
// (for example across an agent restart) from the status last reported to the
// API, without restarting its workload. Providers without it have lost pods
// recreated or failed according to the pod's restart policy.
type PodRestorer interface {
	RestorePod(ctx context.Context, pod *corev1.Pod) error
}

// PodSharer is implemented by a provider that changes no pod it is handed,
// nor anything a pod points to (it copies what it would change). The pod
// controller then hands it the informer cache's own pods instead of a copy
// of each, and, once the cache holds a newer object of a pod the provider
// runs (its status written, say), hands that over with UpdatePod, so that
// what the provider keeps of each pod is the cache's current object, not a
// second copy beside it.
type PodSharer interface {
	SharesPods()
}

// NodeProvider describes one node.
type NodeProvider interface {
	// Ping is a cheap health check, called every ping interval. An error
	// turns the node's Ready condition False with the error as its message.
	Ping(ctx context.Context) error
	// ConfigureNode fills in node.Status: capacity, allocatable, conditions,
	// addresses, nodeInfo and daemonEndpoints. It may add labels, and set
	// spec.podCIDR, spec.podCIDRs and spec.providerID, which nodelet writes
	// only when it registers the node and only where the Node has none (the
	// API never lets them change once set). It must not block; nodelet
	// owns the Ready condition's heartbeat and transition times.
	ConfigureNode(ctx context.Context, node *corev1.Node)
}

// NodeNotifier is implemented by node providers whose status changes on
// their own; notify asks nodelet to report the node's status now.
type NodeNotifier interface {
	NotifyNodeStatus(ctx context.Context, notify func())
}

// Rejection is returned by CreatePod for a pod the provider will never run
// (admission failure). Reason is a CamelCase word, Message says why; the pod is
// failed with both and not retried.
type Rejection struct {
	Reason  string
	Message string
}

func (r *Rejection) Error() string { return fmt.Sprintf("pod rejected: %s: %s", r.Reason, r.Message) }

// Reject builds a Rejection.
func Reject(reason, format string, args ...any) error {
	return &Rejection{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// Eviction says how the node stops and fails one of its pods, for node
// pressure or the node's shutdown: within Grace (a provider whose pods need
// none may ignore it), with the pod status's reason and message, and
// conditions added to its status (the kubelet's DisruptionTarget).
type Eviction struct {
	Grace           time.Duration
	Reason, Message string
	Conditions      []corev1.PodCondition
}

// Evicter is implemented by providers whose pods the node itself may stop
// and fail: node-pressure eviction and graceful node shutdown need it. Evict
// returns once the stop has begun; a pod that finished or is being deleted
// is left alone, and one the provider does not run is ErrNotFound.
type Evicter interface {
	Evict(pod *corev1.Pod, e Eviction) error
}

// Runner is implemented by providers that have a loop of their own
// (supervising a runtime, collecting images): the agent runs it for as long
// as it runs.
type Runner interface {
	Run(ctx context.Context) error
}

// ContainerLogOpts are the options of a container log request.
type ContainerLogOpts struct {
	Tail       int
	LimitBytes int
	Timestamps bool
	Follow     bool
	Previous   bool
	SinceSecs  int
	// SinceTime, when not zero, asks only for lines written at or after it.
	SinceTime time.Time
}

// LogsProvider serves container logs.
type LogsProvider interface {
	GetContainerLogs(ctx context.Context, namespace, pod, container string, opts ContainerLogOpts) (io.ReadCloser, error)
}

// AttachIO is the set of streams of an exec or attach session.
type AttachIO interface {
	Stdin() io.Reader
	Stdout() io.WriteCloser
	Stderr() io.WriteCloser
	TTY() bool
	Resize() <-chan TermSize
}

// TermSize is a terminal size change.
type TermSize struct {
	Width, Height uint16
}

// ExecProvider runs commands inside containers.
type ExecProvider interface {
	RunInContainer(ctx context.Context, namespace, pod, container string, cmd []string, attach AttachIO) error
}

// AttachProvider attaches to the main process of a running container.
type AttachProvider interface {
	AttachToContainer(ctx context.Context, namespace, pod, container string, attach AttachIO) error
}

// PortForwardProvider forwards one connection to a port of a pod: it copies
// between stream and the pod's port until either side closes or ctx ends.
type PortForwardProvider interface {
	PortForward(ctx context.Context, namespace, pod string, port int32, stream io.ReadWriteCloser) error
}

// StatsProvider reports the resource usage of the pods a provider runs, in
// the kubelet's summary API types: the basis of /stats/summary,
// /metrics/resource and node-pressure eviction.
type StatsProvider interface {
	// PodStats returns one sample of every pod that has a sandbox: its
	// reference, start time, CPU and memory, its containers' (with their
	// start times), and what it uses of the node's filesystems (ephemeral
	// storage, volumes) where the provider knows it. CPU figures carry
	// both the cumulative usage and the rate since the previous sample.
	PodStats(ctx context.Context) ([]statsv1alpha1.PodStats, error)
}

// ContainerCgroupsProvider is implemented by providers whose containers
// run in this host's cgroups: the kubelet API's /metrics/cadvisor reports
// their usage from there, as cAdvisor does for the kubelet.
type ContainerCgroupsProvider interface {
	// ContainerCgroups lists the running containers of the provider's
	// pods, and each pod's sandbox (Container "POD").
	ContainerCgroups(ctx context.Context) ([]ContainerCgroup, error)
}

// ContainerCgroup is one running container and where its cgroup is.
type ContainerCgroup struct {
	Namespace, Pod, Container string
	// ID is the runtime's container ID; Image the container's image.
	ID, Image string
	// Cgroup is the container's cgroup below each hierarchy's root
	// ("/kubepods/besteffort/pod<uid>/<id>").
	Cgroup    string
	StartTime time.Time
	// WritableLayerBytes is what the container wrote to its writable
	// layer, when the runtime says.
	WritableLayerBytes *uint64
	// FsDevice is the block device ("major:minor") its writable layer is
	// on, when known: the container's block I/O there is reported, as
	// zero until the cgroup has done some.
	FsDevice string
}

// SandboxContainer is the name ContainerCgroup gives a pod's sandbox, as
// cAdvisor names it.
const SandboxContainer = "POD"

// ImageFsStatsProvider is implemented by providers whose runtime keeps
// images on the node's disks: the summary reports the filesystems it keeps
// them and the containers' writable layers on (the same one for a runtime
// that does not split them), with what the runtime uses of each.
type ImageFsStatsProvider interface {
	ImageFsStats(ctx context.Context) (imageFs, containerFs *statsv1alpha1.FsStats, err error)
}

// NodeStatsProvider is implemented by providers that describe the node's
// usage themselves (the sim provider simulates it); for the others the
// node's figures are the host's.
type NodeStatsProvider interface {
	NodeStats(ctx context.Context) (statsv1alpha1.NodeStats, error)
}
