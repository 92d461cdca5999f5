package csidriver

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sync"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// VendorVersion is the version GetPluginInfo reports.
const VendorVersion = "0.1.0"

// pluginName is the form the CSI specification gives for a plugin name.
var pluginName = regexp.MustCompile(`^[a-zA-Z][A-Za-z0-9.-]{0,61}[a-zA-Z]$`)

// Options configure a Driver. Name, NodeID and DataDir are required.
type Options struct {
	// Name is the driver name GetPluginInfo returns, such as
	// "csi.nodelet.test". It is also the attacher name in VolumeAttachments.
	Name string
	// NodeID is the node ID NodeGetInfo returns.
	NodeID string
	// DataDir is the absolute path of the directory that holds one
	// subdirectory per volume. Serve creates it.
	DataDir string
	// MaxVolumesPerNode is reported by NodeGetInfo and enforced by
	// ControllerPublishVolume for every node; zero means no limit.
	MaxVolumesPerNode int64
	// OtherNodeIDs are the IDs of further nodes that ControllerPublishVolume
	// accepts besides NodeID, for tests with several nodes and one
	// controller. AddNodeID adds more later.
	OtherNodeIDs []string
	// DisableStaging leaves STAGE_UNSTAGE_VOLUME out of the node
	// capabilities: NodeStageVolume is then unimplemented and
	// NodePublishVolume bind-mounts the volume directory itself.
	DisableStaging bool
	// RequirePublishContext makes NodeStageVolume (NodePublishVolume when
	// staging is disabled) fail with FAILED_PRECONDITION unless the request
	// carries the publish context that ControllerPublishVolume returned.
	RequirePublishContext bool
	// Clock stamps the call log; the real clock when nil.
	Clock clock.PassiveClock
}

func (o *Options) validate() error {
	var errs []error
	if !pluginName.MatchString(o.Name) {
		errs = append(errs, fmt.Errorf("name %q: must be 2 to 63 characters, letters, digits, '.' and '-', starting and ending with a letter", o.Name))
	}
	if o.NodeID == "" {
		errs = append(errs, errors.New("node ID: must not be empty"))
	}
	if !filepath.IsAbs(o.DataDir) {
		errs = append(errs, fmt.Errorf("data directory %q: must be an absolute path", o.DataDir))
	}
	if o.MaxVolumesPerNode < 0 {
		errs = append(errs, fmt.Errorf("max volumes per node %d: must not be negative", o.MaxVolumesPerNode))
	}
	for _, id := range o.OtherNodeIDs {
		if id == "" {
			errs = append(errs, errors.New("other node IDs: must not contain an empty ID"))
		}
	}
	return errors.Join(errs...)
}

// Driver is a CSI driver whose volumes are directories. All its methods are
// safe for concurrent use.
type Driver struct {
	opts  Options
	clock clock.PassiveClock
	ready chan struct{}

	// mu guards everything below it.
	mu        sync.Mutex
	serving   bool
	readyDone bool
	nodes     map[string]bool
	// capacity holds what CreateVolume was asked for; volumes found on
	// disk without a record have unknown (zero) capacity.
	capacity map[string]int64
	// published maps a volume ID to the nodes it is published to.
	published map[string]map[string]publication
	faults    map[callKey]error
	holds     map[callKey]chan struct{}
	calls     []Call

	// mountMu serialises the node operations, which check and change the
	// mount table.
	mountMu sync.Mutex
}

// New returns a driver configured by opts. It does no I/O.
func New(opts Options) (*Driver, error) {
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("invalid csi driver options: %w", err)
	}
	opts.DataDir = filepath.Clean(opts.DataDir)
	d := &Driver{
		opts:      opts,
		clock:     opts.Clock,
		ready:     make(chan struct{}),
		nodes:     map[string]bool{opts.NodeID: true},
		capacity:  map[string]int64{},
		published: map[string]map[string]publication{},
		faults:    map[callKey]error{},
		holds:     map[callKey]chan struct{}{},
	}
	if d.clock == nil {
		d.clock = clock.RealClock{}
	}
	for _, id := range opts.OtherNodeIDs {
		d.nodes[id] = true
	}
	return d, nil
}

// Name returns the driver name.
func (d *Driver) Name() string { return d.opts.Name }

// NodeID returns the node ID this driver's node service reports.
func (d *Driver) NodeID() string { return d.opts.NodeID }

// VolumePath returns the directory that holds the volume with the given ID.
func (d *Driver) VolumePath(volumeID string) string {
	return filepath.Join(d.opts.DataDir, volumeID)
}

// AddNodeID makes ControllerPublishVolume accept the node with the given ID.
func (d *Driver) AddNodeID(nodeID string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.nodes[nodeID] = true
}

// Ready is closed once the first Serve listens on its socket.
func (d *Driver) Ready() <-chan struct{} { return d.ready }

// Serve serves the Identity, Controller and Node services on a unix socket
// at socketPath until ctx is done, then stops the server, cancelling calls
// in flight, and removes the socket. It creates DataDir and the socket's
// directory, and replaces a stale socket left by an earlier run. A driver
// serves one socket at a time.
func (d *Driver) Serve(ctx context.Context, socketPath string) error {
	d.mu.Lock()
	if d.serving {
		d.mu.Unlock()
		return errors.New("csi driver is already serving")
	}
	d.serving = true
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		d.serving = false
		d.mu.Unlock()
	}()

	if err := os.MkdirAll(d.opts.DataDir, 0o755); err != nil {
		return fmt.Errorf("create data directory: %w", err)
	}
	lis, err := listenUnix(socketPath)
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(socketPath) }()

	logger := klog.FromContext(ctx).WithValues("driver", d.opts.Name, "nodeID", d.opts.NodeID)
	srv := grpc.NewServer(grpc.UnaryInterceptor(d.interceptor(logger)))
	csi.RegisterIdentityServer(srv, identityServer{d: d})
	csi.RegisterControllerServer(srv, controllerServer{d: d})
	csi.RegisterNodeServer(srv, nodeServer{d: d})

	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	logger.V(2).Info("Serving CSI", "socket", socketPath)
	d.mu.Lock()
	if !d.readyDone {
		d.readyDone = true
		close(d.ready)
	}
	d.mu.Unlock()

	select {
	case <-ctx.Done():
		srv.Stop()
		<-served
		logger.V(2).Info("Stopped serving CSI", "socket", socketPath)
		return nil
	case err := <-served:
		return fmt.Errorf("serve csi on %s: %w", socketPath, err)
	}
}

// listenUnix listens on a unix socket at path, creating its directory and
// removing a socket that an earlier run left behind.
func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("create socket directory: %w", err)
	}
	fi, err := os.Lstat(path)
	switch {
	case err == nil && fi.Mode().Type() == fs.ModeSocket:
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove stale socket: %w", err)
		}
	case err == nil:
		return nil, fmt.Errorf("socket path %s exists and is not a socket", path)
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("check socket path: %w", err)
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	return lis, nil
}
