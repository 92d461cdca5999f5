package csidriver

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// nodeServer is the driver's Node service.
type nodeServer struct {
	csi.UnimplementedNodeServer
	d *Driver
}

func (s nodeServer) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: s.d.opts.NodeID, MaxVolumesPerNode: s.d.opts.MaxVolumesPerNode}, nil
}

func (s nodeServer) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	resp := &csi.NodeGetCapabilitiesResponse{}
	if !s.d.opts.DisableStaging {
		resp.Capabilities = append(resp.Capabilities, &csi.NodeServiceCapability{
			Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{
				Type: csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME,
			}},
		})
	}
	return resp, nil
}

func (s nodeServer) NodeStageVolume(ctx context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	d := s.d
	if d.opts.DisableStaging {
		return nil, status.Error(codes.Unimplemented, "staging is disabled")
	}
	id, staging := req.GetVolumeId(), req.GetStagingTargetPath()
	switch {
	case id == "":
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	case staging == "":
		return nil, status.Error(codes.InvalidArgument, "staging_target_path is required")
	case req.GetVolumeCapability() == nil:
		return nil, status.Error(codes.InvalidArgument, "volume_capability is required")
	}
	if err := d.checkNodeVolume(id, req.GetVolumeCapability()); err != nil {
		return nil, err
	}
	if err := d.checkPublishContext(id, req.GetPublishContext()); err != nil {
		return nil, err
	}
	if fi, err := os.Stat(staging); err != nil || !fi.IsDir() {
		return nil, status.Errorf(codes.FailedPrecondition, "staging_target_path %s must be an existing directory", staging)
	}

	d.mountMu.Lock()
	defer d.mountMu.Unlock()
	m, mounted, err := findMount(staging)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "check staging path: %v", err)
	}
	readOnly := readOnlyMode(req.GetVolumeCapability().GetAccessMode().GetMode())
	if mounted {
		if m.readOnly != readOnly {
			return nil, status.Errorf(codes.AlreadyExists, "volume %s is staged at %s with read-only %t", id, staging, m.readOnly)
		}
		return &csi.NodeStageVolumeResponse{}, nil
	}
	if err := bindMount(d.VolumePath(id), staging, readOnly); err != nil {
		return nil, status.Errorf(codes.Internal, "stage volume %s: %v", id, err)
	}
	klog.FromContext(ctx).V(3).Info("Staged volume", "stagingPath", staging, "readOnly", readOnly)
	return &csi.NodeStageVolumeResponse{}, nil
}

func (s nodeServer) NodeUnstageVolume(ctx context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	d := s.d
	if d.opts.DisableStaging {
		return nil, status.Error(codes.Unimplemented, "staging is disabled")
	}
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	case req.GetStagingTargetPath() == "":
		return nil, status.Error(codes.InvalidArgument, "staging_target_path is required")
	}
	d.mountMu.Lock()
	defer d.mountMu.Unlock()
	// The CO owns the staging directory; only the mount is the driver's.
	if err := unmountAll(req.GetStagingTargetPath()); err != nil {
		return nil, status.Errorf(codes.Internal, "unstage volume %s: %v", req.GetVolumeId(), err)
	}
	klog.FromContext(ctx).V(3).Info("Unstaged volume", "stagingPath", req.GetStagingTargetPath())
	return &csi.NodeUnstageVolumeResponse{}, nil
}

