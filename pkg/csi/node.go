package csi

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
)

// The node service of a CSI driver listens on a unix socket at a fixed
// place under the agent's root directory: <rootDir>/plugins/<driver>/csi.sock,
// where <driver> is the driver's name (the name its GetPluginInfo returns
// and PersistentVolumes give in spec.csi.driver). A driver's node plugin is
// deployed with that path as its endpoint; nodelet finds it there, both to
// register the driver in the node's CSINode and to stage and publish
// volumes.
const (
	// PluginsDir is the directory under the root directory that holds one
	// directory per driver.
	PluginsDir = "plugins"
	// SocketName is the name of a driver's socket in its directory.
	SocketName = "csi.sock"
)

// Default timeouts of the node service's calls.
const (
	// DefaultInfoTimeout bounds GetPluginInfo, NodeGetInfo and
	// NodeGetCapabilities.
	DefaultInfoTimeout = 10 * time.Second
	// DefaultMountTimeout bounds NodeStageVolume, NodePublishVolume and
	// their reverse: as long as the kubelet gives them.
	DefaultMountTimeout = 2 * time.Minute
)

// ErrDriverNotRegistered is the error for a driver with no socket under the
// plugins directory: it is not (or no longer) running on this node.
var ErrDriverNotRegistered = errors.New("driver is not registered on this node")

// SocketPath is where the node service of driver listens under rootDir.
func SocketPath(rootDir, driver string) string {
	return filepath.Join(rootDir, PluginsDir, driver, SocketName)
}

// ValidDriverName tells whether name can be a driver's directory name: not
// empty, not "." or "..", and without a path separator.
func ValidDriverName(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.ContainsAny(name, "/\x00")
}

// DriverSocket returns the socket of driver under rootDir, or an error
// wrapping ErrDriverNotRegistered when there is none.
func DriverSocket(rootDir, driver string) (string, error) {
	if !ValidDriverName(driver) {
		return "", fmt.Errorf("driver name %q is not usable as a directory name: %w", driver, ErrDriverNotRegistered)
	}
	path := SocketPath(rootDir, driver)
	info, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("driver %q: no socket at %s: %w", driver, path, ErrDriverNotRegistered)
	case err != nil:
		return "", fmt.Errorf("driver %q: %w", driver, err)
	case info.Mode()&fs.ModeSocket == 0:
		return "", fmt.Errorf("driver %q: %s is not a socket: %w", driver, path, ErrDriverNotRegistered)
	}
	return path, nil
}

// NodeClientOptions configure a NodeClient; zero fields take defaults.
type NodeClientOptions struct {
	// InfoTimeout bounds each information call (default DefaultInfoTimeout).
	InfoTimeout time.Duration
	// MountTimeout bounds each stage, publish, unpublish and unstage
	// (default DefaultMountTimeout).
	MountTimeout time.Duration
}

// NodeClient calls the identity and node services of one CSI driver over
// its unix socket. It is safe for concurrent use; Close releases it.
type NodeClient struct {
	socket   string
	conn     *grpc.ClientConn
	identity csipb.IdentityClient
	node     csipb.NodeClient
	opts     NodeClientOptions
}

// NewNodeClient returns a client of the driver listening on socket. It does
// no I/O: the connection is made by the first call, and a call fails at once
// (Unavailable) when the driver does not answer.
func NewNodeClient(socket string, opts NodeClientOptions) (*NodeClient, error) {
	if !filepath.IsAbs(socket) {
		return nil, fmt.Errorf("csi socket %q: must be an absolute path", socket)
	}
	if opts.InfoTimeout < 0 || opts.MountTimeout < 0 {
		return nil, errors.New("csi node client: timeouts must not be negative")
	}
	if opts.InfoTimeout == 0 {
		opts.InfoTimeout = DefaultInfoTimeout
	}
	if opts.MountTimeout == 0 {
		opts.MountTimeout = DefaultMountTimeout
	}
	dial := func(ctx context.Context, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}
	conn, err := grpc.NewClient("passthrough:///csi",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(dial),
	)
	if err != nil {
		return nil, fmt.Errorf("csi socket %s: %w", socket, err)
	}
	return &NodeClient{
		socket:   socket,
		conn:     conn,
		identity: csipb.NewIdentityClient(conn),
		node:     csipb.NewNodeClient(conn),
		opts:     opts,
	}, nil
}

