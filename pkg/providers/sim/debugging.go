package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-client/pkg/logs"

	"github.com/nodelet/nodelet/internal/pty"
	"github.com/nodelet/nodelet/pkg/provider"
	"github.com/nodelet/nodelet/pkg/simrules"
)

var (
	_ provider.LogsProvider        = (*Provider)(nil)
	_ provider.ExecProvider        = (*Provider)(nil)
	_ provider.PortForwardProvider = (*Provider)(nil)
	_ provider.AttachProvider      = (*Provider)(nil)
)

// With Options.Rules, a simulated pod shows logs, runs exec, attaches and
// forwards ports as kwok's Logs, Exec, Attach and PortForward objects
// (and their Cluster kinds) say, as kwok's own server does: the logs are
// files on the agent's host in the CRI log format, exec runs the command
// on the agent's host, attach follows a file, port-forward dials an
// address or runs a command. A pod
// that no object is for answers provider.ErrNotSupported, as a provider
// without these capabilities. The kubelet API server authorizes every
// request before it comes here.

// rules is the rules in force.
func (p *Provider) rules() *simrules.Rules {
	if p.opts.Rules == nil {
		return nil
	}
	return p.opts.Rules.Rules()
}

// ruleError turns simrules' ErrNoRule into provider.ErrNotSupported.
func ruleError(err error) error {
	if errors.Is(err, simrules.ErrNoRule) {
		return fmt.Errorf("%w: %w", provider.ErrNotSupported, err)
	}
	return err
}

// checkContainer fails unless the provider runs the pod and the pod has
// the container.
func (p *Provider) checkContainer(namespace, name, container string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	st, ok := p.pods[key(namespace, name)]
	if !ok {
		return fmt.Errorf("%s/%s: %w", namespace, name, provider.ErrNotFound)
	}
	if container == "" {
		return nil
	}
	spec := &st.pod.Spec
	for _, list := range [][]corev1.Container{spec.Containers, spec.InitContainers} {
		for i := range list {
			if list[i].Name == container {
				return nil
			}
		}
	}
	for i := range spec.EphemeralContainers {
		if spec.EphemeralContainers[i].Name == container {
			return nil
		}
	}
	return fmt.Errorf("container %q of pod %s/%s: %w", container, namespace, name, provider.ErrNotFound)
}

// containerRunning tells whether the pod's container runs now, as the
// provider reports it.
func (p *Provider) containerRunning(namespace, name, container string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	st, ok := p.pods[key(namespace, name)]
	if !ok {
		return false
	}
	s := &st.status
	for _, list := range [][]corev1.ContainerStatus{s.ContainerStatuses, s.InitContainerStatuses, s.EphemeralContainerStatuses} {
		for i := range list {
			if list[i].Name == container {
				return list[i].State.Running != nil
			}
		}
	}
	return false
}

// GetContainerLogs reads the container's logs file (its previous logs
// file with Previous) in the CRI log format, as kwok does. A follow goes
// on while the container runs, unless the entry says follow: false.
func (p *Provider) GetContainerLogs(ctx context.Context, namespace, name, container string, opts provider.ContainerLogOpts) (io.ReadCloser, error) {
	if err := p.checkContainer(namespace, name, container); err != nil {
		return nil, err
	}
	l, err := p.rules().Log(namespace, name, container)
	if err != nil {
		return nil, ruleError(err)
	}
	file := *l.LogsFile
	follow := opts.Follow && (l.Follow == nil || *l.Follow)
	if opts.Previous {
		if l.PreviousLogsFile == nil {
			return nil, fmt.Errorf("previous logs of container %q: the kwok object sets no previousLogsFile", container)
		}
		file, follow = *l.PreviousLogsFile, false
	}
	if _, err := os.Stat(file); err != nil {
		return nil, fmt.Errorf("logs of container %q: %w", container, err)
	}
	lo := &logs.LogOptions{Timestamp: opts.Timestamps, Follow: follow}
	if opts.Tail > 0 {
		lo.TailLines = ptr(int64(opts.Tail))
	}
	if opts.LimitBytes > 0 {
		lo.LimitBytes = ptr(int64(opts.LimitBytes))
	}
	if opts.SinceSecs > 0 {
		lo.Since = p.clock.Now().Add(-time.Duration(opts.SinceSecs) * time.Second)
	}
	if opts.SinceTime.After(lo.Since) {
		lo.Since = opts.SinceTime
	}
	// Read in the background into a pipe; closing the reader ends it.
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	pr, pw := io.Pipe()
	status := containerStatus{running: func() bool { return p.containerRunning(namespace, name, container) }}
	go func() {
		err := logs.ReadLogs(ctx, file, "", lo, status, pw, pw)
		if ctx.Err() != nil {
			err = nil
		}
		pw.CloseWithError(err)
	}()
	return readCloser{Reader: pr, close: func() error { cancel(); return pr.Close() }}, nil
}

