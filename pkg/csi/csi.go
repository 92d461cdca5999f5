// Package csi is nodelet's side of the Container Storage Interface.
//
// The attacher plugin (csi.go) attaches a CSI PersistentVolume by creating a
// storage.k8s.io/v1 VolumeAttachment for it and waiting until the driver's
// external-attacher reports it attached, and detaches it by deleting that
// VolumeAttachment and waiting until it is gone, so any CSI driver's
// controller publish service does the work. Which drivers need attach at
// all is the CSIDriver objects' to say (attachRequired).
//
// The node client (node.go) calls a driver's identity and node services
// (GetPluginInfo, NodeGetInfo, NodeGetCapabilities, NodeStageVolume,
// NodePublishVolume and their reverse) over the driver's unix socket, which
// by convention is <rootDir>/plugins/<driverName>/csi.sock (SocketPath). The
// registrar (registration.go) finds those sockets and keeps the node's
// CSINode listing the drivers with their node IDs, topology keys and volume
// limits.
//
// The package owns the VolumeAttachments it names (see AttachmentName) and
// the CSINode of the node it registers, and nothing else: it never mounts
// anything itself (the drivers do, when asked by the process provider) and
// never writes a Node, a Pod or a PersistentVolume.
package csi

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/attachdetach"
)

// PluginName is the plugin's name, the one the kubelet's CSI plugin has.
const PluginName = "kubernetes.io/csi"

// DefaultTimeout bounds one attach or detach when Options.Timeout is unset.
const DefaultTimeout = 2 * time.Minute

var (
	// ErrNotCSI is the error for a volume that is not a CSI PersistentVolume
	// with a driver and a volume handle. Retrying cannot help.
	ErrNotCSI = errors.New("not a CSI PersistentVolume with a driver and a volume handle")
	// ErrAttach wraps the attachError a VolumeAttachment reports.
	ErrAttach = errors.New("attach failed")
	// ErrDetach wraps the detachError a VolumeAttachment reports.
	ErrDetach = errors.New("detach failed")
	// ErrDeletedWhileAttaching is the error of an attach whose
	// VolumeAttachment disappears before it is attached.
	ErrDeletedWhileAttaching = errors.New("VolumeAttachment deleted while waiting for attach")
)

// Options configures a Plugin; zero fields take defaults.
type Options struct {
	// CSIDrivers, when set, lists the CSIDriver objects whose attachRequired
	// says which drivers need attach (through volume.CSIDriverAttachRequired).
	CSIDrivers storagelisters.CSIDriverLister
	// AttachRequired says which drivers need attach when CSIDrivers is unset
	// (default all). Set at most one of the two.
	AttachRequired attachdetach.AttachRequiredFunc
	// VolumeAttachments, when set, is read by VolumesAreAttached instead of
	// the API server.
	VolumeAttachments storagelisters.VolumeAttachmentLister
	// Timeout bounds each attach and detach, on top of the deadline of the
	// caller's context (default DefaultTimeout).
	Timeout time.Duration
}

func (o *Options) validate() error {
	var errs []error
	if o.CSIDrivers != nil && o.AttachRequired != nil {
		errs = append(errs, errors.New("set at most one of csiDrivers and attachRequired"))
	}
	if o.Timeout < 0 {
		errs = append(errs, fmt.Errorf("timeout %v: must not be negative", o.Timeout))
	}
	return errors.Join(errs...)
}

// Plugin attaches CSI volumes through VolumeAttachments. It is safe for
// concurrent use.
type Plugin struct {
	client         kubernetes.Interface
	attachRequired attachdetach.AttachRequiredFunc
	lister         storagelisters.VolumeAttachmentLister
	timeout        time.Duration
}

var _ attachdetach.Plugin = (*Plugin)(nil)

// New returns a plugin that writes VolumeAttachments through client. It
// does no I/O.
func New(client kubernetes.Interface, opts Options) (*Plugin, error) {
	if client == nil {
		return nil, errors.New("invalid csi volume plugin: no client")
	}
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("invalid csi volume plugin options: %w", err)
	}
	p := &Plugin{
		client:         client,
		attachRequired: opts.AttachRequired,
		lister:         opts.VolumeAttachments,
		timeout:        opts.Timeout,
	}
	switch {
	case opts.CSIDrivers != nil:
		p.attachRequired = attachdetach.CSIDriverAttachRequired(opts.CSIDrivers)
	case p.attachRequired == nil:
		p.attachRequired = attachdetach.AlwaysAttach
	}
	if p.timeout == 0 {
		p.timeout = DefaultTimeout
	}
	return p, nil
}

