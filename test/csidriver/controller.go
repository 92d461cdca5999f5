package csidriver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// PublishContextPath is the publish context key that carries the volume's
// directory from ControllerPublishVolume to the node calls.
const PublishContextPath = "path"

// volumeIDPattern is what a volume ID must look like: it becomes a directory
// name, so it must not be able to leave DataDir.
var volumeIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// listTokenPrefix starts every ListVolumes token; the volume ID after it is
// the last one of the previous page.
const listTokenPrefix = "after:"

// publication is a volume's publication to one node.
type publication struct {
	mode     csi.VolumeCapability_AccessMode_Mode
	readOnly bool
}

// controllerServer is the driver's Controller service.
type controllerServer struct {
	csi.UnimplementedControllerServer
	d *Driver
}

func (s controllerServer) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	var caps []*csi.ControllerServiceCapability
	for _, t := range []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME,
		csi.ControllerServiceCapability_RPC_PUBLISH_READONLY,
		csi.ControllerServiceCapability_RPC_LIST_VOLUMES,
		csi.ControllerServiceCapability_RPC_LIST_VOLUMES_PUBLISHED_NODES,
	} {
		caps = append(caps, &csi.ControllerServiceCapability{
			Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: t}},
		})
	}
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: caps}, nil
}

func (s controllerServer) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "name is required")
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "volume_capabilities are required")
	}
	for i, c := range req.GetVolumeCapabilities() {
		if err := checkCapability(c); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "volume_capabilities[%d]: %v", i, err)
		}
	}
	if req.GetVolumeContentSource() != nil {
		return nil, status.Error(codes.InvalidArgument, "volume_content_source: snapshots and clones are not supported")
	}
	required, limit := req.GetCapacityRange().GetRequiredBytes(), req.GetCapacityRange().GetLimitBytes()
	if required < 0 || limit < 0 {
		return nil, status.Error(codes.InvalidArgument, "capacity_range: bytes must not be negative")
	}
	if limit > 0 && required > limit {
		return nil, status.Errorf(codes.InvalidArgument, "capacity_range: required_bytes %d exceed limit_bytes %d", required, limit)
	}

	name := volumeIDFor(req.GetName())
	d := s.d
	d.mu.Lock()
	defer d.mu.Unlock()
	exists, err := d.volumeExists(name)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "look up volume %s: %v", name, err)
	}
	if exists {
		capacity := d.capacity[name]
		if capacity != 0 && (capacity < required || limit > 0 && capacity > limit) {
			return nil, status.Errorf(codes.AlreadyExists, "volume %s exists with capacity %d, which does not fit capacity_range [%d, %d]", name, capacity, required, limit)
		}
		return &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: name, CapacityBytes: capacity}}, nil
	}

	capacity := required
	if capacity == 0 {
		capacity = limit
	}
	if err := os.MkdirAll(d.opts.DataDir, 0o755); err != nil {
		return nil, status.Errorf(codes.Internal, "create data directory: %v", err)
	}
	dir := d.VolumePath(name)
	if err := os.Mkdir(dir, 0o777); err != nil {
		return nil, status.Errorf(codes.Internal, "create volume directory: %v", err)
	}
	// The volume is for any pod user, whatever the umask.
	if err := os.Chmod(dir, 0o777); err != nil {
		return nil, status.Errorf(codes.Internal, "make volume directory writable: %v", err)
	}
	d.capacity[name] = capacity
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: name, CapacityBytes: capacity}}, nil
}

func (s controllerServer) DeleteVolume(_ context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	id := req.GetVolumeId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	}
	if !volumeIDPattern.MatchString(id) {
		// No such volume can exist, so it is deleted already.
		return &csi.DeleteVolumeResponse{}, nil
	}
	d := s.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if nodes := d.publishedNodes(id); len(nodes) > 0 {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is published to nodes %s", id, strings.Join(nodes, ", "))
	}
	if err := os.RemoveAll(d.VolumePath(id)); err != nil {
		return nil, status.Errorf(codes.Internal, "remove volume directory: %v", err)
	}
	delete(d.capacity, id)
	delete(d.published, id)
	return &csi.DeleteVolumeResponse{}, nil
}

