package csidriver

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/pkg/mountinfo"
)

const testDriverName = "csi.nodelet.test"

func TestNewValidatesOptions(t *testing.T) {
	good := Options{Name: testDriverName, NodeID: "node-1", DataDir: "/var/lib/csi"}
	tests := []struct {
		name   string
		change func(*Options)
		want   string
	}{
		{name: "valid", change: func(*Options) {}},
		{name: "no name", change: func(o *Options) { o.Name = "" }, want: "name"},
		{name: "bad name", change: func(o *Options) { o.Name = "csi/driver" }, want: "name"},
		{name: "no node ID", change: func(o *Options) { o.NodeID = "" }, want: "node ID"},
		{name: "relative data dir", change: func(o *Options) { o.DataDir = "data" }, want: "data directory"},
		{name: "negative limit", change: func(o *Options) { o.MaxVolumesPerNode = -1 }, want: "max volumes"},
		{name: "empty other node", change: func(o *Options) { o.OtherNodeIDs = []string{""} }, want: "other node IDs"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := good
			tc.change(&o)
			_, err := New(o)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: got error %v, want one about %q", err, tc.want)
			}
		})
	}
}

func TestControllerPublishAccessModes(t *testing.T) {
	d, c := start(t, Options{NodeID: "node-1", OtherNodeIDs: []string{"node-2"}})
	ctx := context.Background()
	rwo := createVolume(t, c, "rwo", csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
	rwx := createVolume(t, c, "rwx", csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER)
	msw := createVolume(t, c, "msw", csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER)

	steps := []struct {
		name     string
		volume   string
		node     string
		mode     csi.VolumeCapability_AccessMode_Mode
		readOnly bool
		want     codes.Code
	}{
		{"first node", rwo, "node-1", csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, false, codes.OK},
		{"same node again", rwo, "node-1", csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, false, codes.OK},
		{"same node read-only", rwo, "node-1", csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, true, codes.AlreadyExists},
		{"second node", rwo, "node-2", csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, false, codes.FailedPrecondition},
		{"second node as multi-node", rwo, "node-2", csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER, false, codes.FailedPrecondition},
		{"unknown node", rwo, "node-3", csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, false, codes.NotFound},
		{"unknown volume", "nothing", "node-1", csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, false, codes.NotFound},
		{"multi writer first", rwx, "node-1", csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER, false, codes.OK},
		{"multi writer second", rwx, "node-2", csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER, false, codes.OK},
		{"single writer first", msw, "node-1", csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER, false, codes.OK},
		{"single writer second writer", msw, "node-2", csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER, false, codes.FailedPrecondition},
		{"single writer second reader", msw, "node-2", csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER, true, codes.OK},
	}
	for _, s := range steps {
		resp, err := c.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{
			VolumeId:         s.volume,
			NodeId:           s.node,
			VolumeCapability: mountCapability(s.mode),
			Readonly:         s.readOnly,
		})
		if got := status.Code(err); got != s.want {
			t.Fatalf("%s: ControllerPublishVolume: got %v (%v), want %v", s.name, got, err, s.want)
		}
		if err == nil && resp.GetPublishContext()[PublishContextPath] != d.VolumePath(s.volume) {
			t.Errorf("%s: publish context %v, want path %s", s.name, resp.GetPublishContext(), d.VolumePath(s.volume))
		}
	}
	if got, want := d.PublishedNodes(rwx), []string{"node-1", "node-2"}; !slices.Equal(got, want) {
		t.Errorf("PublishedNodes(%s) = %v, want %v", rwx, got, want)
	}

	if _, err := c.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: rwo}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("DeleteVolume of a published volume: got %v, want FailedPrecondition", err)
	}
	// Unpublishing from a node the volume is not published to succeeds.
	for _, node := range []string{"node-2", "node-1", "node-1"} {
		if _, err := c.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: rwo, NodeId: node}); err != nil {
			t.Fatalf("ControllerUnpublishVolume from %s: %v", node, err)
		}
	}
	if _, err := c.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{
		VolumeId: rwo, NodeId: "node-2", VolumeCapability: mountCapability(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER),
	}); err != nil {
		t.Fatalf("ControllerPublishVolume to node-2 after unpublishing from node-1: %v", err)
	}
}