// AttachmentName is the name of the VolumeAttachment of the volume with
// handle of driver on node: "csi-" and the hex SHA-256 of the three, the
// name the kubelet's CSI attacher gives it, so either finds the other's.
func AttachmentName(driver, handle string, node types.NodeName) string {
	sum := sha256.Sum256([]byte(handle + driver + string(node)))
	return fmt.Sprintf("csi-%x", sum)
}

// Name returns PluginName.
func (p *Plugin) Name() string { return PluginName }

// CanSupport reports whether spec is a CSI PersistentVolume.
func (p *Plugin) CanSupport(spec *attachdetach.Spec) bool { return spec.CSI() != nil }

// AttachRequired asks the CSIDriver of the volume's driver.
func (p *Plugin) AttachRequired(spec *attachdetach.Spec) (bool, error) {
	csi := spec.CSI()
	if csi == nil || csi.Driver == "" {
		return false, fmt.Errorf("volume %q: %w", spec.Name(), ErrNotCSI)
	}
	return p.attachRequired(csi.Driver)
}

// VolumeName is the CSI name of the volume: driver and volume handle.
func (p *Plugin) VolumeName(spec *attachdetach.Spec) (corev1.UniqueVolumeName, error) {
	csi := spec.CSI()
	if csi == nil || csi.Driver == "" || csi.VolumeHandle == "" {
		return "", fmt.Errorf("volume %q: %w", spec.Name(), ErrNotCSI)
	}
	return attachdetach.CSIVolumeName(csi.Driver, csi.VolumeHandle), nil
}

// Attach creates the VolumeAttachment of v on node, or finds the one that
// exists, and waits until it is attached. An attachError on it ends the
// wait with an error wrapping ErrAttach.
func (p *Plugin) Attach(ctx context.Context, v attachdetach.Volume, node types.NodeName) error {
	csi := v.Spec.CSI()
	if csi == nil || csi.Driver == "" || csi.VolumeHandle == "" {
		return fmt.Errorf("attach volume %q: %w", v.Name, ErrNotCSI)
	}
	name := AttachmentName(csi.Driver, csi.VolumeHandle, node)
	logger := klog.FromContext(ctx).WithValues("volume", v.Name, "node", node, "volumeAttachment", name)
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()

	pv := v.Spec.PersistentVolume.Name
	va := &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: storagev1.VolumeAttachmentSpec{
			Attacher: csi.Driver,
			NodeName: string(node),
			Source:   storagev1.VolumeAttachmentSource{PersistentVolumeName: &pv},
		},
	}
	_, err := p.client.StorageV1().VolumeAttachments().Create(ctx, va, metav1.CreateOptions{})
	switch {
	case apierrors.IsAlreadyExists(err):
		logger.V(4).Info("VolumeAttachment exists; waiting for it")
	case err != nil:
		return fmt.Errorf("attach volume %q to node %q: create VolumeAttachment %s: %w", v.Name, node, name, err)
	default:
		logger.V(2).Info("Created VolumeAttachment; waiting for it")
	}

	err = p.wait(ctx, name, func(va *storagev1.VolumeAttachment) (bool, error) {
		if va == nil {
			return false, ErrDeletedWhileAttaching
		}
		if va.Status.Attached {
			return true, nil
		}
		if e := va.Status.AttachError; e != nil {
			return false, fmt.Errorf("%w: %s", ErrAttach, e.Message)
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("attach volume %q to node %q: VolumeAttachment %s: %w", v.Name, node, name, err)
	}
	return nil
}

// Detach deletes the VolumeAttachment of v on node and waits until it is
// gone. A detachError on it ends the wait with an error wrapping ErrDetach.
// When v has no spec (found attached in node status after a restart), its
// driver and handle come from its unique name.
func (p *Plugin) Detach(ctx context.Context, v attachdetach.Volume, node types.NodeName) error {
	driver, handle, err := driverAndHandle(v)
	if err != nil {
		return fmt.Errorf("detach volume %q: %w", v.Name, err)
	}
	name := AttachmentName(driver, handle, node)
	logger := klog.FromContext(ctx).WithValues("volume", v.Name, "node", node, "volumeAttachment", name)
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()

	err = p.client.StorageV1().VolumeAttachments().Delete(ctx, name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		logger.V(4).Info("VolumeAttachment already gone")
		return nil
	}
	if err != nil {
		return fmt.Errorf("detach volume %q from node %q: delete VolumeAttachment %s: %w", v.Name, node, name, err)
	}
	logger.V(2).Info("Deleted VolumeAttachment; waiting for it to go")

	err = p.wait(ctx, name, func(va *storagev1.VolumeAttachment) (bool, error) {
		if va == nil {
			return true, nil
		}
		if e := va.Status.DetachError; e != nil {
			return false, fmt.Errorf("%w: %s", ErrDetach, e.Message)
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("detach volume %q from node %q: VolumeAttachment %s: %w", v.Name, node, name, err)
	}
	return nil
}

// VolumesAreAttached reports, for each of vs, whether its VolumeAttachment
// on node says attached; a volume without one is not attached. A volume
// whose VolumeAttachment cannot be read is left out, and so left as it is.
func (p *Plugin) VolumesAreAttached(ctx context.Context, vs []attachdetach.Volume, node types.NodeName) (map[corev1.UniqueVolumeName]bool, error) {
	logger := klog.FromContext(ctx).WithValues("node", node)
	out := make(map[corev1.UniqueVolumeName]bool, len(vs))
	for _, v := range vs {
		driver, handle, err := driverAndHandle(v)
		if err != nil {
			logger.Error(err, "Cannot name the VolumeAttachment of a volume", "volume", v.Name)
			continue
		}
		name := AttachmentName(driver, handle, node)
		va, err := p.get(ctx, name)
		switch {
		case apierrors.IsNotFound(err):
			out[v.Name] = false
		case err != nil:
			logger.Error(err, "Cannot read VolumeAttachment", "volume", v.Name, "volumeAttachment", name)
		default:
			out[v.Name] = va.Status.Attached
		}
	}
	return out, nil
}

// get reads a VolumeAttachment from the lister when there is one.
func (p *Plugin) get(ctx context.Context, name string) (*storagev1.VolumeAttachment, error) {
	if p.lister != nil {
		return p.lister.Get(name)
	}
	return p.client.StorageV1().VolumeAttachments().Get(ctx, name, metav1.GetOptions{})
}

// wait watches the VolumeAttachment name until done says it is done or
// fails, or ctx ends. done gets nil once the object is gone. The watch opens
// before each read of the object, so no change between the two is missed;
// a watch the server closes is opened again.
func (p *Plugin) wait(ctx context.Context, name string, done func(*storagev1.VolumeAttachment) (bool, error)) error {
	vas := p.client.StorageV1().VolumeAttachments()
	for {
		w, err := vas.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("stopped waiting: %w", context.Cause(ctx))
			}
			return fmt.Errorf("watch: %w", err)
		}
		ok, err := p.current(ctx, name, done)
		if ok || err != nil {
			w.Stop()
			return err
		}
		ok, err = p.follow(ctx, w, name, done)
		w.Stop()
		if ok || err != nil {
			return err
		}
	}
}

// current reads the object once and asks check about it.
func (p *Plugin) current(ctx context.Context, name string, check func(*storagev1.VolumeAttachment) (bool, error)) (bool, error) {
	va, err := p.client.StorageV1().VolumeAttachments().Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return check(nil)
	case err != nil:
		if ctx.Err() != nil {
			return false, fmt.Errorf("stopped waiting: %w", context.Cause(ctx))
		}
		return false, fmt.Errorf("get: %w", err)
	}
	return check(va)
}