func (s controllerServer) ControllerPublishVolume(_ context.Context, req *csi.ControllerPublishVolumeRequest) (*csi.ControllerPublishVolumeResponse, error) {
	id, nodeID := req.GetVolumeId(), req.GetNodeId()
	switch {
	case id == "":
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	case nodeID == "":
		return nil, status.Error(codes.InvalidArgument, "node_id is required")
	case req.GetVolumeCapability() == nil:
		return nil, status.Error(codes.InvalidArgument, "volume_capability is required")
	}

	d := s.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.mustExist(id); err != nil {
		return nil, err
	}
	if !d.nodes[nodeID] {
		return nil, status.Errorf(codes.NotFound, "node %s does not exist", nodeID)
	}
	if err := checkCapability(req.GetVolumeCapability()); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "volume_capability: %v", err)
	}

	want := publication{mode: req.GetVolumeCapability().GetAccessMode().GetMode(), readOnly: req.GetReadonly()}
	resp := &csi.ControllerPublishVolumeResponse{PublishContext: map[string]string{PublishContextPath: d.VolumePath(id)}}
	if got, ok := d.published[id][nodeID]; ok {
		if got != want {
			return nil, status.Errorf(codes.AlreadyExists, "volume %s is published to node %s with access mode %s and readonly %t", id, nodeID, got.mode, got.readOnly)
		}
		return resp, nil
	}
	for other, p := range d.published[id] {
		if err := conflict(want, p); err != nil {
			return nil, status.Errorf(codes.FailedPrecondition, "volume %s is published to node %s: %v", id, other, err)
		}
	}
	if limit := d.opts.MaxVolumesPerNode; limit > 0 && d.countOnNode(nodeID) >= limit {
		return nil, status.Errorf(codes.ResourceExhausted, "node %s has the maximum of %d volumes published", nodeID, limit)
	}
	if d.published[id] == nil {
		d.published[id] = map[string]publication{}
	}
	d.published[id][nodeID] = want
	return resp, nil
}

func (s controllerServer) ControllerUnpublishVolume(_ context.Context, req *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
	id := req.GetVolumeId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	}
	d := s.d
	d.mu.Lock()
	defer d.mu.Unlock()
	// An empty node ID unpublishes the volume from every node; a volume
	// or node that is not published is unpublished already.
	if nodeID := req.GetNodeId(); nodeID != "" {
		delete(d.published[id], nodeID)
		if len(d.published[id]) > 0 {
			return &csi.ControllerUnpublishVolumeResponse{}, nil
		}
	}
	delete(d.published, id)
	return &csi.ControllerUnpublishVolumeResponse{}, nil
}

func (s controllerServer) ValidateVolumeCapabilities(_ context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	id := req.GetVolumeId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "volume_capabilities are required")
	}
	d := s.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.mustExist(id); err != nil {
		return nil, err
	}
	for i, c := range req.GetVolumeCapabilities() {
		if err := checkCapability(c); err != nil {
			return &csi.ValidateVolumeCapabilitiesResponse{Message: fmt.Sprintf("volume_capabilities[%d]: %v", i, err)}, nil
		}
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext:      req.GetVolumeContext(),
		VolumeCapabilities: req.GetVolumeCapabilities(),
		Parameters:         req.GetParameters(),
		MutableParameters:  req.GetMutableParameters(),
	}}, nil
}

func (s controllerServer) ListVolumes(_ context.Context, req *csi.ListVolumesRequest) (*csi.ListVolumesResponse, error) {
	if req.GetMaxEntries() < 0 {
		return nil, status.Error(codes.InvalidArgument, "max_entries must not be negative")
	}
	after := ""
	if token := req.GetStartingToken(); token != "" {
		var ok bool
		after, ok = strings.CutPrefix(token, listTokenPrefix)
		if !ok || !volumeIDPattern.MatchString(after) {
			return nil, status.Errorf(codes.Aborted, "starting_token %q was not returned by this driver", token)
		}
	}

	d := s.d
	d.mu.Lock()
	defer d.mu.Unlock()
	ids, err := d.volumeIDs()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "list volumes: %v", err)
	}
	// A token names the last volume of the previous page, so a page goes on
	// after it even if that volume was deleted meanwhile.
	start, _ := slices.BinarySearch(ids, after)
	if start < len(ids) && ids[start] == after {
		start++
	}
	ids = ids[start:]
	resp := &csi.ListVolumesResponse{}
	if limit := int(req.GetMaxEntries()); limit > 0 && len(ids) > limit {
		ids = ids[:limit]
		resp.NextToken = listTokenPrefix + ids[limit-1]
	}
	for _, id := range ids {
		resp.Entries = append(resp.Entries, &csi.ListVolumesResponse_Entry{
			Volume: &csi.Volume{VolumeId: id, CapacityBytes: d.capacity[id]},
			Status: &csi.ListVolumesResponse_VolumeStatus{PublishedNodeIds: d.publishedNodes(id)},
		})
	}
	return resp, nil
}

