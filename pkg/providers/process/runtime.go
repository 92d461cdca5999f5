package process

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/pkg/hostnode"
	"github.com/nodelet/nodelet/pkg/lifecycle"
	"github.com/nodelet/nodelet/pkg/provider"
	"github.com/nodelet/nodelet/pkg/providers/process/sandbox"
)

// hostRuntime is the pod lifecycle's runtime over the host sandboxes of
// package sandbox. Pods share the host's network: a pod's IP is the node's
// address, and its ports are the host's.
type hostRuntime struct {
	sandboxes *sandbox.Manager
	address   string
}

var _ lifecycle.Runtime = hostRuntime{}

func (r hostRuntime) Sandboxes(ctx context.Context) ([]lifecycle.Sandbox, error) {
	list, err := r.sandboxes.Sandboxes(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]lifecycle.Sandbox, 0, len(list))
	for _, sb := range list {
		out = append(out, hostSandbox{sb: sb, address: r.address})
	}
	return out, nil
}

func (r hostRuntime) EnsureSandbox(ctx context.Context, spec lifecycle.SandboxSpec) (lifecycle.Sandbox, error) {
	pod := spec.Pod
	sb, err := r.sandboxes.EnsureSandbox(ctx, sandbox.SandboxSpec{
		UID: pod.UID, Namespace: pod.Namespace, Name: pod.Name, Hostname: pod.Name, Resources: podResources(pod),
	})
	if err != nil {
		return nil, err
	}
	return hostSandbox{sb: sb, address: r.address}, nil
}

func (r hostRuntime) RemoveSandbox(ctx context.Context, uid types.UID) error {
	return r.sandboxes.RemoveSandbox(ctx, uid)
}

func (r hostRuntime) OnExit(f func(uid types.UID, container string)) { r.sandboxes.OnExit(f) }

// hostSandbox is one pod's host sandbox.
type hostSandbox struct {
	sb      *sandbox.Sandbox
	address string
}

func (s hostSandbox) UID() types.UID { return s.sb.Spec().UID }
func (s hostSandbox) Ready() bool    { return s.sb.Alive() }
func (s hostSandbox) IPs() []string  { return nil }

func (s hostSandbox) Container(name string) (lifecycle.ContainerStatus, bool) {
	st, ok := s.sb.Container(name)
	return s.status(st), ok
}

func (s hostSandbox) Previous(name string) (lifecycle.ContainerStatus, bool) {
	st, ok := s.sb.Previous(name)
	return s.status(st), ok
}

// RemoveDeadBefore keeps the attempts: a dead one is a directory of
// records and logs, removed with the pod.
func (s hostSandbox) RemoveDeadBefore(context.Context, string, int) {}

// status is the lifecycle's view of an attempt; its ID names the pod, the
// container and the attempt.
func (s hostSandbox) status(st sandbox.ContainerStatus) lifecycle.ContainerStatus {
	return lifecycle.ContainerStatus{
		Name: st.Name, Attempt: st.Attempt,
		ID:        fmt.Sprintf("nodelet://%s/%s/%d", s.sb.Spec().UID, st.Name, st.Attempt),
		State:     lifecycle.State(st.State),
		StartedAt: st.StartedAt, FinishedAt: st.FinishedAt,
		ExitCode: st.ExitCode, Signal: st.Signal, Reason: st.Reason, Message: st.Message,
	}
}

// StartContainer runs the container's command and args from the host's
// filesystem: there is no image, so a container without a command, or one
// that mounts an image volume, cannot run; nor one whose mount must be
// read-only recursively. It runs as its security context
// asks (containerSecurity), or not at all.
func (s hostSandbox) StartContainer(ctx context.Context, spec lifecycle.ContainerSpec) error {
	c := spec.Container
	for _, m := range spec.Mounts {
		if m.Image != nil {
			// Refused at admission (admitImageVolumes); a pod an earlier
			// agent admitted and this one restored was not.
			return &lifecycle.WaitError{
				Reason:  "CreateContainerConfigError",
				Message: fmt.Sprintf("%s: image volumes are not supported by the process provider, which pulls no images", imageVolumeField(spec.Pod)),
				Warn:    true,
			}
		}
		// Its mounts are never read-only recursively: one that must be
		// cannot run.
		if _, err := lifecycle.RecursiveReadOnly(m, "process", false); err != nil {
			return &lifecycle.WaitError{Reason: "CreateContainerConfigError", Message: err.Error(), Retry: 10 * time.Second, Warn: true}
		}
	}
	if len(spec.Command) == 0 {
		return &lifecycle.WaitError{
			Reason: "CreateContainerError",
			Message: fmt.Sprintf("container %q has no command: the process provider runs the container's command and args from the host filesystem and does not pull image %q",
				c.Name, c.Image),
			Warn: true,
		}
	}
	sec, err := containerSecurity(spec.Pod, c, hostSecurity{AppArmor: hostnode.AppArmorEnabled(), Users: hostUsers})
	if err != nil {
		return &lifecycle.WaitError{Reason: "CreateContainerConfigError", Message: err.Error(), Retry: 10 * time.Second, Warn: true}
	}
	if !s.sb.AppliesSecurity() && asksSecurity(spec.Pod, c) {
		return &lifecycle.WaitError{
			Reason: "CreateContainerConfigError",
			Message: fmt.Sprintf("container %q sets a securityContext, which the pod's sandbox cannot apply: an earlier version of nodelet started it; delete the pod so that it runs in a new sandbox",
				c.Name),
			Retry: 10 * time.Second,
			Warn:  true,
		}
	}
	out := sandbox.ContainerSpec{
		Name:       c.Name,
		Attempt:    spec.Attempt,
		Args:       append(slices.Clone(spec.Command), spec.Args...),
		Env:        spec.Env,
		WorkingDir: c.WorkingDir,
		Resources:  resources(c),
		Stdin:      c.Stdin, StdinOnce: c.StdinOnce, TTY: c.TTY,
		Security: sec,
	}
	for _, m := range spec.Mounts {
		out.Mounts = append(out.Mounts, sandbox.Mount{Source: m.Source, Destination: m.Destination, ReadOnly: m.ReadOnly})
	}
	if err := s.sb.StartContainer(ctx, out); err != nil {
		if errors.Is(err, sandbox.ErrNotRunning) {
			// No attempt was made: the lifecycle sets up a new sandbox.
			return fmt.Errorf("%w: %w", lifecycle.ErrSandboxGone, err)
		}
		return err
	}
	return nil
}

