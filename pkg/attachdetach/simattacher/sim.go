// Package simattacher is an attacher plugin that attaches volumes in memory, with a
// configurable latency and failure rate, for simulated nodes and scale
// tests. It attaches CSI PersistentVolumes of the drivers it is given and
// names them as the CSI plugin does, so node status looks the same.
//
// It owns nothing outside its own memory: no API object, no mount.
package simattacher

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/attachdetach"
)

// PluginName is the plugin's name.
const PluginName = "nodelet.io/sim"

// Op is a call of the plugin.
type Op string

// The calls of the plugin.
const (
	OpAttach Op = "attach"
	OpDetach Op = "detach"
	OpVerify Op = "verify"
)

// ErrInjected is the error of a call failed by the failure rate.
var ErrInjected = errors.New("sim: injected failure")

// ErrMultiAttach is the error of an attach of a volume that cannot attach to
// several nodes and is attached to another.
var ErrMultiAttach = errors.New("sim: volume is attached to another node")

// Options configures a Plugin; zero fields take defaults.
type Options struct {
	// Drivers are the CSI drivers whose volumes the plugin attaches (default
	// every CSI driver).
	Drivers []string
	// Latency is how long each attach and detach takes (default none).
	Latency time.Duration
	// FailureRate is the probability, in [0, 1], that an attach or detach
	// fails with ErrInjected (default 0).
	FailureRate float64
	// Seed seeds the random source of FailureRate (default 1).
	Seed uint64
	// Fail, when set, is asked before every call (after the latency); an
	// error it returns is the call's. Tests inject failures with it.
	Fail func(op Op, v attachdetach.Volume, node types.NodeName) error
	// AttachRequired says which drivers need attach (default all): the hook
	// for CSIDriver objects' attachRequired.
	AttachRequired attachdetach.AttachRequiredFunc
	// AllowMultiAttach lets a volume that cannot attach to several nodes
	// attach to a second one anyway. By default such an attach fails with
	// ErrMultiAttach, as a real disk's would.
	AllowMultiAttach bool
	// Clock times the latency (default the real clock).
	Clock clock.Clock
}

// Plugin attaches volumes in memory. It is safe for concurrent use.
type Plugin struct {
	opts Options

	mu       sync.Mutex
	rand     *rand.Rand
	attached map[corev1.UniqueVolumeName]map[types.NodeName]bool
	calls    map[Op]int
}

var _ attachdetach.Plugin = (*Plugin)(nil)

