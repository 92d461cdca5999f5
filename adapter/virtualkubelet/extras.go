package virtualkubelet

import (
	"context"
	"io"

	vkapi "github.com/virtual-kubelet/virtual-kubelet/node/api"
	"github.com/virtual-kubelet/virtual-kubelet/node/nodeutil"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodelet/nodelet/pkg/provider"
)

// extras serves what a nodeutil.Provider offers beyond pods and the node:
// logs, exec, attach, port-forward and stats. Its GetMetricsResource is
// left unused (see the package documentation).
type extras struct {
	full nodeutil.Provider
}

// GetContainerLogs asks the provider with virtual-kubelet's log options.
func (e extras) GetContainerLogs(ctx context.Context, namespace, pod, container string, opts provider.ContainerLogOpts) (io.ReadCloser, error) {
	logs, err := e.full.GetContainerLogs(ctx, namespace, pod, container, logOpts(opts))
	if err != nil {
		return nil, mapError(err)
	}
	return logs, nil
}

// logOpts is nodelet's log options in virtual-kubelet's type.
func logOpts(opts provider.ContainerLogOpts) vkapi.ContainerLogOpts {
	return vkapi.ContainerLogOpts{
		Tail:         opts.Tail,
		LimitBytes:   opts.LimitBytes,
		Timestamps:   opts.Timestamps,
		Follow:       opts.Follow,
		Previous:     opts.Previous,
		SinceSeconds: opts.SinceSecs,
		SinceTime:    opts.SinceTime,
	}
}

// RunInContainer runs cmd through the provider with nodelet's streams.
func (e extras) RunInContainer(ctx context.Context, namespace, pod, container string, cmd []string, attach provider.AttachIO) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the resize relay
	return mapError(e.full.RunInContainer(ctx, namespace, pod, container, cmd, newAttachIO(ctx, attach)))
}

// AttachToContainer attaches through the provider with nodelet's streams.
func (e extras) AttachToContainer(ctx context.Context, namespace, pod, container string, attach provider.AttachIO) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the resize relay
	return mapError(e.full.AttachToContainer(ctx, namespace, pod, container, newAttachIO(ctx, attach)))
}

// PortForward forwards one connection through the provider.
func (e extras) PortForward(ctx context.Context, namespace, pod string, port int32, stream io.ReadWriteCloser) error {
	return mapError(e.full.PortForward(ctx, namespace, pod, port, stream))
}

// PodStats is the pods' part of the provider's summary.
func (e extras) PodStats(ctx context.Context) ([]statsv1alpha1.PodStats, error) {
	summary, err := e.full.GetStatsSummary(ctx)
	if err != nil || summary == nil {
		return nil, err
	}
	return summary.Pods, nil
}

// NodeStats is the node's part of the provider's summary.
func (e extras) NodeStats(ctx context.Context) (statsv1alpha1.NodeStats, error) {
	summary, err := e.full.GetStatsSummary(ctx)
	if err != nil || summary == nil {
		return statsv1alpha1.NodeStats{}, err
	}
	return summary.Node, nil
}

// attachIO is nodelet's provider.AttachIO as virtual-kubelet's api.AttachIO:
// the same streams, and the terminal size changes relayed.
type attachIO struct {
	streams provider.AttachIO
	resize  <-chan vkapi.TermSize
}

var _ vkapi.AttachIO = (*attachIO)(nil)

// newAttachIO wraps streams; the resize relay ends when ctx does.
func newAttachIO(ctx context.Context, streams provider.AttachIO) *attachIO {
	return &attachIO{streams: streams, resize: relayResize(ctx, streams.Resize())}
}

func (a *attachIO) Stdin() io.Reader              { return a.streams.Stdin() }
func (a *attachIO) Stdout() io.WriteCloser        { return a.streams.Stdout() }
func (a *attachIO) Stderr() io.WriteCloser        { return a.streams.Stderr() }
func (a *attachIO) TTY() bool                     { return a.streams.TTY() }
func (a *attachIO) Resize() <-chan vkapi.TermSize { return a.resize }

// relayResize copies terminal sizes from src to the channel it returns, in
// virtual-kubelet's type, until src closes or ctx ends; then it closes that
// channel. A nil src (no terminal) gives nil and starts nothing.
func relayResize(ctx context.Context, src <-chan provider.TermSize) <-chan vkapi.TermSize {
	if src == nil {
		return nil
	}
	out := make(chan vkapi.TermSize, 1)
	go func() {
		defer close(out)
		for {
			select {
			case <-ctx.Done():
				return
			case size, ok := <-src:
				if !ok {
					return
				}
				select {
				case out <- vkapi.TermSize{Width: size.Width, Height: size.Height}:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out
}
