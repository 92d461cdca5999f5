package csimount

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/attachdetach"
	"github.com/nodelet/nodelet/pkg/csi"
)

const (
	testDriver = "dir.csi.nodelet.io"
	testHandle = "vol-1"
	testNode   = "node-a"
)

var unique = attachdetach.CSIVolumeName(testDriver, testHandle)

// fakeNode is a CSI driver's node service that records its calls, makes
// and removes publish targets as a driver would (without mounting), and
// fails a method while fail names it.
type fakeNode struct {
	csipb.UnimplementedIdentityServer
	csipb.UnimplementedNodeServer
	stage bool

	mu    sync.Mutex
	calls []string
	stg   *csipb.NodeStageVolumeRequest
	pub   *csipb.NodePublishVolumeRequest
	fail  map[string]error
}

func (d *fakeNode) record(call string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls = append(d.calls, call)
	return d.fail[strings.Fields(call)[0]]
}

func (d *fakeNode) setFail(method string, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fail == nil {
		d.fail = map[string]error{}
	}
	d.fail[method] = err
}

// called returns the calls made, without the capability queries.
func (d *fakeNode) called() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for _, c := range d.calls {
		if c != "NodeGetCapabilities" {
			out = append(out, c)
		}
	}
	return out
}

func (d *fakeNode) NodeGetCapabilities(context.Context, *csipb.NodeGetCapabilitiesRequest) (*csipb.NodeGetCapabilitiesResponse, error) {
	if err := d.record("NodeGetCapabilities"); err != nil {
		return nil, err
	}
	resp := &csipb.NodeGetCapabilitiesResponse{}
	if d.stage {
		resp.Capabilities = append(resp.Capabilities, &csipb.NodeServiceCapability{
			Type: &csipb.NodeServiceCapability_Rpc{Rpc: &csipb.NodeServiceCapability_RPC{Type: csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME}},
		})
	}
	return resp, nil
}

func (d *fakeNode) NodeStageVolume(_ context.Context, req *csipb.NodeStageVolumeRequest) (*csipb.NodeStageVolumeResponse, error) {
	if err := d.record("NodeStageVolume " + req.GetVolumeId()); err != nil {
		return nil, err
	}
	if fi, err := os.Stat(req.GetStagingTargetPath()); err != nil || !fi.IsDir() {
		return nil, status.Errorf(codes.FailedPrecondition, "staging path %s is not a directory", req.GetStagingTargetPath())
	}
	d.mu.Lock()
	d.stg = req
	d.mu.Unlock()
	return &csipb.NodeStageVolumeResponse{}, nil
}

func (d *fakeNode) NodeUnstageVolume(_ context.Context, req *csipb.NodeUnstageVolumeRequest) (*csipb.NodeUnstageVolumeResponse, error) {
	if err := d.record("NodeUnstageVolume " + req.GetVolumeId()); err != nil {
		return nil, err
	}
	return &csipb.NodeUnstageVolumeResponse{}, nil
}

func (d *fakeNode) NodePublishVolume(_ context.Context, req *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
	if err := d.record("NodePublishVolume " + req.GetTargetPath()); err != nil {
		return nil, err
	}
	if d.stage && req.GetStagingTargetPath() == "" {
		return nil, status.Error(codes.InvalidArgument, "staging path missing")
	}
	if err := os.MkdirAll(req.GetTargetPath(), 0o750); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	d.mu.Lock()
	d.pub = req
	d.mu.Unlock()
	return &csipb.NodePublishVolumeResponse{}, nil
}

func (d *fakeNode) NodeUnpublishVolume(_ context.Context, req *csipb.NodeUnpublishVolumeRequest) (*csipb.NodeUnpublishVolumeResponse, error) {
	if err := d.record("NodeUnpublishVolume " + req.GetTargetPath()); err != nil {
		return nil, err
	}
	if err := os.RemoveAll(req.GetTargetPath()); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csipb.NodeUnpublishVolumeResponse{}, nil
}