// follow asks check about each event of w for the object, until check is
// done or fails, ctx ends (an error) or the watch closes (neither).
func (p *Plugin) follow(ctx context.Context, w watch.Interface, name string, check func(*storagev1.VolumeAttachment) (bool, error)) (bool, error) {
	for {
		select {
		case <-ctx.Done():
			return false, fmt.Errorf("stopped waiting: %w", context.Cause(ctx))
		case ev, open := <-w.ResultChan():
			if !open {
				return false, nil
			}
			if ev.Type == watch.Error {
				return false, nil // opened again, and the object read again
			}
			va, isVA := ev.Object.(*storagev1.VolumeAttachment)
			if !isVA || va.Name != name {
				continue
			}
			if ev.Type == watch.Deleted {
				va = nil
			}
			if ok, err := check(va); ok || err != nil {
				return ok, err
			}
		}
	}
}

// driverAndHandle returns v's CSI driver and volume handle, from its spec
// or, without one, from its unique name.
func driverAndHandle(v attachdetach.Volume) (driver, handle string, err error) {
	if csi := v.Spec.CSI(); csi != nil && csi.Driver != "" && csi.VolumeHandle != "" {
		return csi.Driver, csi.VolumeHandle, nil
	}
	if v.Spec == nil {
		prefix := string(attachdetach.CSIVolumeName("", ""))
		prefix = strings.TrimSuffix(prefix, "^")
		if rest, ok := strings.CutPrefix(string(v.Name), prefix); ok {
			if d, h, ok := strings.Cut(rest, "^"); ok && d != "" && h != "" {
				return d, h, nil
			}
		}
	}
	return "", "", ErrNotCSI
}
