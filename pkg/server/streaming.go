package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	utilproxy "k8s.io/apimachinery/pkg/util/proxy"
	"k8s.io/apiserver/pkg/util/proxy"
	"k8s.io/cri-streaming/pkg/streaming/portforward"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	"k8s.io/klog/v2"
	"k8s.io/streaming/pkg/httpstream/wsstream"
	utilexec "k8s.io/utils/exec"

	"github.com/nodelet/nodelet/pkg/provider"
)

// exec runs a command in a container over SPDY or WebSocket streams.
func (s *Server) exec(w http.ResponseWriter, r *http.Request) {
	p, ok := s.backend.(provider.ExecProvider)
	if !ok {
		notImplemented(w, "exec")
		return
	}
	opts, err := remotecommand.NewOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if !s.knownPod(w, r) {
		return
	}
	cmd := r.URL.Query()["command"]
	if len(cmd) == 0 {
		http.Error(w, "command: required", http.StatusBadRequest)
		return
	}
	if s.translateWebSocket(w, r, opts) {
		return
	}
	remotecommand.ServeExec(w, r, &executor{p: p, namespace: r.PathValue("namespace")},
		r.PathValue("pod"), r.PathValue("uid"), r.PathValue("container"), cmd, opts,
		s.opts.StreamIdleTimeout, s.opts.StreamCreationTimeout, remotecommand.SupportedStreamingProtocols)
}

// attach attaches to a container's main process over SPDY or WebSocket
// streams.
func (s *Server) attach(w http.ResponseWriter, r *http.Request) {
	p, ok := s.backend.(provider.AttachProvider)
	if !ok {
		notImplemented(w, "attach")
		return
	}
	opts, err := remotecommand.NewOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if !s.knownPod(w, r) {
		return
	}
	if s.translateWebSocket(w, r, opts) {
		return
	}
	remotecommand.ServeAttach(w, r, &attacher{p: p, namespace: r.PathValue("namespace")},
		r.PathValue("pod"), r.PathValue("uid"), r.PathValue("container"), opts,
		s.opts.StreamIdleTimeout, s.opts.StreamCreationTimeout, remotecommand.SupportedStreamingProtocols)
}

// portForward forwards connections to ports of a pod, over SPDY, WebSocket,
// or SPDY tunnelled in WebSocket.
func (s *Server) portForward(w http.ResponseWriter, r *http.Request) {
	p, ok := s.backend.(provider.PortForwardProvider)
	if !ok {
		notImplemented(w, "port forwarding")
		return
	}
	tunnel := wsstream.IsWebSocketRequestWithTunnelingProtocol(r)
	opts := &portforward.V4Options{}
	if !tunnel {
		var err error
		if opts, err = portforward.NewV4Options(r); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	}
	if !s.knownPod(w, r) {
		return
	}
	if tunnel {
		// The SPDY library answers upgrades itself, which the tunnel cannot
		// wrap: tunnel a proxy to the loopback's SPDY port-forward instead.
		upgrade := utilproxy.NewUpgradeAwareHandler(s.loop.url(r), s.loop.transport, false, true, proxyErrorResponder{})
		proxy.NewTunnelingHandler(upgrade).ServeHTTP(w, r)
		return
	}
	forwarder := &portForwarder{ctx: r.Context(), p: p, namespace: r.PathValue("namespace")}
	portforward.ServePortForward(w, r, forwarder, r.PathValue("pod"), r.PathValue("uid"), opts,
		s.opts.StreamIdleTimeout, s.opts.StreamCreationTimeout, portforward.SupportedProtocols)
}

// translateWebSocket serves an exec or attach request of the WebSocket
// protocol v5.channel.k8s.io, which the streaming library does not speak, by
// translating it into SPDY to the loopback. It tells whether it did.
func (s *Server) translateWebSocket(w http.ResponseWriter, r *http.Request, opts *remotecommand.Options) bool {
	if !wsstream.IsWebSocketRequestWithStreamCloseProtocol(r) {
		return false
	}
	proxy.NewStreamTranslatorHandler(s.loop.url(r), s.loop.transport, 0, proxy.Options{
		Stdin: opts.Stdin, Stdout: opts.Stdout, Stderr: opts.Stderr, Tty: opts.TTY,
	}).ServeHTTP(w, r)
	return true
}

