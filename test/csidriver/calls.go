package csidriver

import (
	"context"
	"path"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// Method names a CSI call, as the last element of its gRPC method name.
type Method string

// The methods the driver implements.
const (
	GetPluginInfo              Method = "GetPluginInfo"
	GetPluginCapabilities      Method = "GetPluginCapabilities"
	Probe                      Method = "Probe"
	CreateVolume               Method = "CreateVolume"
	DeleteVolume               Method = "DeleteVolume"
	ControllerPublishVolume    Method = "ControllerPublishVolume"
	ControllerUnpublishVolume  Method = "ControllerUnpublishVolume"
	ValidateVolumeCapabilities Method = "ValidateVolumeCapabilities"
	ListVolumes                Method = "ListVolumes"
	ControllerGetCapabilities  Method = "ControllerGetCapabilities"
	NodeStageVolume            Method = "NodeStageVolume"
	NodeUnstageVolume          Method = "NodeUnstageVolume"
	NodePublishVolume          Method = "NodePublishVolume"
	NodeUnpublishVolume        Method = "NodeUnpublishVolume"
	NodeGetInfo                Method = "NodeGetInfo"
	NodeGetCapabilities        Method = "NodeGetCapabilities"
)

// Call is one call the driver received on its socket.
type Call struct {
	Method Method
	// VolumeID and NodeID are the request's fields of those names, empty
	// when it has none.
	VolumeID string
	NodeID   string
	// Path is the request's target path, or its staging path when it has
	// no target path.
	Path string
	// Start is when the call arrived; End is when it returned, zero while
	// it is in flight (held, for instance).
	Start, End time.Time
	// Err is the gRPC status error the call returned, nil on success.
	Err error
}

// Code returns the call's gRPC status code, codes.OK on success.
func (c Call) Code() codes.Code { return status.Code(c.Err) }

// callKey selects the calls of one method for one volume; an empty volume ID
// selects every volume.
type callKey struct {
	method   Method
	volumeID string
}

// Calls returns the calls received so far, in the order they arrived.
func (d *Driver) Calls() []Call {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]Call, len(d.calls))
	copy(out, d.calls)
	return out
}

// InjectError makes every later call of method m for volumeID fail with err,
// before the driver does anything, until InjectError is called again with a
// nil err. An empty volumeID matches calls for any volume; an error for the
// exact volume wins over it. An err that carries no gRPC status is returned
// with code Internal.
func (d *Driver) InjectError(m Method, volumeID string, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	key := callKey{method: m, volumeID: volumeID}
	if err == nil {
		delete(d.faults, key)
		return
	}
	if _, ok := status.FromError(err); !ok {
		err = status.Error(codes.Internal, err.Error())
	}
	d.faults[key] = err
}

// FailControllerPublish is InjectError for ControllerPublishVolume.
func (d *Driver) FailControllerPublish(volumeID string, err error) {
	d.InjectError(ControllerPublishVolume, volumeID, err)
}

// FailControllerUnpublish is InjectError for ControllerUnpublishVolume.
func (d *Driver) FailControllerUnpublish(volumeID string, err error) {
	d.InjectError(ControllerUnpublishVolume, volumeID, err)
}

// Hold makes later calls of method m for volumeID wait, before they do
// anything, until release is called; a call whose context ends first fails
// with its context's error. An empty volumeID matches any volume. Held calls
// show in Calls with a zero End. Calling release more than once is harmless.
func (d *Driver) Hold(m Method, volumeID string) (release func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	key := callKey{method: m, volumeID: volumeID}
	gate := make(chan struct{})
	d.holds[key] = gate
	return func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.holds[key] != gate {
			return
		}
		delete(d.holds, key)
		close(gate)
	}
}

// interceptor records every call, applies holds and injected errors, and
// hands the handler a context that carries the logger.
func (d *Driver) interceptor(logger klog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		c := newCall(Method(path.Base(info.FullMethod)), req)
		c.Start = d.clock.Now()
		i := d.record(c)
		logger := logger.WithValues("method", c.Method, "volumeID", c.VolumeID)
		ctx = klog.NewContext(ctx, logger)

		resp, err := d.intercepted(ctx, c, req, handler)
		if err != nil {
			if _, ok := status.FromError(err); !ok {
				err = status.Error(codes.Internal, err.Error())
			}
			logger.V(2).Info("CSI call failed", "err", err)
		} else {
			logger.V(4).Info("CSI call succeeded")
		}
		d.finish(i, err)
		return resp, err
	}
}

func (d *Driver) intercepted(ctx context.Context, c Call, req any, handler grpc.UnaryHandler) (any, error) {
	if gate := d.hold(c); gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	if err := d.fault(c); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func newCall(m Method, req any) Call {
	c := Call{Method: m}
	if r, ok := req.(interface{ GetVolumeId() string }); ok {
		c.VolumeID = r.GetVolumeId()
	}
	if r, ok := req.(interface{ GetNodeId() string }); ok {
		c.NodeID = r.GetNodeId()
	}
	if r, ok := req.(interface{ GetStagingTargetPath() string }); ok {
		c.Path = r.GetStagingTargetPath()
	}
	if r, ok := req.(interface{ GetTargetPath() string }); ok && r.GetTargetPath() != "" {
		c.Path = r.GetTargetPath()
	}
	return c
}

func (d *Driver) record(c Call) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls = append(d.calls, c)
	return len(d.calls) - 1
}

func (d *Driver) finish(i int, err error) {
	now := d.clock.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls[i].End = now
	d.calls[i].Err = err
}

func (d *Driver) hold(c Call) chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	if gate, ok := d.holds[callKey{method: c.Method, volumeID: c.VolumeID}]; ok {
		return gate
	}
	return d.holds[callKey{method: c.Method}]
}

func (d *Driver) fault(c Call) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err, ok := d.faults[callKey{method: c.Method, volumeID: c.VolumeID}]; ok {
		return err
	}
	return d.faults[callKey{method: c.Method}]
}