// AttachToContainer follows the container's attach file (kwok's Attach
// entry) from its end, as kwok does: what is appended to it while the
// container runs goes to the session's output, until the container
// stops or the session ends. Input and a terminal are accepted and
// unused: there is no process to read them.
func (p *Provider) AttachToContainer(ctx context.Context, namespace, name, container string, attach provider.AttachIO) error {
	if err := p.checkContainer(namespace, name, container); err != nil {
		return err
	}
	a, err := p.rules().Attach(namespace, name, container)
	if err != nil {
		return ruleError(err)
	}
	if _, err := os.Stat(*a.LogsFile); err != nil {
		return fmt.Errorf("attach to container %q: %w", container, err)
	}
	stdout, stderr := orDiscard(attach.Stdout()), io.Writer(attach.Stderr())
	if attach.Stderr() == nil || attach.TTY() { // one stream on a terminal
		stderr = stdout
	}
	status := containerStatus{running: func() bool { return p.containerRunning(namespace, name, container) }}
	err = logs.ReadLogs(ctx, *a.LogsFile, "", &logs.LogOptions{TailLines: ptr(int64(0)), Follow: true}, status, stdout, stderr)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

type readCloser struct {
	io.Reader
	close func() error
}

func (r readCloser) Close() error { return r.close() }

// containerStatus answers the CRI log reader's question while it
// follows: whether the container still runs.
type containerStatus struct {
	internalapi.RuntimeService // nil: only ContainerStatus is called
	running                    func() bool
}

func (c containerStatus) ContainerStatus(context.Context, string, bool) (*runtimeapi.ContainerStatusResponse, error) {
	state := runtimeapi.ContainerState_CONTAINER_EXITED
	if c.running() {
		state = runtimeapi.ContainerState_CONTAINER_RUNNING
	}
	return &runtimeapi.ContainerStatusResponse{Status: &runtimeapi.ContainerStatus{State: state}}, nil
}

// RunInContainer runs cmd on the agent's host as the container's Exec
// entry says (its working directory, environment added to the agent's,
// user and group), with the session's streams; with a terminal (kubectl
// exec -t), on a pseudo-terminal of its own that the session's resizes
// size.
func (p *Provider) RunInContainer(ctx context.Context, namespace, name, container string, cmd []string, attach provider.AttachIO) error {
	if err := p.checkContainer(namespace, name, container); err != nil {
		return err
	}
	e, err := p.rules().Exec(namespace, name, container)
	if err != nil {
		return ruleError(err)
	}
	if len(cmd) == 0 {
		return errors.New("exec: no command")
	}
	c := exec.CommandContext(ctx, cmd[0], cmd[1:]...)
	c.Dir = e.Local.WorkDir
	c.Env = os.Environ()
	for _, env := range e.Local.Envs {
		c.Env = append(c.Env, env.Name+"="+env.Value)
	}
	if sc := e.Local.SecurityContext; sc != nil {
		setCredential(c, sc.RunAsUser, sc.RunAsGroup)
	}
	if attach.TTY() {
		return runOnTerminal(ctx, c, attach)
	}
	if out := attach.Stdout(); out != nil {
		c.Stdout = out
	}
	if out := attach.Stderr(); out != nil {
		c.Stderr = out
	}
	return runWithInput(c, attach.Stdin())
}

// runOnTerminal runs c in a session of its own whose controlling
// terminal is a new pseudo-terminal, copying the session's input to it
// and its output (standard output and error together, as on a terminal)
// to the session's standard output until c and whatever it left holding
// the terminal are gone, or ctx ends.
func runOnTerminal(ctx context.Context, c *exec.Cmd, attach provider.AttachIO) error {
	master, slave, err := pty.Open()
	if err != nil {
		return fmt.Errorf("exec: %w", err)
	}
	defer master.Close()
	c.Stdin, c.Stdout, c.Stderr = slave, slave, slave
	if c.SysProcAttr == nil {
		c.SysProcAttr = &syscall.SysProcAttr{}
	}
	c.SysProcAttr.Setsid, c.SysProcAttr.Setctty = true, true // Ctty 0: its standard input
	if size, ok := <-immediate(attach.Resize()); ok {
		_ = pty.SetSize(master, size.Width, size.Height)
	}
	err = c.Start()
	slave.Close() // the command holds it now
	if err != nil {
		return err
	}
	if in := attach.Stdin(); in != nil {
		go func() { _, _ = io.Copy(master, in) }()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(orDiscard(attach.Stdout()), pty.Reader{F: master})
	}()
	if resize := attach.Resize(); resize != nil {
		go func() {
			for {
				select {
				case size, ok := <-resize:
					if !ok {
						return
					}
					_ = pty.SetSize(master, size.Width, size.Height)
				case <-done:
					return
				}
			}
		}()
	}
	err = c.Wait()
	select {
	case <-done:
	case <-ctx.Done():
	}
	return err
}

// immediate is a channel that yields what ch holds now, if anything,
// and is closed.
func immediate[T any](ch <-chan T) <-chan T {
	out := make(chan T, 1)
	select {
	case v, ok := <-ch:
		if ok {
			out <- v
		}
	default:
	}
	close(out)
	return out
}

// orDiscard is w, or io.Discard for a session without that stream.
func orDiscard(w io.WriteCloser) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// runWithInput runs c with in as its standard input, without waiting
// for in to end once c has exited (a session's input ends only when its
// client closes it).
func runWithInput(c *exec.Cmd, in io.Reader) error {
	if in == nil {
		return c.Run()
	}
	w, err := c.StdinPipe()
	if err != nil {
		return err
	}
	if err := c.Start(); err != nil {
		return err
	}
	go func() {
		_, _ = io.Copy(w, in)
		_ = w.Close()
	}()
	return c.Wait() // closes w
}

// PortForward forwards the connection as the pod's PortForward entry for
// the port says: to its target address and port, or to the standard
// input and output of its command, run on the agent's host.
func (p *Provider) PortForward(ctx context.Context, namespace, name string, port int32, stream io.ReadWriteCloser) error {
	if err := p.checkContainer(namespace, name, ""); err != nil {
		return err
	}
	f, err := p.rules().Forward(namespace, name, port)
	if err != nil {
		return ruleError(err)
	}
	if len(f.Command) > 0 {
		c := exec.CommandContext(ctx, f.Command[0], f.Command[1:]...)
		c.Stdout = stream
		return runWithInput(c, stream)
	}
	var d net.Dialer
	addr := net.JoinHostPort(f.Target.Address, strconv.Itoa(int(f.Target.Port)))
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("port-forward to port %d: %w", port, err)
	}
	return provider.Forward(ctx, conn, stream)
}