// serveDriver runs d at the driver's socket under root until the test ends.
func serveDriver(t *testing.T, root string, d *fakeNode) {
	t.Helper()
	socket := csi.SocketPath(root, testDriver)
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
	t.Cleanup(srv.Stop)
}

type fixture struct {
	t       *testing.T
	ctx     context.Context
	root    string
	client  *fake.Clientset
	clock   *clocktesting.FakeClock
	m       *Manager
	changes chan struct{}
}

func newFixture(t *testing.T, root string, objs ...runtime.Object) *fixture {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	f := &fixture{
		t: t, ctx: ctx, root: root,
		client:  fake.NewClientset(objs...),
		clock:   clocktesting.NewFakeClock(time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)),
		changes: make(chan struct{}, 100),
	}
	factory := informers.NewSharedInformerFactory(f.client, 0)
	src := Sources{
		Claims:      factory.Core().V1().PersistentVolumeClaims().Lister(),
		Volumes:     factory.Core().V1().PersistentVolumes().Lister(),
		Drivers:     factory.Storage().V1().CSIDrivers().Lister(),
		Attachments: factory.Storage().V1().VolumeAttachments().Lister(),
		Nodes:       factory.Core().V1().Nodes().Lister(),
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	t.Cleanup(func() {
		cancel()
		factory.Shutdown()
	})
	m, err := New(f.client, src, Options{NodeName: testNode, RootDir: root, AttachTimeout: time.Minute, Clock: f.clock})
	if err != nil {
		t.Fatal(err)
	}
	m.OnChange(func() { f.changes <- struct{}{} })
	f.m = m
	return f
}

// eventually polls check until it returns nil, failing the test with its
// last error after a deadline.
func (f *fixture) eventually(what string, check func() error) {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(5 * time.Millisecond) // polling interval, not synchronisation
	}
}

// setUpError runs SetUp and returns its error as a *SetUpError.
func (f *fixture) setUpError(pod *corev1.Pod) *SetUpError {
	f.t.Helper()
	_, err := f.m.SetUp(f.ctx, pod)
	var se *SetUpError
	if !errors.As(err, &se) {
		f.t.Fatalf("SetUp error = %v, want a *SetUpError", err)
	}
	return se
}

func node() *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode, UID: "node-uid"}}
}

func claim(name, volume string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: name, UID: types.UID("claim-" + name)},
		Spec:       corev1.PersistentVolumeClaimSpec{VolumeName: volume},
		Status:     corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound},
	}
}

func persistentVolume(name, claimName string) *corev1.PersistentVolume {
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			AccessModes:  []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			MountOptions: []string{"noatime"},
			ClaimRef:     &corev1.ObjectReference{Namespace: "app", Name: claimName, UID: types.UID("claim-" + claimName)},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: testDriver, VolumeHandle: testHandle, FSType: "ext4",
				VolumeAttributes: map[string]string{"share": "s1"},
			}},
		},
	}
}

func csiDriver(attachRequired bool) *storagev1.CSIDriver {
	return &storagev1.CSIDriver{
		ObjectMeta: metav1.ObjectMeta{Name: testDriver},
		Spec:       storagev1.CSIDriverSpec{AttachRequired: ptr.To(attachRequired), PodInfoOnMount: ptr.To(true)},
	}
}

func pod(name string, volumes ...corev1.Volume) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: name, UID: types.UID("uid-" + name)},
		Spec:       corev1.PodSpec{ServiceAccountName: "robot", Volumes: volumes},
	}
}

func claimVolume(name, claimName string, readOnly bool) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claimName, ReadOnly: readOnly},
	}}
}

func (f *fixture) target(p *corev1.Pod, volume string) string {
	return filepath.Join(f.root, "pods", string(p.UID), "volumes", "kubernetes.io~csi", volume, "mount")
}

