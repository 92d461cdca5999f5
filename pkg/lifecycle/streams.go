package lifecycle

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	utilexec "k8s.io/utils/exec"

	"github.com/nodelet/nodelet/pkg/provider"
)

// What kubectl logs, exec, attach and port-forward reach through the
// kubelet API server.

// container finds a pod's sandbox and checks that it has the container.
func (m *Manager) container(namespace, pod, container string) (*podWorker, Sandbox, error) {
	w, err := m.worker(namespace, pod)
	if err != nil {
		return nil, nil, err
	}
	w.mu.Lock()
	sb, spec := w.sandbox, w.pod
	w.mu.Unlock()
	found := false
	for _, list := range [][]string{names(spec.Spec.InitContainers), names(spec.Spec.Containers), names(ephemeralContainers(spec))} {
		for _, n := range list {
			found = found || n == container
		}
	}
	if !found {
		return nil, nil, fmt.Errorf("container %s is not valid for pod %s/%s: %w", container, namespace, pod, provider.ErrNotFound)
	}
	if sb == nil {
		return nil, nil, fmt.Errorf("container %q in pod %s/%s is waiting to start: sandbox not ready", container, namespace, pod)
	}
	return w, sb, nil
}

// lastStateIs tells whether the container's last state, as the worker last
// reported it, is the run with that container ID.
func (w *podWorker) lastStateIs(container, id string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, list := range [][]corev1.ContainerStatus{w.status.InitContainerStatuses, w.status.ContainerStatuses, w.status.EphemeralContainerStatuses} {
		for _, cs := range list {
			if cs.Name == container {
				last := cs.LastTerminationState.Terminated
				return last != nil && id != "" && last.ContainerID == id
			}
		}
	}
	return false
}

// GetContainerLogs streams a container's log: the latest run, or with
// Previous the run of its last state, as the kubelet does: the one before
// the latest, but the latest itself while the container waits to restart.
func (m *Manager) GetContainerLogs(ctx context.Context, namespace, pod, container string, opts provider.ContainerLogOpts) (io.ReadCloser, error) {
	worker, sb, err := m.container(namespace, pod, container)
	if err != nil {
		return nil, err
	}
	st, ok := sb.Container(container)
	if opts.Previous && !(ok && worker.lastStateIs(container, st.ID)) {
		st, ok = sb.Previous(container)
		if !ok {
			return nil, fmt.Errorf("previous terminated container %q in pod %q not found", container, pod)
		}
	}
	if !ok {
		return nil, fmt.Errorf("container %q in pod %q is waiting to start", container, pod)
	}
	lo := LogOptions{Follow: opts.Follow, Timestamps: opts.Timestamps, TailLines: -1, LimitBytes: int64(opts.LimitBytes)}
	if opts.Tail > 0 {
		lo.TailLines = opts.Tail
	}
	if opts.SinceSecs > 0 {
		lo.Since = m.clock.Now().Add(-time.Duration(opts.SinceSecs) * time.Second)
	}
	if !opts.SinceTime.IsZero() {
		lo.Since = opts.SinceTime
	}
	// Answer an error of the reader (a log that is missing, or behind a
	// symbolic link) as such, until the log is open or its first line is
	// written: after that, the client has its answer and the stream ends.
	opened := make(chan struct{})
	var once sync.Once
	lo.Opened = func() { once.Do(func() { close(opened) }) }
	r, w := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := sb.ReadLogs(ctx, container, st.Attempt, lo, &openingWriter{w: w, opened: lo.Opened})
		done <- err
		w.CloseWithError(err)
	}()
	select {
	case <-opened:
	case err := <-done:
		select {
		case <-opened:
		default:
			if err != nil {
				return nil, err
			}
		}
	case <-ctx.Done():
		r.Close()
		return nil, ctx.Err()
	}
	return r, nil
}

// openingWriter calls opened before its first write, for sandboxes that
// read before they say the log is open.
type openingWriter struct {
	w      io.Writer
	opened func()
}

func (o *openingWriter) Write(p []byte) (int, error) {
	o.opened()
	return o.w.Write(p)
}

// RunInContainer runs cmd in the container, as kubectl exec does.
func (m *Manager) RunInContainer(ctx context.Context, namespace, pod, container string, cmd []string, attach provider.AttachIO) error {
	_, sb, err := m.container(namespace, pod, container)
	if err != nil {
		return err
	}
	code, err := sb.Exec(ctx, container, cmd, streamIO(attach))
	if err != nil {
		return err
	}
	if code != 0 {
		return utilexec.CodeExitError{Err: fmt.Errorf("command terminated with exit code %d", code), Code: code}
	}
	return nil
}

// AttachToContainer connects to the container's main process.
func (m *Manager) AttachToContainer(ctx context.Context, namespace, pod, container string, attach provider.AttachIO) error {
	_, sb, err := m.container(namespace, pod, container)
	if err != nil {
		return err
	}
	return sb.Attach(ctx, container, streamIO(attach))
}

func streamIO(a provider.AttachIO) StreamIO {
	s := StreamIO{Stdin: a.Stdin(), TTY: a.TTY()}
	// Typed nil writers must stay untyped nil.
	if w := a.Stdout(); w != nil {
		s.Stdout = w
	}
	if w := a.Stderr(); w != nil {
		s.Stderr = w
	}
	s.Resize = a.Resize()
	return s
}

// PortForward connects stream to the pod's port, through its sandbox.
func (m *Manager) PortForward(ctx context.Context, namespace, pod string, port int32, stream io.ReadWriteCloser) error {
	w, err := m.worker(namespace, pod)
	if err != nil {
		return err
	}
	sb := w.currentSandbox()
	if sb == nil {
		return fmt.Errorf("pod %s/%s: sandbox not ready", namespace, pod)
	}
	if err := sb.PortForward(ctx, port, stream); err != nil {
		return fmt.Errorf("port-forward to pod %s/%s port %d: %w", namespace, pod, port, err)
	}
	return nil
}

func names(cs []corev1.Container) []string {
	out := make([]string, len(cs))
	for i := range cs {
		out[i] = cs[i].Name
	}
	return out
}
