package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/pkg/provider"
)

// Runtime runs the sandboxes and containers of one node's pods. The
// lifecycle decides what runs when; the runtime only does what it is told
// and reports what it did, so that a restarted agent finds every pod again
// through Sandboxes.
type Runtime interface {
	// Sandboxes lists the sandboxes the runtime keeps for this node's pods,
	// running or not.
	Sandboxes(ctx context.Context) ([]Sandbox, error)
	// EnsureSandbox returns the pod's sandbox, started if it does not run.
	EnsureSandbox(ctx context.Context, spec SandboxSpec) (Sandbox, error)
	// RemoveSandbox stops whatever still runs in the pod's sandbox and
	// removes it with its containers. A sandbox that is gone is no error.
	RemoveSandbox(ctx context.Context, uid types.UID) error
	// OnExit registers the function called, without blocking, when a
	// container of a pod exits.
	OnExit(func(uid types.UID, container string))
}

// SandboxStopper is implemented by a runtime whose sandboxes hold what a
// pod that ended gives back before it is deleted (its network namespace
// and IPs, a pause process), as the kubelet stops a terminal pod's
// sandbox. StopSandbox stops whatever runs in the pod's sandbox, and its
// network, keeping its containers' records and logs; a sandbox stopped or
// gone is no error. A runtime without it keeps the sandbox until the pod
// is deleted.
type SandboxStopper interface {
	StopSandbox(ctx context.Context, uid types.UID) error
}

// Sandbox is one pod's sandbox: its containers' records and the calls that
// act on them. Container names are the pod's; one container runs one
// attempt at a time.
type Sandbox interface {
	UID() types.UID
	// Ready tells whether the sandbox runs, so containers can start in it.
	Ready() bool
	// IPs are the pod's IPs; none means the pod shares the node's network.
	IPs() []string
	// Container is the latest attempt of a container, Previous the one
	// before it; false when there is none.
	Container(name string) (ContainerStatus, bool)
	Previous(name string) (ContainerStatus, bool)
	// StartContainer creates and starts one attempt of a container. A
	// *WaitError says the container cannot start yet (an image to pull, a
	// configuration to fix); an error wrapping ErrSandboxGone says the
	// sandbox no longer runs and no attempt was made; any other error is
	// recorded as the attempt's exit, so the restart policy decides what
	// follows.
	StartContainer(ctx context.Context, spec ContainerSpec) error
	// StopContainer stops the running attempt of a container: SIGTERM,
	// then SIGKILL once grace has passed.
	StopContainer(ctx context.Context, name string, grace time.Duration) error
	// UpdateResources gives the running attempt of a container its
	// resources as c now has them (an in-place resize). ErrResizeUnsupported
	// says the runtime cannot: the container is restarted instead.
	UpdateResources(ctx context.Context, pod *corev1.Pod, c *corev1.Container) error
	// RemoveDeadBefore removes the exited attempts of a container older
	// than attempt, which neither its status nor its logs read any more; a
	// runtime whose dead attempts cost nothing may keep them.
	RemoveDeadBefore(ctx context.Context, name string, attempt int)
	// ExecSync runs argv in a running container, as probes and hooks do,
	// and returns its output (stdout and stderr, up to a bound) and exit
	// code.
	ExecSync(ctx context.Context, container string, argv []string) ([]byte, int, error)
	// Exec runs argv in a running container with the client's streams and
	// returns its exit code.
	Exec(ctx context.Context, container string, argv []string, streams StreamIO) (int, error)
	// Attach connects to the main process of a running container.
	Attach(ctx context.Context, container string, streams StreamIO) error
	// ReadLogs writes one attempt's log to w, as opts ask; with Follow it
	// returns once that attempt no longer runs and its log is read. It calls
	// opts.Opened once the log is open: an error before that (or before
	// the first write) is the request's answer, one after it ends the
	// stream.
	ReadLogs(ctx context.Context, container string, attempt int, opts LogOptions, w io.Writer) error
	// PortForward copies between stream and the pod's port until either
	// side closes or ctx ends.
	PortForward(ctx context.Context, port int32, stream io.ReadWriteCloser) error
}

// SandboxSpec is what a runtime makes a pod's sandbox from.
type SandboxSpec struct {
	Pod *corev1.Pod
}

// ContainerSpec is one attempt of a container, as the lifecycle resolved
// it: the environment built, $(VAR) references in the command and args
// expanded, volumes prepared on the host.
type ContainerSpec struct {
	Pod       *corev1.Pod
	Container *corev1.Container
	// Attempt is the restart count; the first attempt is 0.
	Attempt int
	// Command and Args are the container's, expanded; an empty Command
	// means the image's entrypoint.
	Command, Args []string
	Env           []string // "K=V"
	Mounts        []Mount
	// TargetContainer is, for an ephemeral container, the container whose
	// process namespace it joins; empty for none.
	TargetContainer string
}