func TestCreateVolume(t *testing.T) {
	d, c := start(t, Options{NodeID: "node-1"})
	ctx := context.Background()
	req := func(name string, required, limit int64) *csi.CreateVolumeRequest {
		return &csi.CreateVolumeRequest{
			Name:               name,
			CapacityRange:      &csi.CapacityRange{RequiredBytes: required, LimitBytes: limit},
			VolumeCapabilities: []*csi.VolumeCapability{mountCapability(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)},
		}
	}
	resp, err := c.CreateVolume(ctx, req("pvc-1", 1<<30, 0))
	if err != nil {
		t.Fatal(err)
	}
	if v := resp.GetVolume(); v.GetVolumeId() != "pvc-1" || v.GetCapacityBytes() != 1<<30 {
		t.Errorf("CreateVolume returned %v, want pvc-1 with 1 GiB", v)
	}
	if fi, err := os.Stat(d.VolumePath("pvc-1")); err != nil || !fi.IsDir() {
		t.Errorf("volume directory: %v", err)
	}
	if _, err := c.CreateVolume(ctx, req("pvc-1", 1<<20, 2<<30)); err != nil {
		t.Errorf("CreateVolume again with a range the volume fits: %v", err)
	}
	if _, err := c.CreateVolume(ctx, req("pvc-1", 2<<30, 0)); status.Code(err) != codes.AlreadyExists {
		t.Errorf("CreateVolume again with a larger size: got %v, want AlreadyExists", err)
	}
	// A name that cannot be a directory name gets an ID of its own, the
	// same every time.
	for _, name := range []string{"../escape", ".hidden", "a/b", "a+b", strings.Repeat("x", 129)} {
		first, err := c.CreateVolume(ctx, req(name, 0, 0))
		if err != nil {
			t.Fatalf("CreateVolume %q: %v", name, err)
		}
		id := first.GetVolume().GetVolumeId()
		if !volumeIDPattern.MatchString(id) {
			t.Errorf("CreateVolume %q: volume ID %q", name, id)
		}
		if again, err := c.CreateVolume(ctx, req(name, 0, 0)); err != nil || again.GetVolume().GetVolumeId() != id {
			t.Errorf("CreateVolume %q again: %v, %v; want volume %s", name, again, err, id)
		}
	}
	if _, err := c.CreateVolume(ctx, req("", 0, 0)); status.Code(err) != codes.InvalidArgument {
		t.Errorf("CreateVolume without a name: got %v, want InvalidArgument", err)
	}
	block := req("block", 0, 0)
	block.VolumeCapabilities[0].AccessType = &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}
	if _, err := c.CreateVolume(ctx, block); status.Code(err) != codes.InvalidArgument {
		t.Errorf("CreateVolume of a block volume: got %v, want InvalidArgument", err)
	}

	// A directory made by hand is a volume too.
	if err := os.Mkdir(d.VolumePath("by-hand"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{
		VolumeId: "by-hand", VolumeCapabilities: block.VolumeCapabilities,
	}); err != nil {
		t.Errorf("ValidateVolumeCapabilities of a volume made by hand: %v", err)
	}
	for range 2 {
		if _, err := c.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: "pvc-1"}); err != nil {
			t.Fatalf("DeleteVolume: %v", err)
		}
	}
	if _, err := os.Stat(d.VolumePath("pvc-1")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("volume directory after DeleteVolume: %v", err)
	}
}

