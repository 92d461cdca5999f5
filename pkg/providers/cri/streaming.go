package cri

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	clientexec "k8s.io/client-go/util/exec"
	utilexec "k8s.io/utils/exec"

	"github.com/nodelet/nodelet/pkg/lifecycle"
	"github.com/nodelet/nodelet/pkg/provider"
)

// The runtime serves exec, attach and port-forward on its own streaming
// server, at a URL it hands out per request. nodelet's kubelet API
// authenticates and authorizes the client, then is the client of that URL
// and copies the streams between the two.

// streamTo runs an exec or attach session at the runtime's URL with the
// client's streams.
func streamTo(ctx context.Context, rawURL string, s lifecycle.StreamIO) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return fmt.Errorf("runtime streaming URL %q: %w", rawURL, err)
	}
	exec, err := remotecommand.NewSPDYExecutor(&rest.Config{}, http.MethodPost, u)
	if err != nil {
		return fmt.Errorf("runtime streaming: %w", err)
	}
	opts := remotecommand.StreamOptions{Stdin: s.Stdin, Stdout: s.Stdout, Tty: s.TTY}
	if !s.TTY {
		opts.Stderr = s.Stderr
	}
	if s.Resize != nil {
		opts.TerminalSizeQueue = sizeQueue(s.Resize)
	}
	return exec.StreamWithContext(ctx, opts)
}

// sizeQueue hands terminal size changes to the runtime's session.
type sizeQueue <-chan provider.TermSize

func (q sizeQueue) Next() *remotecommand.TerminalSize {
	size, ok := <-q
	if !ok {
		return nil
	}
	return &remotecommand.TerminalSize{Width: size.Width, Height: size.Height}
}

// exitCode is the exit code an error of an exec carries, if it does.
func exitCode(err error) (int, bool) {
	var ce clientexec.ExitError
	if errors.As(err, &ce) {
		return ce.ExitStatus(), true
	}
	var ue utilexec.ExitError
	if errors.As(err, &ue) {
		return ue.ExitStatus(), true
	}
	return 0, false
}

// forwardTo copies between stream and the port through the runtime's
// port-forward URL, until either side closes.
func forwardTo(ctx context.Context, rawURL string, port int32, stream io.ReadWriteCloser) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return fmt.Errorf("runtime streaming URL %q: %w", rawURL, err)
	}
	transport, upgrader, err := spdy.RoundTripperFor(&rest.Config{})
	if err != nil {
		return err
	}
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, u)
	conn, _, err := dialer.Dial(portforward.PortForwardProtocolV1Name)
	if err != nil {
		return fmt.Errorf("runtime port-forward: %w", err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	headers := http.Header{}
	headers.Set(corev1.StreamType, corev1.StreamTypeError)
	headers.Set(corev1.PortHeader, strconv.Itoa(int(port)))
	headers.Set(corev1.PortForwardRequestIDHeader, "0")
	errStream, err := conn.CreateStream(headers)
	if err != nil {
		return fmt.Errorf("runtime port-forward: %w", err)
	}
	errStream.Close() // nothing to send on it
	errc := make(chan error, 1)
	go func() {
		msg, err := io.ReadAll(errStream)
		switch {
		case err != nil && !errors.Is(err, io.EOF):
			errc <- err
		case len(msg) > 0:
			errc <- errors.New(string(msg))
		default:
			errc <- nil
		}
	}()
	headers.Set(corev1.StreamType, corev1.StreamTypeData)
	data, err := conn.CreateStream(headers)
	if err != nil {
		return fmt.Errorf("runtime port-forward: %w", err)
	}
	go func() {
		_, _ = io.Copy(data, stream)
		data.Close()
	}()
	_, err = io.Copy(stream, data)
	if rerr := <-errc; rerr != nil {
		return rerr
	}
	if err != nil && !errors.Is(err, io.EOF) && ctx.Err() == nil && !httpstream.IsUpgradeFailure(err) {
		return err
	}
	return nil
}
