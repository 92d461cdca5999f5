package csi_test

import (
	"context"
	"errors"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/csi"
)

// fakeDriver is a CSI driver's identity and node services that record
// their calls and answer as configured.
type fakeDriver struct {
	csipb.UnimplementedIdentityServer
	csipb.UnimplementedNodeServer

	name       string
	nodeID     string
	maxVolumes int64
	topology   map[string]string
	stage      bool
	multiNode  bool
	// block makes NodePublishVolume wait until its context ends.
	block bool

	mu    sync.Mutex
	calls []string
	stg   *csipb.NodeStageVolumeRequest
	pub   *csipb.NodePublishVolumeRequest
	fail  map[string]error // by method name
}

func (d *fakeDriver) record(method string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls = append(d.calls, method)
	return d.fail[method]
}

func (d *fakeDriver) called() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.calls)
}

func (d *fakeDriver) GetPluginInfo(context.Context, *csipb.GetPluginInfoRequest) (*csipb.GetPluginInfoResponse, error) {
	if err := d.record("GetPluginInfo"); err != nil {
		return nil, err
	}
	return &csipb.GetPluginInfoResponse{Name: d.name, VendorVersion: "test"}, nil
}

func (d *fakeDriver) NodeGetInfo(context.Context, *csipb.NodeGetInfoRequest) (*csipb.NodeGetInfoResponse, error) {
	if err := d.record("NodeGetInfo"); err != nil {
		return nil, err
	}
	resp := &csipb.NodeGetInfoResponse{NodeId: d.nodeID, MaxVolumesPerNode: d.maxVolumes}
	if d.topology != nil {
		resp.AccessibleTopology = &csipb.Topology{Segments: d.topology}
	}
	return resp, nil
}

func (d *fakeDriver) NodeGetCapabilities(context.Context, *csipb.NodeGetCapabilitiesRequest) (*csipb.NodeGetCapabilitiesResponse, error) {
	if err := d.record("NodeGetCapabilities"); err != nil {
		return nil, err
	}
	resp := &csipb.NodeGetCapabilitiesResponse{}
	add := func(t csipb.NodeServiceCapability_RPC_Type) {
		resp.Capabilities = append(resp.Capabilities, &csipb.NodeServiceCapability{
			Type: &csipb.NodeServiceCapability_Rpc{Rpc: &csipb.NodeServiceCapability_RPC{Type: t}},
		})
	}
	add(csipb.NodeServiceCapability_RPC_GET_VOLUME_STATS)
	if d.stage {
		add(csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME)
	}
	if d.multiNode {
		add(csipb.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER)
	}
	return resp, nil
}

func (d *fakeDriver) NodeStageVolume(_ context.Context, req *csipb.NodeStageVolumeRequest) (*csipb.NodeStageVolumeResponse, error) {
	if err := d.record("NodeStageVolume"); err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.stg = req
	d.mu.Unlock()
	return &csipb.NodeStageVolumeResponse{}, nil
}

func (d *fakeDriver) NodeUnstageVolume(context.Context, *csipb.NodeUnstageVolumeRequest) (*csipb.NodeUnstageVolumeResponse, error) {
	if err := d.record("NodeUnstageVolume"); err != nil {
		return nil, err
	}
	return &csipb.NodeUnstageVolumeResponse{}, nil
}

func (d *fakeDriver) NodePublishVolume(ctx context.Context, req *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
	if err := d.record("NodePublishVolume"); err != nil {
		return nil, err
	}
	if d.block {
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	d.mu.Lock()
	d.pub = req
	d.mu.Unlock()
	return &csipb.NodePublishVolumeResponse{}, nil
}

func (d *fakeDriver) NodeUnpublishVolume(context.Context, *csipb.NodeUnpublishVolumeRequest) (*csipb.NodeUnpublishVolumeResponse, error) {
	if err := d.record("NodeUnpublishVolume"); err != nil {
		return nil, err
	}
	return &csipb.NodeUnpublishVolumeResponse{}, nil
}

// serve runs d on the socket of its name under root until stop or the end
// of the test, and returns the socket's path.
func serve(t *testing.T, root string, d *fakeDriver) (socket string, stop func()) {
	t.Helper()
	socket = csi.SocketPath(root, d.name)
	if err := os.MkdirAll(filepath.Dir(socket), 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	csipb.RegisterIdentityServer(srv, d)
	csipb.RegisterNodeServer(srv, d)
	go func() { _ = srv.Serve(l) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			srv.Stop()
			_ = os.Remove(socket)
		})
	}
	t.Cleanup(stop)
	return socket, stop
}