func TestListVolumesPages(t *testing.T) {
	_, c := start(t, Options{NodeID: "node-1"})
	ctx := context.Background()
	for _, name := range []string{"v3", "v1", "v5", "v2", "v4"} {
		createVolume(t, c, name, csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
	}
	want := []string{"v1", "v2", "v3", "v4", "v5"}
	if _, err := c.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{
		VolumeId: "v2", NodeId: "node-1", VolumeCapability: mountCapability(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER),
	}); err != nil {
		t.Fatal(err)
	}

	var got []string
	token := ""
	for pages := 0; ; pages++ {
		if pages > len(want) {
			t.Fatalf("ListVolumes did not end after %d pages", pages)
		}
		resp, err := c.ListVolumes(ctx, &csi.ListVolumesRequest{MaxEntries: 2, StartingToken: token})
		if err != nil {
			t.Fatalf("ListVolumes: %v", err)
		}
		for _, e := range resp.GetEntries() {
			got = append(got, e.GetVolume().GetVolumeId())
			var wantNodes []string
			if e.GetVolume().GetVolumeId() == "v2" {
				wantNodes = []string{"node-1"}
			}
			if nodes := e.GetStatus().GetPublishedNodeIds(); !slices.Equal(nodes, wantNodes) {
				t.Errorf("volume %s published to %v, want %v", e.GetVolume().GetVolumeId(), nodes, wantNodes)
			}
		}
		if token = resp.GetNextToken(); token == "" {
			break
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("ListVolumes pages: got %v, want %v", got, want)
	}
	if _, err := c.ListVolumes(ctx, &csi.ListVolumesRequest{StartingToken: "invalid-token"}); status.Code(err) != codes.Aborted {
		t.Errorf("ListVolumes with a foreign token: got %v, want Aborted", err)
	}
}

func TestInjectedErrors(t *testing.T) {
	d, c := start(t, Options{NodeID: "node-1"})
	ctx := context.Background()
	vol := createVolume(t, c, "vol", csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
	other := createVolume(t, c, "other", csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
	unpublish := func(id string) error {
		_, err := c.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: "node-1"})
		return err
	}

	d.FailControllerUnpublish(vol, status.Error(codes.Unavailable, "detach is broken"))
	if err := unpublish(vol); status.Code(err) != codes.Unavailable {
		t.Errorf("with an injected error: got %v, want Unavailable", err)
	}
	if err := unpublish(other); err != nil {
		t.Errorf("another volume: %v", err)
	}
	// A plain error for every volume comes back as Internal; the error for
	// the exact volume wins over it.
	d.InjectError(ControllerUnpublishVolume, "", errors.New("everything is broken"))
	if err := unpublish(other); status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "everything is broken") {
		t.Errorf("with an injected plain error: got %v, want Internal", err)
	}
	if err := unpublish(vol); status.Code(err) != codes.Unavailable {
		t.Errorf("exact volume over any volume: got %v, want Unavailable", err)
	}
	d.InjectError(ControllerUnpublishVolume, "", nil)
	d.FailControllerUnpublish(vol, nil)
	if err := unpublish(vol); err != nil {
		t.Errorf("after clearing: %v", err)
	}

	var codesSeen []codes.Code
	for _, call := range d.Calls() {
		if call.Method == ControllerUnpublishVolume && call.VolumeID == vol {
			codesSeen = append(codesSeen, call.Code())
		}
	}
	if want := []codes.Code{codes.Unavailable, codes.Unavailable, codes.OK}; !slices.Equal(codesSeen, want) {
		t.Errorf("logged codes %v, want %v", codesSeen, want)
	}
}

func TestCallLog(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	d, c := start(t, Options{NodeID: "node-1", Clock: clk})
	ctx := context.Background()
	vol := createVolume(t, c, "vol", csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
	target := filepath.Join(t.TempDir(), "never-mounted")

	clk.Step(time.Second)
	if _, err := c.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: vol, TargetPath: target}); err != nil {
		t.Fatalf("NodeUnpublishVolume of a target that was never published: %v", err)
	}
	clk.Step(time.Second)
	if _, err := c.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: vol, NodeId: "node-1"}); err != nil {
		t.Fatal(err)
	}

	calls := d.Calls()
	if len(calls) != 3 {
		t.Fatalf("got %d calls, want 3: %+v", len(calls), calls)
	}
	want := []Call{
		{Method: CreateVolume, VolumeID: "", Start: clk.Now().Add(-2 * time.Second)},
		{Method: NodeUnpublishVolume, VolumeID: vol, Path: target, Start: clk.Now().Add(-time.Second)},
		{Method: ControllerUnpublishVolume, VolumeID: vol, NodeID: "node-1", Start: clk.Now()},
	}
	for i, w := range want {
		w.End = w.Start
		if got := calls[i]; got != w {
			t.Errorf("call %d: got %+v, want %+v", i, got, w)
		}
	}
}

func TestHold(t *testing.T) {
	d, c := start(t, Options{NodeID: "node-1"})
	vol := createVolume(t, c, "vol", csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
	publish := func(ctx context.Context) error {
		_, err := c.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{
			VolumeId: vol, NodeId: "node-1", VolumeCapability: mountCapability(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER),
		})
		return err
	}

	release := d.Hold(ControllerPublishVolume, vol)
	done := make(chan error, 1)
	go func() { done <- publish(context.Background()) }()
	waitFor(t, "a held ControllerPublishVolume in the call log", func() bool {
		for _, call := range d.Calls() {
			if call.Method == ControllerPublishVolume && call.End.IsZero() {
				return true
			}
		}
		return false
	})
	if nodes := d.PublishedNodes(vol); len(nodes) != 0 {
		t.Errorf("a held publish published the volume to %v", nodes)
	}
	release()
	release()
	if err := <-done; err != nil {
		t.Fatalf("released ControllerPublishVolume: %v", err)
	}
	if nodes := d.PublishedNodes(vol); !slices.Equal(nodes, []string{"node-1"}) {
		t.Errorf("published to %v after release, want [node-1]", nodes)
	}

	// A held call ends with its context.
	defer d.Hold(ControllerPublishVolume, "")()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := publish(ctx); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("held call with a deadline: got %v, want DeadlineExceeded", err)
	}
}

