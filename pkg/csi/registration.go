package csi

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
)

// Registration defaults.
const (
	// DefaultScanInterval is how often the plugins directory is scanned for
	// driver sockets.
	DefaultScanInterval = 2 * time.Second
	// DefaultResyncPeriod is how often the CSINode is read and corrected
	// even when no driver came or went.
	DefaultResyncPeriod = time.Minute
	// maxProbeBackOff caps the wait before a driver whose socket answers
	// badly is asked again.
	maxProbeBackOff = time.Minute
)

// errNodeNotRegistered is the error of a CSINode sync before the Node
// exists: the CSINode's owner reference needs its UID.
var errNodeNotRegistered = errors.New("node is not registered yet")

// RegistrarOptions configure a Registrar; zero fields take defaults.
type RegistrarOptions struct {
	// ScanInterval is how often the plugins directory is scanned (default
	// DefaultScanInterval).
	ScanInterval time.Duration
	// ResyncPeriod is how often the CSINode is checked without a change
	// (default DefaultResyncPeriod).
	ResyncPeriod time.Duration
	// Client configures the calls to the drivers.
	Client NodeClientOptions
	// Clock drives the scans; default the real clock.
	Clock clock.Clock
}

func (o *RegistrarOptions) validate() error {
	var errs []error
	if o.ScanInterval < 0 {
		errs = append(errs, fmt.Errorf("scanInterval %v: must not be negative", o.ScanInterval))
	}
	if o.ResyncPeriod < 0 {
		errs = append(errs, fmt.Errorf("resyncPeriod %v: must not be negative", o.ResyncPeriod))
	}
	return errors.Join(errs...)
}

// Registrar registers the CSI drivers of one node: it finds their sockets
// under <rootDir>/plugins/*/csi.sock, asks each driver for its node ID,
// topology and volume limit (NodeGetInfo), and keeps the node's
// storage.k8s.io/v1 CSINode (owned by the Node) listing exactly those
// drivers. A driver whose socket goes away is removed from it. The
// external-attacher reads the node ID from there.
//
// It writes only the CSINode named after its node.
type Registrar struct {
	client   kubernetes.Interface
	nodeName string
	rootDir  string
	opts     RegistrarOptions

	// sockets are the driver sockets found, by driver name.
	sockets map[string]*driverSocket
	// dirty says the CSINode may no longer list the sockets' drivers;
	// lastSync is when it last did.
	dirty    bool
	lastSync time.Time
}

// driverSocket is one driver's socket and what it answered.
type driverSocket struct {
	path string
	// file tells a socket from the one a restarted driver makes in its
	// place.
	file os.FileInfo
	// info is the answer to NodeGetInfo; nil until the driver answered.
	info *NodeInfo
	// failures and retryAt pace the questions to a driver that did not
	// answer well.
	failures int
	retryAt  time.Time
}

// NewRegistrar returns the registrar of nodeName's drivers under rootDir.
// It does no I/O.
func NewRegistrar(client kubernetes.Interface, nodeName, rootDir string, opts RegistrarOptions) (*Registrar, error) {
	var errs []error
	if client == nil {
		errs = append(errs, errors.New("client is required"))
	}
	if nodeName == "" {
		errs = append(errs, errors.New("node name is required"))
	}
	if !filepath.IsAbs(rootDir) {
		errs = append(errs, fmt.Errorf("root dir %q: must be an absolute path", rootDir))
	}
	if err := opts.validate(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("invalid csi registrar: %w", err)
	}
	if opts.ScanInterval == 0 {
		opts.ScanInterval = DefaultScanInterval
	}
	if opts.ResyncPeriod == 0 {
		opts.ResyncPeriod = DefaultResyncPeriod
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &Registrar{
		client: client, nodeName: nodeName, rootDir: rootDir, opts: opts,
		sockets: map[string]*driverSocket{}, dirty: true,
	}, nil
}

// Run scans for drivers and keeps the CSINode current until ctx ends. It
// returns nil then; failures are logged and retried at the next scan.
func (r *Registrar) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("node", r.nodeName)
	ctx = klog.NewContext(ctx, logger)
	logger.Info("Starting CSI driver registration", "dir", filepath.Join(r.rootDir, PluginsDir), "interval", r.opts.ScanInterval)
	timer := r.opts.Clock.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C():
		}
		r.scan(ctx)
		if err := r.syncIfNeeded(ctx); err != nil {
			if errors.Is(err, errNodeNotRegistered) {
				logger.V(2).Info("Waiting for the Node before writing its CSINode")
			} else if ctx.Err() == nil {
				logger.Error(err, "Writing the CSINode failed; retrying")
			}
		}
		timer.Reset(r.opts.ScanInterval)
	}
}

// scan finds the driver sockets and asks new ones (and ones a driver made
// anew) for their node information.
func (r *Registrar) scan(ctx context.Context) {
	logger := klog.FromContext(ctx)
	found, err := r.findSockets()
	if err != nil {
		logger.Error(err, "Scanning for CSI driver sockets failed")
		return
	}
	for name := range r.sockets {
		if _, ok := found[name]; !ok {
			logger.Info("CSI driver socket is gone; unregistering the driver", "driver", name)
			delete(r.sockets, name)
			r.dirty = true
		}
	}
	now := r.opts.Clock.Now()
	for name, s := range found {
		known, ok := r.sockets[name]
		if !ok || !sameSocket(known, s) {
			r.sockets[name] = s
			known = s
			r.dirty = true
		}
		if known.info != nil || now.Before(known.retryAt) {
			continue
		}
		info, err := r.probe(ctx, name, known.path)
		if err != nil {
			known.failures++
			wait := min(r.opts.ScanInterval<<min(known.failures, 16), maxProbeBackOff)
			known.retryAt = now.Add(wait)
			logger.Error(err, "CSI driver did not register; asking again later", "driver", name, "socket", known.path, "retryIn", wait)
			continue
		}
		known.info, known.failures = &info, 0
		r.dirty = true
		logger.Info("Registered CSI driver", "driver", name, "nodeID", info.NodeID, "maxVolumes", info.MaxVolumes, "topologyKeys", info.TopologyKeys())
	}
}

