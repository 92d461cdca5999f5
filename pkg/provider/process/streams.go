package process

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	utilexec "k8s.io/utils/exec"

	"github.com/nodelet/nodelet/pkg/provider"
	"github.com/nodelet/nodelet/pkg/provider/process/sandbox"
)

// What kubectl logs, exec, attach and port-forward reach through the
// kubelet API server.

// container finds a pod's sandbox and checks that it has the container.
func (p *Provider) container(namespace, pod, container string) (*podWorker, *sandbox.Sandbox, error) {
	w, err := p.worker(namespace, pod)
	if err != nil {
		return nil, nil, err
	}
	w.mu.Lock()
	sb, spec := w.sandbox, w.pod
	w.mu.Unlock()
	found := false
	for _, list := range [][]string{names(spec.Spec.InitContainers), names(spec.Spec.Containers)} {
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

// GetContainerLogs streams a container's log: the latest run, or with
// Previous the one before.
func (p *Provider) GetContainerLogs(ctx context.Context, namespace, pod, container string, opts provider.ContainerLogOpts) (io.ReadCloser, error) {
	_, sb, err := p.container(namespace, pod, container)
	if err != nil {
		return nil, err
	}
	st, ok := sb.Container(container)
	if opts.Previous {
		st, ok = sb.Previous(container)
		if !ok {
			return nil, fmt.Errorf("previous terminated container %q in pod %q not found", container, pod)
		}
	}
	if !ok {
		return nil, fmt.Errorf("container %q in pod %q is waiting to start", container, pod)
	}
	lo := sandbox.LogOptions{Follow: opts.Follow, Timestamps: opts.Timestamps, TailLines: -1, LimitBytes: int64(opts.LimitBytes)}
	if opts.Tail > 0 {
		lo.TailLines = opts.Tail
	}
	if opts.SinceSecs > 0 {
		lo.Since = p.clock.Now().Add(-time.Duration(opts.SinceSecs) * time.Second)
	}
	if !opts.SinceTime.IsZero() {
		lo.Since = opts.SinceTime
	}
	attempt := st.Attempt
	running := func() bool {
		cur, ok := sb.Container(container)
		return ok && cur.Attempt == attempt && cur.State == sandbox.StateRunning
	}
	r, w := io.Pipe()
	go func() {
		w.CloseWithError(sandbox.ReadLogs(ctx, sb.LogPath(container, attempt), lo, running, w))
	}()
	return r, nil
}

// RunInContainer runs cmd in the container, as kubectl exec does.
func (p *Provider) RunInContainer(ctx context.Context, namespace, pod, container string, cmd []string, attach provider.AttachIO) error {
	_, sb, err := p.container(namespace, pod, container)
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
func (p *Provider) AttachToContainer(ctx context.Context, namespace, pod, container string, attach provider.AttachIO) error {
	_, sb, err := p.container(namespace, pod, container)
	if err != nil {
		return err
	}
	return sb.Attach(ctx, container, streamIO(attach))
}

func streamIO(a provider.AttachIO) sandbox.StreamIO {
	s := sandbox.StreamIO{Stdin: a.Stdin(), TTY: a.TTY()}
	// Typed nil writers must stay untyped nil.
	if w := a.Stdout(); w != nil {
		s.Stdout = w
	}
	if w := a.Stderr(); w != nil {
		s.Stderr = w
	}
	if in := a.Resize(); in != nil {
		out := make(chan sandbox.TermSize)
		go func() {
			defer close(out)
			for size := range in {
				out <- sandbox.TermSize{Width: size.Width, Height: size.Height}
			}
		}()
		s.Resize = out
	}
	return s
}

// PortForward connects stream to the pod's port. Pods use the host's
// network, so that is the port on the node's address.
func (p *Provider) PortForward(ctx context.Context, namespace, pod string, port int32, stream io.ReadWriteCloser) error {
	if _, err := p.worker(namespace, pod); err != nil {
		return err
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(p.opts.Address, strconv.Itoa(int(port))))
	if err != nil {
		return fmt.Errorf("port-forward to pod %s/%s port %d: %w", namespace, pod, port, err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	go func() {
		_, _ = io.Copy(conn, stream)
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.CloseWrite() // the client is done sending; the reply may still come
		}
	}()
	// Done when the pod closes the connection (or ctx ends).
	if _, err = io.Copy(stream, conn); err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("port-forward to pod %s/%s port %d: %w", namespace, pod, port, err)
	}
	return ctx.Err()
}

func names(cs []corev1.Container) []string {
	out := make([]string, len(cs))
	for i := range cs {
		out[i] = cs[i].Name
	}
	return out
}