func (f *fixture) stagingPath() string {
	return filepath.Join(f.m.stagingDir(testDriver, testHandle), "globalmount")
}

func TestSetUpWaitsForAttachThenStagesAndPublishes(t *testing.T) {
	root := t.TempDir()
	d := &fakeNode{stage: true}
	serveDriver(t, root, d)
	f := newFixture(t, root, node(), claim("data", "pv-1"), persistentVolume("pv-1", "data"))
	p := pod("web", claimVolume("data", "data", false), corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})

	// First the volume must be reported in use: it is at once.
	se := f.setUpError(p)
	if se.Reason() != "" || !se.Waiting() || !strings.Contains(se.Error(), "reported in use by node") {
		t.Fatalf("SetUp before the volume is in use: reason %q, waiting %v, error %v", se.Reason(), se.Waiting(), se)
	}
	if got := f.m.VolumesInUse(); !slices.Equal(got, []corev1.UniqueVolumeName{unique}) {
		t.Fatalf("VolumesInUse = %v, want [%s]", got, unique)
	}
	select {
	case <-f.changes:
	default:
		t.Fatal("the change of the volumes in use was not told")
	}

	n := node()
	n.Status.VolumesInUse = []corev1.UniqueVolumeName{unique}
	if _, err := f.client.CoreV1().Nodes().UpdateStatus(f.ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually("SetUp waits for attach", func() error {
		if se := f.setUpError(p); !strings.Contains(se.Error(), `to be attached to node "node-a"`) || se.Reason() != "" {
			return se
		}
		return nil
	})

	// Not attached within the attach timeout: FailedAttachVolume.
	f.clock.Step(time.Minute)
	if se := f.setUpError(p); se.Reason() != ReasonFailedAttachVolume || !se.Waiting() || !strings.Contains(se.Error(), "timed out after 1m0s waiting for") {
		t.Fatalf("SetUp after the attach timeout: reason %q, error %v", se.Reason(), se)
	}

	n.Status.VolumesAttached = []corev1.AttachedVolume{{Name: unique}}
	if _, err := f.client.CoreV1().Nodes().UpdateStatus(f.ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually("SetUp waits for the VolumeAttachment", func() error {
		if se := f.setUpError(p); !strings.Contains(se.Error(), "waiting for VolumeAttachment") {
			return se
		}
		return nil
	})
	va := &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: csi.AttachmentName(testDriver, testHandle, testNode)},
		Spec:       storagev1.VolumeAttachmentSpec{Attacher: testDriver, NodeName: testNode},
		Status:     storagev1.VolumeAttachmentStatus{Attached: true, AttachmentMetadata: map[string]string{"device": "/dev/x"}},
	}
	if _, err := f.client.StorageV1().VolumeAttachments().Create(f.ctx, va, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var paths map[string]string
	f.eventually("SetUp succeeds", func() error {
		var err error
		paths, err = f.m.SetUp(f.ctx, p)
		return err
	})
	if want := f.target(p, "data"); len(paths) != 1 || paths["data"] != want {
		t.Errorf("SetUp = %v, want only data at %s", paths, want)
	}
	if got, want := d.called(), []string{"NodeStageVolume " + testHandle, "NodePublishVolume " + f.target(p, "data")}; !slices.Equal(got, want) {
		t.Errorf("calls = %v, want %v", got, want)
	}
	d.mu.Lock()
	if d.stg.GetPublishContext()["device"] != "/dev/x" || d.stg.GetStagingTargetPath() != f.stagingPath() ||
		d.stg.GetVolumeCapability().GetMount().GetFsType() != "ext4" ||
		d.stg.GetVolumeCapability().GetAccessMode().GetMode() != csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER {
		t.Errorf("NodeStageVolume request = %v", d.stg)
	}
	if d.pub.GetPublishContext()["device"] != "/dev/x" || d.pub.GetStagingTargetPath() != f.stagingPath() || d.pub.GetReadonly() ||
		d.pub.GetVolumeContext()["share"] != "s1" || d.pub.GetVolumeContext()["csi.storage.k8s.io/pod.name"] != "" {
		t.Errorf("NodePublishVolume request = %v", d.pub)
	}
	d.mu.Unlock()

	// Again (a pod update): nothing more is asked of the driver.
	if _, err := f.m.SetUp(f.ctx, p); err != nil {
		t.Fatal(err)
	}
	if got := len(d.called()); got != 2 {
		t.Errorf("a second SetUp called the driver again: %v", d.called())
	}
}