// Mount binds a host file or directory into a container or, with Image,
// mounts an image volume the runtime sets up.
type Mount struct {
	// Source is the host file or directory (subPath already resolved);
	// empty for an image volume.
	Source string
	// Destination is the absolute path the container sees it at.
	Destination string
	ReadOnly    bool
	Propagation corev1.MountPropagationMode
	// RecursiveReadOnly is the volumeMount's recursiveReadOnly ("" when
	// unset): whether the mounts below Source are read-only too, as the
	// runtime supports (Enabled: it must; IfPossible: where it can).
	RecursiveReadOnly corev1.RecursiveReadOnlyMode
	// Image is the source of an image volume (spec.volumes[].image): the
	// runtime pulls its reference by its pull policy, with the pod's image
	// pull secrets, and mounts it read-only. A runtime without images
	// refuses the container.
	Image *corev1.ImageVolumeSource
	// ImageSubPath is the directory of the image to mount (the
	// volumeMount's subPath, or subPathExpr expanded); "" for the whole
	// image. The runtime resolves it inside the image.
	ImageSubPath string
}

// State of a container attempt.
type State string

const (
	StateRunning State = "Running"
	StateExited  State = "Exited"
)

// Reasons an attempt exited for, as the API reports them.
const (
	ReasonCompleted  = "Completed"
	ReasonError      = "Error"
	ReasonOOMKilled  = "OOMKilled"
	ReasonStartError = "StartError"
)

// ContainerStatus is the state of one container attempt.
type ContainerStatus struct {
	Name    string
	Attempt int
	// ID is the attempt's container ID as the API shows it
	// (<runtime>://<id>).
	ID    string
	State State
	// Image and ImageID are the image the attempt runs; empty for runtimes
	// without images.
	Image, ImageID string
	StartedAt      time.Time
	FinishedAt     time.Time
	ExitCode       int
	// Reason is "Completed" (code 0), "Error", "OOMKilled" or "StartError".
	Reason  string
	Message string
	Signal  int
	// Unknown: the runtime lost track of the attempt (a CRI runtime's
	// CONTAINER_UNKNOWN); it may even still run. As the kubelet does, it
	// is stopped and the container started again, whatever the restart
	// policy.
	Unknown bool
}

// StreamIO are the client's ends of an exec or attach session.
type StreamIO struct {
	Stdin          io.Reader // nil: no stdin
	Stdout, Stderr io.Writer // Stderr unused with TTY
	TTY            bool
	Resize         <-chan provider.TermSize
}

// LogOptions select what of a container log is read.
type LogOptions struct {
	Follow     bool
	Timestamps bool
	// TailLines < 0 reads every line.
	TailLines int
	// LimitBytes > 0 stops after that many bytes.
	LimitBytes int64
	// Since, when not zero, skips lines written before it.
	Since time.Time
	// Opened, when not nil, is called once the log is open, before it is
	// read: a followed log with no line yet is answered from then on.
	Opened func()
}

// ErrResizeUnsupported is returned by Sandbox.UpdateResources of a runtime
// that cannot change a running container's resources.
var ErrResizeUnsupported = errors.New("the runtime cannot resize a running container")

// ErrSandboxGone is wrapped by the error of Sandbox.StartContainer when
// the sandbox turns out not to run any more, though Ready may not tell yet
// (a sandbox found dying as its containers die with it). The runtime
// records no attempt: the worker sets up a new sandbox and starts the
// container there, as the kubelet never starts a container in a dead
// sandbox.
var ErrSandboxGone = errors.New("pod sandbox is gone")

// WaitError is a container that cannot start yet: it waits with Reason
// (for example ErrImagePull or CreateContainerConfigError) and Message, and
// is tried again after Retry (never, when 0: only a change of the pod can
// help). Warn records a Warning Event the first time for a reason.
type WaitError struct {
	Reason, Message string
	Retry           time.Duration
	Warn            bool
}

func (e *WaitError) Error() string { return fmt.Sprintf("%s: %s", e.Reason, e.Message) }

// replacement is the sandbox set up in place of one that died, with the
// dead one's records for each container that has not run in it yet: the
// pod goes on reporting how each container last ended, and its attempts
// go on counting, as a kubelet's pod status spans the pod's sandboxes.
type replacement struct {
	Sandbox
	dead Sandbox
}

func (r replacement) Container(name string) (ContainerStatus, bool) {
	if st, ok := r.Sandbox.Container(name); ok {
		return st, true
	}
	return r.dead.Container(name)
}

func (r replacement) Previous(name string) (ContainerStatus, bool) {
	latest, ok := r.Sandbox.Container(name)
	if !ok {
		return r.dead.Previous(name)
	}
	if st, ok := r.Sandbox.Previous(name); ok {
		return st, true
	}
	// A runtime that keeps a pod's records across its sandboxes has the
	// dead one's latest as the new one's.
	if st, ok := r.dead.Container(name); ok && st.Attempt < latest.Attempt {
		return st, true
	}
	return ContainerStatus{}, false
}

// ReadLogs reads an attempt from the sandbox that ran it.
func (r replacement) ReadLogs(ctx context.Context, container string, attempt int, opts LogOptions, w io.Writer) error {
	for _, records := range []func(string) (ContainerStatus, bool){r.Sandbox.Container, r.Sandbox.Previous} {
		if st, ok := records(container); ok && st.Attempt == attempt {
			return r.Sandbox.ReadLogs(ctx, container, attempt, opts, w)
		}
	}
	return r.dead.ReadLogs(ctx, container, attempt, opts, w)
}