// Close closes the connection.
func (c *NodeClient) Close() error { return c.conn.Close() }

// DriverName asks the identity service for the driver's name.
func (c *NodeClient) DriverName(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.InfoTimeout)
	defer cancel()
	resp, err := c.identity.GetPluginInfo(ctx, &csipb.GetPluginInfoRequest{})
	if err != nil {
		return "", fmt.Errorf("GetPluginInfo on %s: %w", c.socket, err)
	}
	if resp.GetName() == "" {
		return "", fmt.Errorf("GetPluginInfo on %s: the driver gave no name", c.socket)
	}
	return resp.GetName(), nil
}

// NodeInfo is what a driver's NodeGetInfo says of this node.
type NodeInfo struct {
	// NodeID is the driver's name for the node, which the external-attacher
	// passes to ControllerPublishVolume.
	NodeID string
	// MaxVolumes is the most volumes of the driver the node takes; 0 when
	// the driver sets no limit.
	MaxVolumes int64
	// Topology is the node's accessible topology segment.
	Topology map[string]string
}

// TopologyKeys are the keys of the node's topology segment, sorted.
func (i NodeInfo) TopologyKeys() []string {
	if len(i.Topology) == 0 {
		return nil
	}
	keys := make([]string, 0, len(i.Topology))
	for k := range i.Topology {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// NodeGetInfo asks the driver for its view of this node.
func (c *NodeClient) NodeGetInfo(ctx context.Context) (NodeInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.InfoTimeout)
	defer cancel()
	resp, err := c.node.NodeGetInfo(ctx, &csipb.NodeGetInfoRequest{})
	if err != nil {
		return NodeInfo{}, fmt.Errorf("NodeGetInfo on %s: %w", c.socket, err)
	}
	if resp.GetNodeId() == "" {
		return NodeInfo{}, fmt.Errorf("NodeGetInfo on %s: the driver gave no node ID", c.socket)
	}
	if resp.GetMaxVolumesPerNode() < 0 {
		return NodeInfo{}, fmt.Errorf("NodeGetInfo on %s: maxVolumesPerNode %d is negative", c.socket, resp.GetMaxVolumesPerNode())
	}
	info := NodeInfo{NodeID: resp.GetNodeId(), MaxVolumes: resp.GetMaxVolumesPerNode()}
	if segs := resp.GetAccessibleTopology().GetSegments(); len(segs) > 0 {
		info.Topology = make(map[string]string, len(segs))
		for k, v := range segs {
			info.Topology[k] = v
		}
	}
	return info, nil
}

// NodeCapabilities are the node service capabilities nodelet uses.
type NodeCapabilities struct {
	// StageUnstage: the driver stages a volume once per node
	// (NodeStageVolume) before publishing it to each pod.
	StageUnstage bool
	// SingleNodeMultiWriter: the driver knows the SINGLE_NODE_SINGLE_WRITER
	// and SINGLE_NODE_MULTI_WRITER access modes.
	SingleNodeMultiWriter bool
}

// NodeGetCapabilities asks the driver what its node service does.
func (c *NodeClient) NodeGetCapabilities(ctx context.Context) (NodeCapabilities, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.InfoTimeout)
	defer cancel()
	resp, err := c.node.NodeGetCapabilities(ctx, &csipb.NodeGetCapabilitiesRequest{})
	if err != nil {
		return NodeCapabilities{}, fmt.Errorf("NodeGetCapabilities on %s: %w", c.socket, err)
	}
	var caps NodeCapabilities
	for _, capability := range resp.GetCapabilities() {
		switch capability.GetRpc().GetType() {
		case csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME:
			caps.StageUnstage = true
		case csipb.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER:
			caps.SingleNodeMultiWriter = true
		}
	}
	return caps, nil
}

// VolumeCapability is how a volume is used: always as a mounted file
// system (the process provider has no raw block volumes).
type VolumeCapability struct {
	AccessMode csipb.VolumeCapability_AccessMode_Mode
	FSType     string
	MountFlags []string
}

func (v VolumeCapability) proto() *csipb.VolumeCapability {
	return &csipb.VolumeCapability{
		AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{
			FsType: v.FSType, MountFlags: v.MountFlags,
		}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: v.AccessMode},
	}
}