// findSockets lists the sockets at <rootDir>/plugins/*/csi.sock.
func (r *Registrar) findSockets() (map[string]*driverSocket, error) {
	dir := filepath.Join(r.rootDir, PluginsDir)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", dir, err)
	}
	found := map[string]*driverSocket{}
	for _, e := range entries {
		if !e.IsDir() || !ValidDriverName(e.Name()) {
			continue
		}
		path := SocketPath(r.rootDir, e.Name())
		info, err := os.Stat(path)
		if err != nil || info.Mode()&fs.ModeSocket == 0 {
			continue
		}
		found[e.Name()] = &driverSocket{path: path, file: info}
	}
	return found, nil
}

// sameSocket tells whether two scans found the same socket file.
func sameSocket(a, b *driverSocket) bool {
	return a.path == b.path && os.SameFile(a.file, b.file) && a.file.ModTime().Equal(b.file.ModTime())
}

// probe checks that the driver at socket is the one its directory names
// and asks it for its node information.
func (r *Registrar) probe(ctx context.Context, name, socket string) (NodeInfo, error) {
	c, err := NewNodeClient(socket, r.opts.Client)
	if err != nil {
		return NodeInfo{}, err
	}
	defer c.Close()
	got, err := c.DriverName(ctx)
	if err != nil {
		return NodeInfo{}, err
	}
	if got != name {
		return NodeInfo{}, fmt.Errorf("driver at %s calls itself %q, not %q as its directory says", socket, got, name)
	}
	return c.NodeGetInfo(ctx)
}

// syncIfNeeded writes the CSINode when the drivers changed, a write
// failed, or the resync period passed.
func (r *Registrar) syncIfNeeded(ctx context.Context) error {
	if !r.dirty && r.opts.Clock.Since(r.lastSync) < r.opts.ResyncPeriod {
		return nil
	}
	if err := r.sync(ctx); err != nil {
		r.dirty = true
		return err
	}
	r.dirty, r.lastSync = false, r.opts.Clock.Now()
	return nil
}

// sync makes the CSINode list the registered drivers, owned by the Node.
// A driver whose socket is there but has not answered yet keeps the entry
// the CSINode has for it, so that a slow driver after an agent restart is
// not unregistered in between.
func (r *Registrar) sync(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	node, err := r.client.CoreV1().Nodes().Get(ctx, r.nodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return errNodeNotRegistered
	}
	if err != nil {
		return fmt.Errorf("get node %s: %w", r.nodeName, err)
	}
	owner := metav1.OwnerReference{
		APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID,
	}
	csiNodes := r.client.StorageV1().CSINodes()
	current, err := csiNodes.Get(ctx, r.nodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		obj := &storagev1.CSINode{
			ObjectMeta: metav1.ObjectMeta{Name: r.nodeName, OwnerReferences: []metav1.OwnerReference{owner}},
			Spec:       storagev1.CSINodeSpec{Drivers: r.drivers(nil)},
		}
		if _, err := csiNodes.Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create CSINode %s: %w", r.nodeName, err)
		}
		logger.V(2).Info("Created CSINode", "drivers", len(obj.Spec.Drivers))
		return nil
	}
	if err != nil {
		return fmt.Errorf("get CSINode %s: %w", r.nodeName, err)
	}
	want := current.DeepCopy()
	want.OwnerReferences = withOwner(want.OwnerReferences, owner)
	want.Spec.Drivers = r.drivers(current.Spec.Drivers)
	if equality.Semantic.DeepEqual(want, current) {
		return nil
	}
	if _, err := csiNodes.Update(ctx, want, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update CSINode %s: %w", r.nodeName, err)
	}
	logger.V(2).Info("Updated CSINode", "drivers", len(want.Spec.Drivers))
	return nil
}

// drivers is the CSINode's driver list: one entry per registered driver,
// sorted by name; current's entry for a driver that has not answered yet.
func (r *Registrar) drivers(current []storagev1.CSINodeDriver) []storagev1.CSINodeDriver {
	out := []storagev1.CSINodeDriver{}
	for name, s := range r.sockets {
		if s.info == nil {
			for _, d := range current {
				if d.Name == name {
					out = append(out, d)
				}
			}
			continue
		}
		d := storagev1.CSINodeDriver{Name: name, NodeID: s.info.NodeID, TopologyKeys: s.info.TopologyKeys()}
		if s.info.MaxVolumes > 0 {
			d.Allocatable = &storagev1.VolumeNodeResources{Count: ptr.To(int32(min(s.info.MaxVolumes, int64(1<<31-1))))}
		}
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// withOwner makes owner the only Node among refs: a CSINode left from an
// earlier Node of the same name is taken over.
func withOwner(refs []metav1.OwnerReference, owner metav1.OwnerReference) []metav1.OwnerReference {
	nodes, has := 0, false
	for _, ref := range refs {
		if ref.Kind == "Node" && ref.APIVersion == "v1" {
			nodes++
			has = has || (ref.Name == owner.Name && ref.UID == owner.UID)
		}
	}
	if nodes == 1 && has {
		return refs
	}
	out := make([]metav1.OwnerReference, 0, len(refs)+1)
	for _, ref := range refs {
		if ref.Kind == "Node" && ref.APIVersion == "v1" {
			continue
		}
		out = append(out, ref)
	}
	return append(out, owner)
}