func TestServeReplacesStaleSocket(t *testing.T) {
	dir := t.TempDir()
	socket := filepath.Join(dir, "run", "csi.sock")
	if err := os.MkdirAll(filepath.Dir(socket), 0o750); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	lis.(*net.UnixListener).SetUnlinkOnClose(false)
	lis.Close()

	d, err := New(Options{Name: testDriverName, NodeID: "node-1", DataDir: filepath.Join(dir, "data")})
	if err != nil {
		t.Fatal(err)
	}
	serve(t, d, socket)
	if err := d.Serve(context.Background(), filepath.Join(dir, "second.sock")); err == nil {
		t.Error("a second Serve at the same time succeeded")
	}
	resp, err := csi.NewIdentityClient(dial(t, socket)).GetPluginInfo(context.Background(), &csi.GetPluginInfoRequest{})
	if err != nil || resp.GetName() != testDriverName {
		t.Fatalf("GetPluginInfo: %v, %v", resp, err)
	}
}

func TestNodeStagePublish(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("bind mounts need root")
	}
	d, c := start(t, Options{NodeID: "node-1"})
	ctx := context.Background()
	vol := createVolume(t, c, "vol", csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
	rw := mountCapability(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
	dir := t.TempDir()
	t.Cleanup(func() { unmountUnder(t, dir) })
	staging := filepath.Join(dir, "staging")
	targetRW, targetRO := filepath.Join(dir, "pods", "rw"), filepath.Join(dir, "pods", "ro")
	for _, p := range []string{staging, filepath.Dir(targetRW)} {
		if err := os.MkdirAll(p, 0o750); err != nil {
			t.Fatal(err)
		}
	}

	publishReq := func(target string, readOnly bool) *csi.NodePublishVolumeRequest {
		return &csi.NodePublishVolumeRequest{VolumeId: vol, StagingTargetPath: staging, TargetPath: target, VolumeCapability: rw, Readonly: readOnly}
	}
	if _, err := c.NodePublishVolume(ctx, publishReq(targetRW, false)); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("NodePublishVolume before NodeStageVolume: got %v, want FailedPrecondition", err)
	}
	if _, err := c.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{
		VolumeId: vol, StagingTargetPath: staging, VolumeCapability: rw,
		PublishContext: map[string]string{PublishContextPath: "/elsewhere"},
	}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("NodeStageVolume with another volume's publish context: got %v, want InvalidArgument", err)
	}
	for range 2 {
		if _, err := c.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: vol, StagingTargetPath: staging, VolumeCapability: rw}); err != nil {
			t.Fatalf("NodeStageVolume: %v", err)
		}
		for _, r := range []*csi.NodePublishVolumeRequest{publishReq(targetRW, false), publishReq(targetRO, true)} {
			if _, err := c.NodePublishVolume(ctx, r); err != nil {
				t.Fatalf("NodePublishVolume at %s: %v", r.TargetPath, err)
			}
		}
	}
	if _, err := c.NodePublishVolume(ctx, publishReq(targetRO, false)); status.Code(err) != codes.AlreadyExists {
		t.Errorf("NodePublishVolume read-write over a read-only publish: got %v, want AlreadyExists", err)
	}

	if err := os.WriteFile(filepath.Join(targetRW, "data"), []byte("hello"), 0o644); err != nil {
		t.Fatalf("write through the read-write target: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(d.VolumePath(vol), "data")); err != nil || string(b) != "hello" {
		t.Errorf("volume directory has %q, %v; want the file written through the target", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(targetRO, "data")); err != nil || string(b) != "hello" {
		t.Errorf("read-only target has %q, %v; want the file", b, err)
	}
	if err := os.WriteFile(filepath.Join(targetRO, "other"), nil, 0o644); !errors.Is(err, unix.EROFS) {
		t.Errorf("write through the read-only target: got %v, want EROFS", err)
	}

	for _, target := range []string{targetRW, targetRO, targetRO} {
		if _, err := c.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: vol, TargetPath: target}); err != nil {
			t.Fatalf("NodeUnpublishVolume %s: %v", target, err)
		}
		if _, err := os.Stat(target); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("target %s after NodeUnpublishVolume: %v", target, err)
		}
	}
	if _, err := c.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: vol, StagingTargetPath: staging}); err != nil {
		t.Fatalf("NodeUnstageVolume: %v", err)
	}
	if leaked := mountsUnder(t, dir); len(leaked) > 0 {
		t.Errorf("mounts left: %v", leaked)
	}
}