// proxyErrorResponder answers a failed proxy to the loopback.
type proxyErrorResponder struct{}

func (proxyErrorResponder) Error(w http.ResponseWriter, r *http.Request, err error) {
	klog.FromContext(r.Context()).Error(err, "Unable to proxy a streaming request")
	http.Error(w, err.Error(), http.StatusInternalServerError)
}

// run runs a command in a container and answers its output (the kubelet's
// /run: cmd is split at spaces).
func (s *Server) run(w http.ResponseWriter, r *http.Request) {
	p, ok := s.backend.(provider.ExecProvider)
	if !ok {
		notImplemented(w, "run")
		return
	}
	if !s.knownPod(w, r) {
		return
	}
	cmd := strings.Fields(r.URL.Query().Get("cmd"))
	if len(cmd) == 0 {
		http.Error(w, "cmd: required", http.StatusBadRequest)
		return
	}
	var out lockedBuffer
	sio := &streams{stdout: nopCloser{&out}, stderr: nopCloser{&out}}
	namespace, pod, container := r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("container")
	if err := p.RunInContainer(r.Context(), namespace, pod, container, cmd, sio); err != nil {
		providerError(w, fmt.Errorf("run in container %s of pod %s/%s: %w", container, namespace, pod, err), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	w.Write(out.Bytes())
}

// executor adapts an ExecProvider to the streaming library.
type executor struct {
	p         provider.ExecProvider
	namespace string
}

func (e *executor) ExecInContainer(ctx context.Context, pod, _, container string, cmd []string, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize, _ time.Duration) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sio := &streams{stdin: in, stdout: out, stderr: errOut, tty: tty, resize: forwardResize(ctx, resize)}
	return exitError(e.p.RunInContainer(ctx, e.namespace, pod, container, cmd, sio))
}

// attacher adapts an AttachProvider to the streaming library.
type attacher struct {
	p         provider.AttachProvider
	namespace string
}

func (a *attacher) AttachContainer(ctx context.Context, pod, _, container string, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sio := &streams{stdin: in, stdout: out, stderr: errOut, tty: tty, resize: forwardResize(ctx, resize)}
	return a.p.AttachToContainer(ctx, a.namespace, pod, container, sio)
}

// portForwarder adapts a PortForwardProvider to the streaming library,
// which gives it no context: each forward ends with the request.
type portForwarder struct {
	ctx       context.Context
	p         provider.PortForwardProvider
	namespace string
}

func (f *portForwarder) PortForward(ctx context.Context, pod, _ string, port int32, stream io.ReadWriteCloser) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(f.ctx, cancel)
	defer stop()
	return f.p.PortForward(ctx, f.namespace, pod, port, stream)
}

// exitError turns an error that carries a command's exit code (ExitCode()
// int, as *os/exec.ExitError has) into the form the streaming library
// reports as the exit code.
func exitError(err error) error {
	var coded interface{ ExitCode() int }
	if err == nil || !errors.As(err, &coded) || coded.ExitCode() < 0 {
		return err
	}
	return utilexec.CodeExitError{Err: err, Code: coded.ExitCode()}
}

// streams is the provider.AttachIO of one session.
type streams struct {
	stdin          io.Reader
	stdout, stderr io.WriteCloser
	tty            bool
	resize         <-chan provider.TermSize
}

func (s *streams) Stdin() io.Reader                 { return s.stdin }
func (s *streams) Stdout() io.WriteCloser           { return s.stdout }
func (s *streams) Stderr() io.WriteCloser           { return s.stderr }
func (s *streams) TTY() bool                        { return s.tty }
func (s *streams) Resize() <-chan provider.TermSize { return s.resize }

// forwardResize relays terminal size changes until in closes or ctx ends.
func forwardResize(ctx context.Context, in <-chan remotecommand.TerminalSize) <-chan provider.TermSize {
	if in == nil {
		return nil
	}
	out := make(chan provider.TermSize, 1)
	go func() {
		defer close(out)
		for {
			select {
			case <-ctx.Done():
				return
			case size, ok := <-in:
				if !ok {
					return
				}
				select {
				case out <- provider.TermSize{Width: size.Width, Height: size.Height}:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// lockedBuffer is a buffer that stdout and stderr may write at once.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Bytes()
}