// AccessMode is the CSI access mode of a PersistentVolume with modes, as
// the kubelet chooses it: from the first mode (ReadWriteOnce when there is
// none), with the single-node writer modes only for a driver that knows
// them.
func AccessMode(modes []corev1.PersistentVolumeAccessMode, singleNodeMultiWriter bool) csipb.VolumeCapability_AccessMode_Mode {
	mode := corev1.ReadWriteOnce
	if len(modes) > 0 {
		mode = modes[0]
	}
	switch mode {
	case corev1.ReadOnlyMany:
		return csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
	case corev1.ReadWriteMany:
		return csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER
	case corev1.ReadWriteOncePod:
		if singleNodeMultiWriter {
			return csipb.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER
		}
		return csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
	}
	if singleNodeMultiWriter {
		return csipb.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER
	}
	return csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
}

// VolumeRequest is what the stage and publish calls share.
type VolumeRequest struct {
	VolumeHandle string
	// PublishContext is the attachment metadata of the volume's
	// VolumeAttachment; empty for a driver that needs no attach.
	PublishContext map[string]string
	// VolumeContext is the PersistentVolume's spec.csi.volumeAttributes,
	// plus what the CSIDriver asks for (pod information).
	VolumeContext map[string]string
	Capability    VolumeCapability
	Secrets       map[string]string
}

// StageRequest stages a volume at StagingPath, once for the node.
type StageRequest struct {
	VolumeRequest
	StagingPath string
}

// PublishRequest publishes a volume at TargetPath for one pod.
type PublishRequest struct {
	VolumeRequest
	// StagingPath is where the volume was staged; empty for a driver
	// without STAGE_UNSTAGE_VOLUME.
	StagingPath string
	TargetPath  string
	ReadOnly    bool
}

// NodeStageVolume stages the volume. The caller creates StagingPath.
func (c *NodeClient) NodeStageVolume(ctx context.Context, req StageRequest) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.MountTimeout)
	defer cancel()
	_, err := c.node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{
		VolumeId:          req.VolumeHandle,
		PublishContext:    req.PublishContext,
		StagingTargetPath: req.StagingPath,
		VolumeCapability:  req.Capability.proto(),
		Secrets:           req.Secrets,
		VolumeContext:     req.VolumeContext,
	})
	if err != nil {
		return fmt.Errorf("NodeStageVolume of volume %q at %s: %w", req.VolumeHandle, req.StagingPath, err)
	}
	return nil
}

// NodeUnstageVolume undoes NodeStageVolume.
func (c *NodeClient) NodeUnstageVolume(ctx context.Context, handle, stagingPath string) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.MountTimeout)
	defer cancel()
	_, err := c.node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: handle, StagingTargetPath: stagingPath})
	if err != nil {
		return fmt.Errorf("NodeUnstageVolume of volume %q at %s: %w", handle, stagingPath, err)
	}
	return nil
}

// NodePublishVolume publishes the volume. The caller creates the parent of
// TargetPath; the driver creates TargetPath itself.
func (c *NodeClient) NodePublishVolume(ctx context.Context, req PublishRequest) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.MountTimeout)
	defer cancel()
	_, err := c.node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{
		VolumeId:          req.VolumeHandle,
		PublishContext:    req.PublishContext,
		StagingTargetPath: req.StagingPath,
		TargetPath:        req.TargetPath,
		VolumeCapability:  req.Capability.proto(),
		Readonly:          req.ReadOnly,
		Secrets:           req.Secrets,
		VolumeContext:     req.VolumeContext,
	})
	if err != nil {
		return fmt.Errorf("NodePublishVolume of volume %q at %s: %w", req.VolumeHandle, req.TargetPath, err)
	}
	return nil
}

// NodeUnpublishVolume undoes NodePublishVolume.
func (c *NodeClient) NodeUnpublishVolume(ctx context.Context, handle, targetPath string) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.MountTimeout)
	defer cancel()
	_, err := c.node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: handle, TargetPath: targetPath})
	if err != nil {
		return fmt.Errorf("NodeUnpublishVolume of volume %q at %s: %w", handle, targetPath, err)
	}
	return nil
}