func newClient(t *testing.T, socket string, opts csi.NodeClientOptions) *csi.NodeClient {
	t.Helper()
	c, err := csi.NewNodeClient(socket, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestNodeClientInfo(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	socket, _ := serve(t, root, &fakeDriver{
		name: driver, nodeID: "id-a", maxVolumes: 7, stage: true,
		topology: map[string]string{"zone": "z1", "rack": "r2"},
	})
	if got, err := csi.DriverSocket(root, driver); err != nil || got != socket {
		t.Fatalf("DriverSocket = %q, %v; want %q", got, err, socket)
	}
	c := newClient(t, socket, csi.NodeClientOptions{})

	name, err := c.DriverName(ctx)
	if err != nil || name != driver {
		t.Fatalf("DriverName = %q, %v", name, err)
	}
	info, err := c.NodeGetInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.NodeID != "id-a" || info.MaxVolumes != 7 || !maps.Equal(info.Topology, map[string]string{"zone": "z1", "rack": "r2"}) {
		t.Errorf("NodeGetInfo = %+v", info)
	}
	if keys := info.TopologyKeys(); !slices.Equal(keys, []string{"rack", "zone"}) {
		t.Errorf("TopologyKeys = %v, want sorted [rack zone]", keys)
	}
	caps, err := c.NodeGetCapabilities(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !caps.StageUnstage || caps.SingleNodeMultiWriter {
		t.Errorf("NodeGetCapabilities = %+v, want stage/unstage only", caps)
	}
}

func TestNodeClientStageAndPublish(t *testing.T) {
	ctx := context.Background()
	d := &fakeDriver{name: driver, nodeID: "id-a", stage: true}
	socket, _ := serve(t, t.TempDir(), d)
	c := newClient(t, socket, csi.NodeClientOptions{})

	req := csi.VolumeRequest{
		VolumeHandle:   handle,
		PublishContext: map[string]string{"device": "/dev/x"},
		VolumeContext:  map[string]string{"share": "s1"},
		Capability: csi.VolumeCapability{
			AccessMode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER,
			FSType:     "ext4", MountFlags: []string{"noatime"},
		},
		Secrets: map[string]string{"key": "secret"},
	}
	if err := c.NodeStageVolume(ctx, csi.StageRequest{VolumeRequest: req, StagingPath: "/stage"}); err != nil {
		t.Fatal(err)
	}
	if err := c.NodePublishVolume(ctx, csi.PublishRequest{VolumeRequest: req, StagingPath: "/stage", TargetPath: "/target", ReadOnly: true}); err != nil {
		t.Fatal(err)
	}
	if err := c.NodeUnpublishVolume(ctx, handle, "/target"); err != nil {
		t.Fatal(err)
	}
	if err := c.NodeUnstageVolume(ctx, handle, "/stage"); err != nil {
		t.Fatal(err)
	}
	if got, want := d.called(), []string{"NodeStageVolume", "NodePublishVolume", "NodeUnpublishVolume", "NodeUnstageVolume"}; !slices.Equal(got, want) {
		t.Errorf("calls = %v, want %v", got, want)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stg.GetVolumeId() != handle || d.stg.GetStagingTargetPath() != "/stage" || d.stg.GetPublishContext()["device"] != "/dev/x" ||
		d.stg.GetSecrets()["key"] != "secret" || d.stg.GetVolumeContext()["share"] != "s1" ||
		d.stg.GetVolumeCapability().GetMount().GetFsType() != "ext4" ||
		!slices.Equal(d.stg.GetVolumeCapability().GetMount().GetMountFlags(), []string{"noatime"}) ||
		d.stg.GetVolumeCapability().GetAccessMode().GetMode() != csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER {
		t.Errorf("NodeStageVolume request = %v", d.stg)
	}
	if d.pub.GetTargetPath() != "/target" || d.pub.GetStagingTargetPath() != "/stage" || !d.pub.GetReadonly() ||
		d.pub.GetPublishContext()["device"] != "/dev/x" || d.pub.GetVolumeCapability().GetMount() == nil {
		t.Errorf("NodePublishVolume request = %v", d.pub)
	}
}

func TestNodeClientErrors(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	d := &fakeDriver{name: driver, nodeID: "id-a", block: true, fail: map[string]error{
		"NodeStageVolume": status.Error(codes.Internal, "disk on fire"),
	}}
	socket, stop := serve(t, root, d)
	c := newClient(t, socket, csi.NodeClientOptions{MountTimeout: 50 * time.Millisecond})

	err := c.NodeStageVolume(ctx, csi.StageRequest{VolumeRequest: csi.VolumeRequest{VolumeHandle: handle}, StagingPath: "/stage"})
	if status.Code(err) != codes.Internal {
		t.Errorf("NodeStageVolume error = %v, want the driver's Internal error", err)
	}
	err = c.NodePublishVolume(ctx, csi.PublishRequest{VolumeRequest: csi.VolumeRequest{VolumeHandle: handle}, TargetPath: "/target"})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("NodePublishVolume of a driver that never answers: error = %v, want DeadlineExceeded", err)
	}

	stop()
	if _, err := csi.DriverSocket(root, driver); !errors.Is(err, csi.ErrDriverNotRegistered) {
		t.Errorf("DriverSocket without a socket: error = %v, want ErrDriverNotRegistered", err)
	}
	if _, err := c.NodeGetInfo(ctx); status.Code(err) != codes.Unavailable {
		t.Errorf("NodeGetInfo of a driver that is gone: error = %v, want Unavailable", err)
	}
	if _, err := csi.NewNodeClient("relative/csi.sock", csi.NodeClientOptions{}); err == nil {
		t.Error("NewNodeClient accepted a relative socket path")
	}
}

func TestAccessMode(t *testing.T) {
	for _, c := range []struct {
		modes     []corev1.PersistentVolumeAccessMode
		multiNode bool
		want      csipb.VolumeCapability_AccessMode_Mode
	}{
		{nil, false, csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		{[]corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, false, csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		{[]corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, true, csipb.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER},
		{[]corev1.PersistentVolumeAccessMode{corev1.ReadWriteOncePod}, false, csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		{[]corev1.PersistentVolumeAccessMode{corev1.ReadWriteOncePod}, true, csipb.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER},
		{[]corev1.PersistentVolumeAccessMode{corev1.ReadOnlyMany, corev1.ReadWriteOnce}, false, csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY},
		{[]corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}, true, csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
	} {
		if got := csi.AccessMode(c.modes, c.multiNode); got != c.want {
			t.Errorf("AccessMode(%v, %v) = %v, want %v", c.modes, c.multiNode, got, c.want)
		}
	}
}