func TestNodePublishWithoutStaging(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("bind mounts need root")
	}
	d, c := start(t, Options{NodeID: "node-1", DisableStaging: true, RequirePublishContext: true})
	ctx := context.Background()
	caps, err := c.NodeGetCapabilities(ctx, &csi.NodeGetCapabilitiesRequest{})
	if err != nil || len(caps.GetCapabilities()) != 0 {
		t.Fatalf("NodeGetCapabilities: %v, %v; want none", caps, err)
	}
	vol := createVolume(t, c, "vol", csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
	dir := t.TempDir()
	t.Cleanup(func() { unmountUnder(t, dir) })
	target := filepath.Join(dir, "target")
	req := &csi.NodePublishVolumeRequest{VolumeId: vol, TargetPath: target, VolumeCapability: mountCapability(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)}
	if _, err := c.NodePublishVolume(ctx, req); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("NodePublishVolume without a publish context: got %v, want FailedPrecondition", err)
	}
	req.PublishContext = map[string]string{PublishContextPath: d.VolumePath(vol)}
	if _, err := c.NodePublishVolume(ctx, req); err != nil {
		t.Fatalf("NodePublishVolume: %v", err)
	}
	if got := mountsUnder(t, dir); !slices.Equal(got, []string{target}) {
		t.Errorf("mounts %v, want [%s]", got, target)
	}
	if _, err := c.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: vol, TargetPath: target}); err != nil {
		t.Fatalf("NodeUnpublishVolume: %v", err)
	}
	if leaked := mountsUnder(t, dir); len(leaked) > 0 {
		t.Errorf("mounts left: %v", leaked)
	}
}

// start serves a driver with the test driver name and a temporary data
// directory on a temporary socket, and returns it with a client.
func start(t *testing.T, opts Options) (*Driver, *client) {
	t.Helper()
	dir := t.TempDir()
	opts.Name = testDriverName
	opts.DataDir = filepath.Join(dir, "volumes")
	d, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(dir, "csi.sock")
	serve(t, d, socket)
	conn := dial(t, socket)
	return d, &client{
		IdentityClient:   csi.NewIdentityClient(conn),
		ControllerClient: csi.NewControllerClient(conn),
		NodeClient:       csi.NewNodeClient(conn),
	}
}

type client struct {
	csi.IdentityClient
	csi.ControllerClient
	csi.NodeClient
}

// serve runs d.Serve until the test ends and waits until it listens.
func serve(t *testing.T, d *Driver, socket string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Serve(ctx, socket) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		if _, err := os.Stat(socket); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("socket after Serve returned: %v", err)
		}
	})
	select {
	case <-d.Ready():
	case err := <-done:
		t.Fatalf("Serve: %v", err)
	}
}

func dial(t *testing.T, socket string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func createVolume(t *testing.T, c *client, name string, mode csi.VolumeCapability_AccessMode_Mode) string {
	t.Helper()
	resp, err := c.CreateVolume(context.Background(), &csi.CreateVolumeRequest{
		Name:               name,
		VolumeCapabilities: []*csi.VolumeCapability{mountCapability(mode)},
	})
	if err != nil {
		t.Fatalf("CreateVolume %s: %v", name, err)
	}
	return resp.GetVolume().GetVolumeId()
}

func mountCapability(mode csi.VolumeCapability_AccessMode_Mode) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// mountsUnder returns the mount points at or below dir, in the order they
// were mounted.
func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	mounts, err := mountinfo.Read()
	if err != nil {
		t.Fatal(err)
	}
	var points []string
	for _, m := range mounts {
		if m.Point == real || strings.HasPrefix(m.Point, real+"/") {
			points = append(points, m.Point)
		}
	}
	return points
}

// unmountUnder unmounts everything at or below dir, so that removing dir
// cannot reach into a volume.
func unmountUnder(t *testing.T, dir string) {
	t.Helper()
	points := mountsUnder(t, dir)
	for _, p := range slices.Backward(points) {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", p, err)
		}
	}
}