func TestStageOnceUnstageAfterTheLastPod(t *testing.T) {
	root := t.TempDir()
	d := &fakeNode{stage: true}
	serveDriver(t, root, d)
	f := newFixture(t, root, node(), csiDriver(false), claim("data", "pv-1"), persistentVolume("pv-1", "data"))
	a := pod("a", claimVolume("data", "data", true))
	b := pod("b", claimVolume("data", "data", false))
	for _, p := range []*corev1.Pod{a, b} {
		if _, err := f.m.SetUp(f.ctx, p); err != nil {
			t.Fatalf("SetUp of pod %s without attach: %v", p.Name, err)
		}
	}
	if got, want := d.called(), []string{"NodeStageVolume " + testHandle, "NodePublishVolume " + f.target(a, "data"), "NodePublishVolume " + f.target(b, "data")}; !slices.Equal(got, want) {
		t.Fatalf("calls = %v, want one stage and two publishes: %v", got, want)
	}
	d.mu.Lock()
	if d.pub.GetReadonly() || d.pub.GetVolumeContext()["csi.storage.k8s.io/pod.name"] != "b" || d.pub.GetVolumeContext()["csi.storage.k8s.io/serviceAccount.name"] != "robot" {
		t.Errorf("NodePublishVolume of pod b = %v, want read-write with pod information", d.pub)
	}
	d.mu.Unlock()

	// Pod a goes: unpublished, still staged for b, still in use.
	if err := f.m.TearDown(f.ctx, a.UID); err != nil {
		t.Fatal(err)
	}
	if err := f.m.Release(f.ctx, a.UID); err != nil {
		t.Fatal(err)
	}
	if got := d.called()[3:]; !slices.Equal(got, []string{"NodeUnpublishVolume " + f.target(a, "data")}) {
		t.Errorf("calls after pod a left = %v, want its unpublish only", got)
	}
	if _, err := os.Stat(filepath.Dir(f.target(a, "data"))); !os.IsNotExist(err) {
		t.Errorf("the volume directory of pod a is still there: %v", err)
	}
	if got := f.m.VolumesInUse(); !slices.Equal(got, []corev1.UniqueVolumeName{unique}) {
		t.Errorf("VolumesInUse = %v while pod b uses the volume", got)
	}

	// Pod b goes: unpublished, then unstaged; nothing in use.
	if err := f.m.Release(f.ctx, b.UID); err == nil {
		t.Error("Release of a pod whose volume is still published succeeded")
	}
	if err := f.m.TearDown(f.ctx, b.UID); err != nil {
		t.Fatal(err)
	}
	if err := f.m.Release(f.ctx, b.UID); err != nil {
		t.Fatal(err)
	}
	if got, want := d.called()[4:], []string{"NodeUnpublishVolume " + f.target(b, "data"), "NodeUnstageVolume " + testHandle}; !slices.Equal(got, want) {
		t.Errorf("calls after pod b left = %v, want %v", got, want)
	}
	if got := f.m.VolumesInUse(); len(got) != 0 {
		t.Errorf("VolumesInUse = %v after every pod left", got)
	}
	if _, err := os.Stat(filepath.Dir(f.stagingPath())); !os.IsNotExist(err) {
		t.Errorf("the staging directory is still there: %v", err)
	}
	// Released twice: nothing to do.
	if err := f.m.Release(f.ctx, b.UID); err != nil {
		t.Error(err)
	}
}