func (s nodeServer) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	d := s.d
	id, target, staging := req.GetVolumeId(), req.GetTargetPath(), req.GetStagingTargetPath()
	switch {
	case id == "":
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	case target == "":
		return nil, status.Error(codes.InvalidArgument, "target_path is required")
	case req.GetVolumeCapability() == nil:
		return nil, status.Error(codes.InvalidArgument, "volume_capability is required")
	case staging == "" && !d.opts.DisableStaging:
		return nil, status.Error(codes.InvalidArgument, "staging_target_path is required: the driver has the STAGE_UNSTAGE_VOLUME capability")
	}
	if err := d.checkNodeVolume(id, req.GetVolumeCapability()); err != nil {
		return nil, err
	}
	// With staging, NodeStageVolume checked the publish context already.
	if d.opts.DisableStaging {
		if err := d.checkPublishContext(id, req.GetPublishContext()); err != nil {
			return nil, err
		}
	}

	d.mountMu.Lock()
	defer d.mountMu.Unlock()
	source := d.VolumePath(id)
	if !d.opts.DisableStaging {
		if _, staged, err := findMount(staging); err != nil {
			return nil, status.Errorf(codes.Internal, "check staging path: %v", err)
		} else if !staged {
			return nil, status.Errorf(codes.FailedPrecondition, "volume %s is not staged at %s", id, staging)
		}
		source = staging
	}
	readOnly := req.GetReadonly() || readOnlyMode(req.GetVolumeCapability().GetAccessMode().GetMode())
	m, mounted, err := findMount(target)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "check target path: %v", err)
	}
	if mounted {
		if m.readOnly != readOnly {
			return nil, status.Errorf(codes.AlreadyExists, "volume %s is published at %s with read-only %t", id, target, m.readOnly)
		}
		return &csi.NodePublishVolumeResponse{}, nil
	}

	// The CO makes the parent directory; the target is the driver's.
	if _, err := os.Stat(filepath.Dir(target)); err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "parent of target_path %s: %v", target, err)
	}
	created := false
	switch err := os.Mkdir(target, 0o750); {
	case err == nil:
		created = true
	case !errors.Is(err, fs.ErrExist):
		return nil, status.Errorf(codes.Internal, "create target path: %v", err)
	}
	if err := bindMount(source, target, readOnly); err != nil {
		if created {
			_ = os.Remove(target)
		}
		return nil, status.Errorf(codes.Internal, "publish volume %s: %v", id, err)
	}
	klog.FromContext(ctx).V(3).Info("Published volume", "targetPath", target, "readOnly", readOnly)
	return &csi.NodePublishVolumeResponse{}, nil
}

func (s nodeServer) NodeUnpublishVolume(ctx context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	d := s.d
	id, target := req.GetVolumeId(), req.GetTargetPath()
	switch {
	case id == "":
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	case target == "":
		return nil, status.Error(codes.InvalidArgument, "target_path is required")
	}
	d.mountMu.Lock()
	defer d.mountMu.Unlock()
	if err := unmountAll(target); err != nil {
		return nil, status.Errorf(codes.Internal, "unpublish volume %s: %v", id, err)
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, status.Errorf(codes.Internal, "remove target path: %v", err)
	}
	klog.FromContext(ctx).V(3).Info("Unpublished volume", "targetPath", target)
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// checkNodeVolume checks what the node calls that mount a volume share: the
// volume exists and the capability is supported.
func (d *Driver) checkNodeVolume(id string, c *csi.VolumeCapability) error {
	d.mu.Lock()
	err := d.mustExist(id)
	d.mu.Unlock()
	if err != nil {
		return err
	}
	if err := checkCapability(c); err != nil {
		return status.Errorf(codes.InvalidArgument, "volume_capability: %v", err)
	}
	return nil
}

// checkPublishContext checks that a publish context, when it has the path
// key or when the driver requires it, is the one ControllerPublishVolume
// returned for the volume.
func (d *Driver) checkPublishContext(id string, publishContext map[string]string) error {
	path, ok := publishContext[PublishContextPath]
	switch {
	case ok && path != d.VolumePath(id):
		return status.Errorf(codes.InvalidArgument, "publish_context: path %q is not the path of volume %s", path, id)
	case !ok && d.opts.RequirePublishContext:
		return status.Errorf(codes.FailedPrecondition, "publish_context: no %q key; was volume %s controller-published?", PublishContextPath, id)
	}
	return nil
}