// New returns a plugin with nothing attached.
func New(opts Options) (*Plugin, error) {
	var errs []error
	if opts.Latency < 0 {
		errs = append(errs, fmt.Errorf("latency %v: must not be negative", opts.Latency))
	}
	if opts.FailureRate < 0 || opts.FailureRate > 1 {
		errs = append(errs, fmt.Errorf("failureRate %v: must be between 0 and 1", opts.FailureRate))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("invalid sim volume plugin options: %w", err)
	}
	if opts.Seed == 0 {
		opts.Seed = 1
	}
	if opts.AttachRequired == nil {
		opts.AttachRequired = attachdetach.AlwaysAttach
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &Plugin{
		opts:     opts,
		rand:     rand.New(rand.NewPCG(opts.Seed, 0)),
		attached: make(map[corev1.UniqueVolumeName]map[types.NodeName]bool),
		calls:    make(map[Op]int),
	}, nil
}

// Name returns PluginName.
func (p *Plugin) Name() string { return PluginName }

// CanSupport reports whether spec is a CSI PersistentVolume of one of the
// plugin's drivers.
func (p *Plugin) CanSupport(spec *attachdetach.Spec) bool {
	csi := spec.CSI()
	return csi != nil && (len(p.opts.Drivers) == 0 || slices.Contains(p.opts.Drivers, csi.Driver))
}

// AttachRequired asks the AttachRequired hook about the volume's driver.
func (p *Plugin) AttachRequired(spec *attachdetach.Spec) (bool, error) {
	csi := spec.CSI()
	if csi == nil {
		return false, fmt.Errorf("volume %q is not a CSI volume", spec.Name())
	}
	return p.opts.AttachRequired(csi.Driver)
}

// VolumeName is the CSI name of the volume: driver and volume handle.
func (p *Plugin) VolumeName(spec *attachdetach.Spec) (corev1.UniqueVolumeName, error) {
	csi := spec.CSI()
	if csi == nil || csi.Driver == "" || csi.VolumeHandle == "" {
		return "", fmt.Errorf("volume %q has no CSI driver and volume handle", spec.Name())
	}
	return attachdetach.CSIVolumeName(csi.Driver, csi.VolumeHandle), nil
}

// Attach attaches v to node after the latency.
func (p *Plugin) Attach(ctx context.Context, v attachdetach.Volume, node types.NodeName) error {
	if err := p.call(ctx, OpAttach, v, node); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	nodes := p.attached[v.Name]
	if !p.opts.AllowMultiAttach && !v.Spec.MultiAttachAllowed() {
		for n := range nodes {
			if n != node {
				return fmt.Errorf("attach %q to node %q: %w (%q)", v.Name, node, ErrMultiAttach, n)
			}
		}
	}
	if nodes == nil {
		nodes = make(map[types.NodeName]bool)
		p.attached[v.Name] = nodes
	}
	nodes[node] = true
	return nil
}

// Detach detaches v from node after the latency.
func (p *Plugin) Detach(ctx context.Context, v attachdetach.Volume, node types.NodeName) error {
	if err := p.call(ctx, OpDetach, v, node); err != nil {
		return err
	}
	p.SetAttached(v.Name, node, false)
	return nil
}

// VolumesAreAttached reports which of vs are attached to node.
func (p *Plugin) VolumesAreAttached(ctx context.Context, vs []attachdetach.Volume, node types.NodeName) (map[corev1.UniqueVolumeName]bool, error) {
	p.mu.Lock()
	p.calls[OpVerify]++
	p.mu.Unlock()
	if p.opts.Fail != nil {
		for _, v := range vs {
			if err := p.opts.Fail(OpVerify, v, node); err != nil {
				return nil, err
			}
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[corev1.UniqueVolumeName]bool, len(vs))
	for _, v := range vs {
		out[v.Name] = p.attached[v.Name][node]
	}
	return out, nil
}

// call counts the call, waits the latency and decides whether it fails.
func (p *Plugin) call(ctx context.Context, op Op, v attachdetach.Volume, node types.NodeName) error {
	p.mu.Lock()
	p.calls[op]++
	p.mu.Unlock()
	if p.opts.Latency > 0 {
		select {
		case <-ctx.Done():
			return fmt.Errorf("sim %s of %q on node %q: %w", op, v.Name, node, context.Cause(ctx))
		case <-p.opts.Clock.After(p.opts.Latency):
		}
	}
	if p.opts.Fail != nil {
		if err := p.opts.Fail(op, v, node); err != nil {
			return err
		}
	}
	if p.opts.FailureRate > 0 {
		p.mu.Lock()
		fail := p.rand.Float64() < p.opts.FailureRate
		p.mu.Unlock()
		if fail {
			return fmt.Errorf("sim %s of %q on node %q: %w", op, v.Name, node, ErrInjected)
		}
	}
	return nil
}

// SetAttached changes what is attached behind the reconciler's back (a
// volume detached by someone else, for instance).
func (p *Plugin) SetAttached(v corev1.UniqueVolumeName, node types.NodeName, attached bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if attached {
		if p.attached[v] == nil {
			p.attached[v] = make(map[types.NodeName]bool)
		}
		p.attached[v][node] = true
		return
	}
	delete(p.attached[v], node)
	if len(p.attached[v]) == 0 {
		delete(p.attached, v)
	}
}

// IsAttached reports whether v is attached to node.
func (p *Plugin) IsAttached(v corev1.UniqueVolumeName, node types.NodeName) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.attached[v][node]
}

// Nodes returns the nodes v is attached to, sorted.
func (p *Plugin) Nodes(v corev1.UniqueVolumeName) []types.NodeName {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []types.NodeName
	for n := range p.attached[v] {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// Calls returns how many calls of op the plugin has had.
func (p *Plugin) Calls(op Op) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[op]
}