func TestTearDownFailuresAreKeptAndRetried(t *testing.T) {
	root := t.TempDir()
	d := &fakeNode{stage: true}
	serveDriver(t, root, d)
	f := newFixture(t, root, node(), csiDriver(false), claim("data", "pv-1"), persistentVolume("pv-1", "data"))
	p := pod("web", claimVolume("data", "data", false))
	if _, err := f.m.SetUp(f.ctx, p); err != nil {
		t.Fatal(err)
	}

	d.setFail("NodeUnpublishVolume", status.Error(codes.Internal, "device busy"))
	if err := f.m.TearDown(f.ctx, p.UID); err == nil || !strings.Contains(err.Error(), "device busy") || !strings.Contains(err.Error(), `volume "data"`) {
		t.Fatalf("TearDown error = %v, want the driver's error naming the volume", err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(f.target(p, "data")), "vol_data.json")); err != nil {
		t.Errorf("the record of a volume that failed to unpublish is gone: %v", err)
	}
	d.setFail("NodeUnpublishVolume", nil)
	d.setFail("NodeUnstageVolume", status.Error(codes.Internal, "still busy"))
	if err := f.m.TearDown(f.ctx, p.UID); err != nil {
		t.Fatal(err)
	}
	if err := f.m.Release(f.ctx, p.UID); err == nil || !strings.Contains(err.Error(), "still busy") {
		t.Fatalf("Release error = %v, want the driver's unstage error", err)
	}
	if got := f.m.VolumesInUse(); !slices.Equal(got, []corev1.UniqueVolumeName{unique}) {
		t.Errorf("VolumesInUse = %v while the volume is still staged", got)
	}
	d.setFail("NodeUnstageVolume", nil)
	if err := f.m.Release(f.ctx, p.UID); err != nil {
		t.Fatal(err)
	}
	if got := f.m.VolumesInUse(); len(got) != 0 {
		t.Errorf("VolumesInUse = %v after the retried release", got)
	}
}

func TestARestartedAgentTearsDownFromItsRecords(t *testing.T) {
	root := t.TempDir()
	d := &fakeNode{stage: true}
	serveDriver(t, root, d)
	objs := []runtime.Object{node(), csiDriver(false), claim("data", "pv-1"), persistentVolume("pv-1", "data")}
	before := newFixture(t, root, objs...)
	kept, gone := pod("kept", claimVolume("data", "data", false)), pod("gone", claimVolume("data", "data", false))
	for _, p := range []*corev1.Pod{kept, gone} {
		if _, err := before.m.SetUp(before.ctx, p); err != nil {
			t.Fatal(err)
		}
	}

	// A new agent, with no API objects at all: the records are enough.
	after := newFixture(t, root)
	if got := after.m.VolumesInUse(); !slices.Equal(got, []corev1.UniqueVolumeName{unique}) {
		t.Fatalf("VolumesInUse of the restarted agent = %v, want [%s] from the records", got, unique)
	}
	// The pod the new agent does not know is cleaned up; the other stays.
	if err := after.m.Sweep(after.ctx, func(uid types.UID) bool { return uid == kept.UID }); err != nil {
		t.Fatal(err)
	}
	if got, want := d.called()[3:], []string{"NodeUnpublishVolume " + after.target(gone, "data")}; !slices.Equal(got, want) {
		t.Errorf("calls of the sweep = %v, want %v", got, want)
	}
	if err := after.m.TearDown(after.ctx, kept.UID); err != nil {
		t.Fatal(err)
	}
	if err := after.m.Release(after.ctx, kept.UID); err != nil {
		t.Fatal(err)
	}
	if got, want := d.called()[4:], []string{"NodeUnpublishVolume " + after.target(kept, "data"), "NodeUnstageVolume " + testHandle}; !slices.Equal(got, want) {
		t.Errorf("calls of the restarted agent = %v, want %v", got, want)
	}
	if got := after.m.VolumesInUse(); len(got) != 0 {
		t.Errorf("VolumesInUse = %v after everything was torn down", got)
	}
}