// volumeIDFor returns the ID of the volume with the given name: the name
// itself when it can be a directory name, otherwise a hash of it. The same
// name always gives the same ID, which makes CreateVolume idempotent.
func volumeIDFor(name string) string {
	if volumeIDPattern.MatchString(name) {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return "vol-" + hex.EncodeToString(sum[:16])
}

// PublishedNodes returns the sorted IDs of the nodes the volume is
// controller-published to.
func (d *Driver) PublishedNodes(volumeID string) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.publishedNodes(volumeID)
}

// publishedNodes is PublishedNodes with d.mu held.
func (d *Driver) publishedNodes(volumeID string) []string {
	var nodes []string
	for n := range d.published[volumeID] {
		nodes = append(nodes, n)
	}
	slices.Sort(nodes)
	return nodes
}

// countOnNode returns how many volumes are published to a node; d.mu is held.
func (d *Driver) countOnNode(nodeID string) int64 {
	var n int64
	for _, nodes := range d.published {
		if _, ok := nodes[nodeID]; ok {
			n++
		}
	}
	return n
}

// volumeExists says whether the volume's directory exists. The directories
// are the volumes: one made by hand in DataDir is a volume too, of unknown
// capacity. A record left for a directory removed by hand is dropped. d.mu is
// held.
func (d *Driver) volumeExists(id string) (bool, error) {
	if !volumeIDPattern.MatchString(id) {
		return false, nil
	}
	fi, err := os.Stat(d.VolumePath(id))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		delete(d.capacity, id)
		return false, nil
	case err != nil:
		return false, err
	}
	return fi.IsDir(), nil
}

// mustExist returns a NotFound status unless the volume exists; d.mu is held.
func (d *Driver) mustExist(id string) error {
	exists, err := d.volumeExists(id)
	if err != nil {
		return status.Errorf(codes.Internal, "look up volume %s: %v", id, err)
	}
	if !exists {
		return status.Errorf(codes.NotFound, "volume %s does not exist", id)
	}
	return nil
}

// volumeIDs returns the sorted IDs of all volumes in DataDir; d.mu is held.
func (d *Driver) volumeIDs() ([]string, error) {
	entries, err := os.ReadDir(d.opts.DataDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range entries {
		if e.IsDir() && volumeIDPattern.MatchString(e.Name()) {
			ids = append(ids, e.Name())
		}
	}
	// os.ReadDir sorts by name already; sorting again keeps the binary
	// search in ListVolumes independent of that.
	slices.Sort(ids)
	return ids, nil
}

// checkCapability accepts mount volumes in the access modes that need no
// SINGLE_NODE_MULTI_WRITER capability.
func checkCapability(c *csi.VolumeCapability) error {
	if c == nil {
		return errors.New("capability is empty")
	}
	if c.GetMount() == nil {
		if c.GetBlock() != nil {
			return errors.New("block volumes are not supported")
		}
		return errors.New("access_type is required")
	}
	switch m := c.GetAccessMode().GetMode(); m {
	case csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY,
		csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY,
		csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER,
		csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER:
		return nil
	case csi.VolumeCapability_AccessMode_UNKNOWN:
		return errors.New("access_mode is required")
	default:
		return fmt.Errorf("access mode %s is not supported", m)
	}
}

// conflict says why a volume cannot be published as want while it is
// published to another node as other.
func conflict(want, other publication) error {
	switch {
	case singleNode(want.mode):
		return fmt.Errorf("access mode %s allows one node only", want.mode)
	case singleNode(other.mode):
		return fmt.Errorf("it is published there with access mode %s, which allows one node only", other.mode)
	case want.mode == csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER && !want.readOnly &&
		other.mode == csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER && !other.readOnly:
		return errors.New("it is published there read-write and access mode MULTI_NODE_SINGLE_WRITER allows one writer only")
	}
	return nil
}

func singleNode(m csi.VolumeCapability_AccessMode_Mode) bool {
	switch m {
	case csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER:
		return true
	}
	return false
}

func readOnlyMode(m csi.VolumeCapability_AccessMode_Mode) bool {
	return m == csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY ||
		m == csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
}