func (s hostSandbox) StopContainer(ctx context.Context, name string, grace time.Duration) error {
	return s.sb.StopContainer(ctx, name, grace)
}

// UpdateResources: a host process keeps the resources it started with;
// the worker restarts it to resize it.
func (s hostSandbox) UpdateResources(context.Context, *corev1.Pod, *corev1.Container) error {
	return lifecycle.ErrResizeUnsupported
}

func (s hostSandbox) Exec(ctx context.Context, container string, argv []string, streams lifecycle.StreamIO) (int, error) {
	return s.sb.Exec(ctx, container, argv, streamIO(streams))
}

func (s hostSandbox) Attach(ctx context.Context, container string, streams lifecycle.StreamIO) error {
	return s.sb.Attach(ctx, container, streamIO(streams))
}

// streamIO hands the client's streams to the sandbox.
func streamIO(in lifecycle.StreamIO) sandbox.StreamIO {
	out := sandbox.StreamIO{Stdin: in.Stdin, Stdout: in.Stdout, Stderr: in.Stderr, TTY: in.TTY}
	if in.Resize != nil {
		sizes := make(chan sandbox.TermSize)
		go func() {
			defer close(sizes)
			for size := range in.Resize {
				sizes <- sandbox.TermSize{Width: size.Width, Height: size.Height}
			}
		}()
		out.Resize = sizes
	}
	return out
}

// ReadLogs reads the attempt's CRI-format log file; a followed log ends
// once the attempt no longer runs.
func (s hostSandbox) ReadLogs(ctx context.Context, container string, attempt int, opts lifecycle.LogOptions, w io.Writer) error {
	running := func() bool {
		cur, ok := s.sb.Container(container)
		return ok && cur.Attempt == attempt && cur.State == sandbox.StateRunning
	}
	return sandbox.ReadLogs(ctx, s.sb.LogDir(), s.sb.LogPath(container, attempt), sandbox.LogOptions{
		Follow: opts.Follow, Timestamps: opts.Timestamps, TailLines: opts.TailLines, Since: opts.Since, LimitBytes: opts.LimitBytes,
		Opened: opts.Opened,
	}, running, w)
}

// PortForward connects stream to the port on the node's address: the pod
// uses the host's network.
func (s hostSandbox) PortForward(ctx context.Context, port int32, stream io.ReadWriteCloser) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(s.address, strconv.Itoa(int(port))))
	if err != nil {
		return err
	}
	return provider.Forward(ctx, conn, stream)
}

// resources are a container's cgroup limits: its limits, and its CPU
// request for the CPU share.
func resources(c *corev1.Container) sandbox.Resources {
	var r sandbox.Resources
	if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
		r.MemoryLimitBytes = q.Value()
	}
	if q, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
		r.CPULimitMillis = q.MilliValue()
	}
	if q, ok := c.Resources.Requests[corev1.ResourceCPU]; ok {
		r.CPURequestMillis = q.MilliValue()
	}
	return r
}

// ExecSync runs argv with no input and keeps the first 10 KiB of its
// output.
func (s hostSandbox) ExecSync(ctx context.Context, container string, argv []string) ([]byte, int, error) {
	var out limitedBuffer
	code, err := s.sb.Exec(ctx, container, argv, sandbox.StreamIO{Stdin: bytes.NewReader(nil), Stdout: &out, Stderr: &out})
	return out.Bytes(), code, err
}

// limitedBuffer keeps the first 10 KiB written to it.
type limitedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := 10<<10 - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (b *limitedBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}
