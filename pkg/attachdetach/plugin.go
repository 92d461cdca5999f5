package attachdetach

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	storagelisters "k8s.io/client-go/listers/storage/v1"
)

// Volume is an attachable volume: its unique name and its spec.
type Volume struct {
	Name corev1.UniqueVolumeName
	Spec *Spec
}

// Attacher attaches volumes to nodes and detaches them. Its calls may block
// for as long as the backend needs; they stop when ctx is done. The
// reconciler never runs two calls for the same volume at once (for the same
// volume and node when the volume may attach to several nodes).
type Attacher interface {
	// Attach attaches v to node and returns once it is attached. Attaching
	// an attached volume again succeeds.
	Attach(ctx context.Context, v Volume, node types.NodeName) error
	// Detach detaches v from node and returns once it is detached.
	// Detaching a volume that is not attached succeeds.
	Detach(ctx context.Context, v Volume, node types.NodeName) error
	// VolumesAreAttached reports, for each of vs by name, whether it is still
	// attached to node. A volume missing from the map is left as it is.
	VolumesAreAttached(ctx context.Context, vs []Volume, node types.NodeName) (map[corev1.UniqueVolumeName]bool, error)
}

// Plugin is one kind of attachable volume (the CSI plugin, the sim plugin).
type Plugin interface {
	Attacher
	// Name names the plugin in logs and errors.
	Name() string
	// CanSupport reports whether spec is a volume of this plugin's kind.
	CanSupport(spec *Spec) bool
	// AttachRequired reports whether a volume this plugin supports must be
	// attached to a node before use. A volume that needs no attach (a CSI
	// driver whose CSIDriver object says attachRequired: false) never enters
	// the desired state of world.
	AttachRequired(spec *Spec) (bool, error)
	// VolumeName is the volume's cluster-wide unique name, the one node
	// status lists.
	VolumeName(spec *Spec) (corev1.UniqueVolumeName, error)
}

// Plugins are the plugins in use, asked in order.
type Plugins []Plugin

// FindSupporting returns the first plugin that supports spec, or nil.
func (ps Plugins) FindSupporting(spec *Spec) Plugin {
	for _, p := range ps {
		if p.CanSupport(spec) {
			return p
		}
	}
	return nil
}

// FindAttachable returns the plugin that must attach spec before use, or nil
// when no plugin supports it or its plugin says it needs no attach.
func (ps Plugins) FindAttachable(spec *Spec) (Plugin, error) {
	p := ps.FindSupporting(spec)
	if p == nil {
		return nil, nil
	}
	required, err := p.AttachRequired(spec)
	if err != nil {
		return nil, fmt.Errorf("plugin %s: whether volume %q needs attach: %w", p.Name(), spec.Name(), err)
	}
	if !required {
		return nil, nil
	}
	return p, nil
}

// AttachRequiredFunc says whether volumes of a CSI driver must be attached.
// Plugins for CSI volumes take one as their hook for CSIDriver objects.
type AttachRequiredFunc func(driver string) (bool, error)

// AlwaysAttach is the AttachRequiredFunc for backends where every volume
// is attached.
func AlwaysAttach(string) (bool, error) { return true, nil }

// CSIDriverAttachRequired reads attachRequired from the CSIDriver objects in
// lister, as the CSI plugin of the kubelet does: a driver without a
// CSIDriver object, or whose object leaves attachRequired unset, needs
// attach.
func CSIDriverAttachRequired(lister storagelisters.CSIDriverLister) AttachRequiredFunc {
	return func(driver string) (bool, error) {
		d, err := lister.Get(driver)
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		if err != nil {
			return false, fmt.Errorf("get CSIDriver %s: %w", driver, err)
		}
		if d.Spec.AttachRequired == nil {
			return true, nil
		}
		return *d.Spec.AttachRequired, nil
	}
}

// errNoPlugin is returned when no plugin supports an attached volume.
var errNoPlugin = errors.New("no attachable volume plugin supports the volume")