func TestSweepUnstagesWhatNoPodUses(t *testing.T) {
	root := t.TempDir()
	d := &fakeNode{stage: true}
	serveDriver(t, root, d)
	f := newFixture(t, root, node(), csiDriver(false), claim("data", "pv-1"), persistentVolume("pv-1", "data"))
	p := pod("web", claimVolume("data", "data", false))
	if _, err := f.m.SetUp(f.ctx, p); err != nil {
		t.Fatal(err)
	}
	if err := f.m.TearDown(f.ctx, p.UID); err != nil {
		t.Fatal(err)
	}
	// The agent stops before the release: the staged volume is left.
	after := newFixture(t, root)
	if got := after.m.VolumesInUse(); !slices.Equal(got, []corev1.UniqueVolumeName{unique}) {
		t.Fatalf("VolumesInUse = %v, want the staged volume", got)
	}
	if err := after.m.Sweep(after.ctx, func(types.UID) bool { return true }); err != nil {
		t.Fatal(err)
	}
	if got := d.called(); got[len(got)-1] != "NodeUnstageVolume "+testHandle {
		t.Errorf("calls = %v, want the unstage last", got)
	}
	if got := after.m.VolumesInUse(); len(got) != 0 {
		t.Errorf("VolumesInUse = %v after the sweep", got)
	}
}

func TestSetUpErrors(t *testing.T) {
	pending := claim("pending", "")
	pending.Status.Phase = corev1.ClaimPending
	notCSI := persistentVolume("pv-nfs", "nfs")
	notCSI.Spec.CSI = nil
	notCSI.Spec.NFS = &corev1.NFSVolumeSource{Server: "s", Path: "/"}
	block := persistentVolume("pv-block", "block")
	block.Spec.VolumeMode = ptr.To(corev1.PersistentVolumeBlock)
	otherDriver := persistentVolume("pv-other", "other")
	otherDriver.Spec.CSI.Driver = "missing.csi.io"
	stolen := persistentVolume("pv-stolen", "someone-else")
	missingDriver := csiDriver(false)
	missingDriver.Name = "missing.csi.io"

	for _, c := range []struct {
		name    string
		volume  corev1.Volume
		fail    string // the driver's failing method
		reason  string
		waiting bool
		message string
	}{
		{"claim missing", claimVolume("v", "nope", false), "", ReasonFailedMount, true, `persistentvolumeclaim "nope" not found`},
		{"claim pending", claimVolume("v", "pending", false), "", ReasonFailedMount, true, `persistentvolumeclaim "pending" is not bound (phase "Pending")`},
		{"volume bound elsewhere", claimVolume("v", "stolen", false), "", ReasonFailedMount, true, `persistentvolume "pv-stolen" is not bound to persistentvolumeclaim "stolen"`},
		{"not a CSI volume", claimVolume("v", "nfs", false), "", ReasonFailedMount, false, "is not a CSI volume"},
		{"block volume", claimVolume("v", "block", false), "", ReasonFailedMount, false, "is a block volume"},
		{"driver not registered", claimVolume("v", "other", false), "", ReasonFailedMount, false, `driver "missing.csi.io": no socket`},
		{"inline csi", corev1.Volume{Name: "v", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: testDriver}}}, "", ReasonFailedMount, false, "inline csi volumes"},
		{"stage fails", claimVolume("v", "data", false), "NodeStageVolume", ReasonFailedMount, false, "MountVolume.MountDevice failed for kubernetes.io/csi/dir.csi.nodelet.io^vol-1"},
		{"publish fails", claimVolume("v", "data", false), "NodePublishVolume", ReasonFailedMount, false, "MountVolume.SetUp failed for kubernetes.io/csi/dir.csi.nodelet.io^vol-1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			d := &fakeNode{stage: true}
			serveDriver(t, root, d)
			if c.fail != "" {
				d.setFail(c.fail, status.Error(codes.Internal, "injected"))
			}
			f := newFixture(t, root, node(), csiDriver(false), missingDriver,
				claim("data", "pv-1"), persistentVolume("pv-1", "data"), pending,
				claim("nfs", "pv-nfs"), notCSI, claim("block", "pv-block"), block,
				claim("other", "pv-other"), otherDriver, claim("stolen", "pv-stolen"), stolen)
			se := f.setUpError(pod("web", c.volume))
			if se.Reason() != c.reason || se.Waiting() != c.waiting || !strings.Contains(se.Error(), c.message) || !strings.HasPrefix(se.Error(), `volume "v": `) {
				t.Errorf("SetUp: reason %q, waiting %v, error %q; want %q, %v, containing %q", se.Reason(), se.Waiting(), se, c.reason, c.waiting, c.message)
			}
			if c.fail != "" && !strings.Contains(se.Error(), "injected") {
				t.Errorf("SetUp error %q does not carry the driver's", se)
			}
		})
	}
}

