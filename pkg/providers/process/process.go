// Package process is the process provider: it runs the pods bound to one
// node as supervised host processes (package sandbox: each pod a sandbox of
// its own PID, UTS, IPC and mount namespaces on the host's network, each
// container a supervised process that outlives the agent) through the
// runtime-independent pod lifecycle of package lifecycle, and describes
// that node from the real host (package hostnode).
//
// This package only adapts the sandboxes to the lifecycle's Runtime and
// reports the node; it never writes to the API server.
package process

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/hostnode"
	"github.com/nodelet/nodelet/pkg/lifecycle"
	"github.com/nodelet/nodelet/pkg/provider"
	"github.com/nodelet/nodelet/pkg/providers/process/sandbox"
)

var (
	_ provider.PodLifecycleHandler = (*Provider)(nil)
	_ provider.NodeProvider        = (*Provider)(nil)
)

// Options configure the process provider of one node: the node
// (NodeName, Address and RootDir are required; the Address is also every
// pod's IP, as pods use the host's network) and how its pods run.
type Options struct {
	hostnode.Options
	// Clock drives back-off, deadlines and probes; default the real clock.
	Clock clock.WithTicker
	// CleanUpPeriod is how often leftovers of pods that are gone are
	// cleaned up; default lifecycle.DefaultCleanUpPeriod.
	CleanUpPeriod time.Duration
}

// Provider runs the pods of one node as host processes: the pod lifecycle
// over the host sandboxes, and the node's description.
type Provider struct {
	// Manager runs the pods: CreatePod, UpdatePod, DeletePod, GetPod,
	// GetPods, NotifyPods, RestorePod, Evict, the logs, exec, attach and
	// port-forward of the provider are its methods (pkg/lifecycle), over
	// this provider's runtime; the node's description and stats are
	// this package's.
	*lifecycle.Manager
	opts      Options
	host      *hostnode.Host
	sandboxes *sandbox.Manager
}

// New returns a provider over the sandboxes; parts.Runtime is set to
// them. It does no I/O until Run or the first call.
func New(sandboxes *sandbox.Manager, parts lifecycle.Parts, opts Options) (*Provider, error) {
	if sandboxes == nil {
		return nil, errors.New("process provider: the sandbox manager is required")
	}
	host := hostnode.New(opts.Options)
	parts.Runtime = hostRuntime{sandboxes: sandboxes, address: opts.Address}
	admit := func(pod *corev1.Pod) error {
		if err := admitImageVolumes(pod); err != nil {
			return err
		}
		if opts.Admit != nil {
			return opts.Admit(pod)
		}
		return nil
	}
	m, err := lifecycle.New(parts, lifecycle.Options{
		NodeName: opts.NodeName, Address: opts.Address, RootDir: opts.RootDir,
		Allocatable: host.Allocatable, Clock: opts.Clock, CleanUpPeriod: opts.CleanUpPeriod,
		AllowedUnsafeSysctls: opts.AllowedUnsafeSysctls, AppArmor: hostnode.AppArmorEnabled(), Admit: admit,
	})
	if err != nil {
		return nil, fmt.Errorf("process provider: %w", err)
	}
	return &Provider{Manager: m, opts: opts, host: host, sandboxes: sandboxes}, nil
}

// admitImageVolumes refuses a pod with an image volume: the process
// provider pulls no image, so it has none to mount. The pod fails with
// reason ImageVolumeNotSupported and a message naming the volume's field.
func admitImageVolumes(pod *corev1.Pod) error {
	if f := imageVolumeField(pod); f != nil {
		return provider.Reject("ImageVolumeNotSupported", "%s: image volumes are not supported by the process provider, which pulls no images", f)
	}
	return nil
}

// imageVolumeField is the field of the pod's first image volume
// (spec.volumes[i].image); nil when it has none.
func imageVolumeField(pod *corev1.Pod) *field.Path {
	for i, v := range pod.Spec.Volumes {
		if v.Image != nil {
			return field.NewPath("spec", "volumes").Index(i).Child("image")
		}
	}
	return nil
}

// Ping checks that the pods' root directory is usable.
func (p *Provider) Ping(context.Context) error {
	if _, err := os.Stat(p.opts.RootDir); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("root dir: %w", err)
	}
	return nil
}

// ConfigureNode describes the host, Ready, and the CSI volumes in use
// (which the volume controller must not detach).
func (p *Provider) ConfigureNode(_ context.Context, node *corev1.Node) {
	p.host.Describe(node)
	s := &node.Status
	p.host.SetReady(s)
	s.NodeInfo.ContainerRuntimeVersion = "nodelet-process://" + p.opts.Version
	s.VolumesInUse = nil
	if inUse := p.VolumesInUse(); len(inUse) > 0 {
		s.VolumesInUse = inUse
	}
}