func TestEphemeralVolumeUsesThePodsClaim(t *testing.T) {
	root := t.TempDir()
	serveDriver(t, root, &fakeNode{})
	p := pod("web", corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{}}})
	owned := claim("web-scratch", "pv-1")
	owned.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "web", UID: p.UID, Controller: ptr.To(true)}}
	f := newFixture(t, root, node(), csiDriver(false), owned, persistentVolume("pv-1", "web-scratch"))
	paths, err := f.m.SetUp(f.ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if paths["scratch"] != f.target(p, "scratch") {
		t.Errorf("SetUp = %v", paths)
	}
	other := pod("web", p.Spec.Volumes...)
	other.UID = "another-uid"
	if se := f.setUpError(other); !strings.Contains(se.Error(), "was not created for this pod") {
		t.Errorf("SetUp of another pod of that name: %v", se)
	}
}

func TestNewValidates(t *testing.T) {
	if _, err := New(nil, Sources{}, Options{RootDir: "relative", AttachTimeout: -1}); err == nil {
		t.Error("New accepted no client, no listers, no node name, a relative root and a negative timeout")
	}
}

// TestFSGroupOwnsThePublishedVolume: the node gives a published volume to
// the pod's fsGroup as the kubelet decides it by the driver's
// fsGroupPolicy, and leaves a read-only one alone.
func TestFSGroupOwnsThePublishedVolume(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("changing a file's group to any group needs root")
	}
	for _, tc := range []struct {
		name     string
		policy   *storagev1.FSGroupPolicy
		readOnly bool
		owned    bool
	}{
		{"default", nil, false, true},
		{"file", ptr.To(storagev1.FileFSGroupPolicy), false, true},
		{"none", ptr.To(storagev1.NoneFSGroupPolicy), false, false},
		{"read-only", nil, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			serveDriver(t, root, &fakeNode{})
			driver := csiDriver(false)
			driver.Spec.FSGroupPolicy = tc.policy
			f := newFixture(t, root, node(), claim("data", "pv-1"), persistentVolume("pv-1", "data"), driver)
			p := pod("web", claimVolume("data", "data", tc.readOnly))
			p.Spec.SecurityContext = &corev1.PodSecurityContext{FSGroup: ptr.To[int64](4321)}
			if _, err := f.m.SetUp(f.ctx, p); err != nil {
				t.Fatal(err)
			}
			st, err := os.Stat(f.target(p, "data"))
			if err != nil {
				t.Fatal(err)
			}
			gid := st.Sys().(*syscall.Stat_t).Gid
			setgid := st.Mode()&os.ModeSetgid != 0
			if owned := gid == 4321 && setgid; owned != tc.owned {
				t.Errorf("target group %d, set-group-ID %v; want it given to fsGroup: %v", gid, setgid, tc.owned)
			}
		})
	}
}
