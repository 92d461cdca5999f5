package process

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/attachdetach"
	"github.com/nodelet/nodelet/pkg/csi"
	"github.com/nodelet/nodelet/pkg/hostnode"
	"github.com/nodelet/nodelet/pkg/lifecycle"
	"github.com/nodelet/nodelet/pkg/lifecycle/csimount"
	"github.com/nodelet/nodelet/pkg/lifecycle/env"
	"github.com/nodelet/nodelet/pkg/lifecycle/hostvolume"
	"github.com/nodelet/nodelet/pkg/provider"
	"github.com/nodelet/nodelet/pkg/providers/process/sandbox"
)

// The test binary doubles as the nodelet binary for the runtime's
// subcommands.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && sandbox.IsSubcommand(os.Args[1]) {
		os.Exit(sandbox.Main(os.Args[1:]))
	}
	code := m.Run()
	if code == 0 && os.Geteuid() == 0 {
		// Every test removed its sandboxes: their parent goes too.
		if err := sandbox.RemoveCgroupParents(testCgroupName); err != nil {
			fmt.Fprintln(os.Stderr, "left behind:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// testCgroupName is the tests' parent cgroup of their pods.
const testCgroupName = "nodelet-test-process"

const (
	csiDriverName = "dir.csi.nodelet.io"
	csiHandle     = "vol-1"
	csiNodeName   = "node-a"
)

// dirDriver is a CSI node service that keeps its one volume in a host
// directory: staging bind-mounts the directory, publishing bind-mounts the
// staging path, as a real driver mounts a device. It records its calls and
// fails a method while fail names it.
type dirDriver struct {
	csipb.UnimplementedIdentityServer
	csipb.UnimplementedNodeServer
	data string

	mu    sync.Mutex
	calls []string
	fail  map[string]error
}

func (d *dirDriver) record(method string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls = append(d.calls, method)
	return d.fail[method]
}

func (d *dirDriver) setFail(method string, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fail == nil {
		d.fail = map[string]error{}
	}
	d.fail[method] = err
}

func (d *dirDriver) called() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for _, c := range d.calls {
		if c != "NodeGetCapabilities" && !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out
}

// count is how many times method was called.
func (d *dirDriver) count(method string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, c := range d.calls {
		if c == method {
			n++
		}
	}
	return n
}

func (d *dirDriver) NodeGetCapabilities(context.Context, *csipb.NodeGetCapabilitiesRequest) (*csipb.NodeGetCapabilitiesResponse, error) {
	_ = d.record("NodeGetCapabilities")
	return &csipb.NodeGetCapabilitiesResponse{Capabilities: []*csipb.NodeServiceCapability{{
		Type: &csipb.NodeServiceCapability_Rpc{Rpc: &csipb.NodeServiceCapability_RPC{Type: csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME}},
	}}}, nil
}

func bindOnce(source, target string) error {
	if mounted, err := hostvolume.IsMountPoint(target); err != nil || mounted {
		return err
	}
	return unix.Mount(source, target, "", unix.MS_BIND, "")
}

func (d *dirDriver) NodeStageVolume(_ context.Context, req *csipb.NodeStageVolumeRequest) (*csipb.NodeStageVolumeResponse, error) {
	if err := d.record("NodeStageVolume"); err != nil {
		return nil, err
	}
	if req.GetPublishContext()["dir"] != d.data {
		return nil, status.Errorf(codes.InvalidArgument, "publish context %v does not name the volume's directory", req.GetPublishContext())
	}
	if err := bindOnce(d.data, req.GetStagingTargetPath()); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csipb.NodeStageVolumeResponse{}, nil
}

func (d *dirDriver) NodeUnstageVolume(_ context.Context, req *csipb.NodeUnstageVolumeRequest) (*csipb.NodeUnstageVolumeResponse, error) {
	if err := d.record("NodeUnstageVolume"); err != nil {
		return nil, err
	}
	if err := unix.Unmount(req.GetStagingTargetPath(), 0); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csipb.NodeUnstageVolumeResponse{}, nil
}

func (d *dirDriver) NodePublishVolume(_ context.Context, req *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
	if err := d.record("NodePublishVolume"); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(req.GetTargetPath(), 0o750); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if err := bindOnce(req.GetStagingTargetPath(), req.GetTargetPath()); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csipb.NodePublishVolumeResponse{}, nil
}

func (d *dirDriver) NodeUnpublishVolume(_ context.Context, req *csipb.NodeUnpublishVolumeRequest) (*csipb.NodeUnpublishVolumeResponse, error) {
	if err := d.record("NodeUnpublishVolume"); err != nil {
		return nil, err
	}
	if err := unix.Unmount(req.GetTargetPath(), 0); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if err := os.Remove(req.GetTargetPath()); err != nil && !os.IsNotExist(err) {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csipb.NodeUnpublishVolumeResponse{}, nil
}

// csiEnv is a process provider with a CSI mounter, against a fake API and a
// driver that outlive the provider: an agent restart starts another
// provider on the same root directory.
type csiEnv struct {
	t        *testing.T
	ctx      context.Context
	root     string
	client   *fake.Clientset
	driver   *dirDriver
	recorder *record.FakeRecorder
	notified chan struct{}
	events   []string

	// The running agent's parts; stop ends it, leaving its pods running.
	p    *Provider
	m    *csimount.Manager
	rt   *sandbox.Manager
	stop func()
}

func newCSIEnv(t *testing.T) *csiEnv {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if _, err := os.Stat("/proc/self/ns/pid"); err != nil {
		t.Skip("needs PID namespaces")
	}
	_, ctx := ktesting.NewTestContext(t)
	root := t.TempDir()
	e := &csiEnv{
		t: t, ctx: ctx, root: root,
		driver:   &dirDriver{data: t.TempDir()},
		recorder: record.NewFakeRecorder(100),
		notified: make(chan struct{}, 100),
	}

	socket := csi.SocketPath(root, csiDriverName)
	if err := os.MkdirAll(filepath.Dir(socket), 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	csipb.RegisterIdentityServer(srv, e.driver)
	csipb.RegisterNodeServer(srv, e.driver)
	go func() { _ = srv.Serve(l) }()

	e.client = fake.NewClientset(
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: csiNodeName}},
		&storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: csiDriverName}, Spec: storagev1.CSIDriverSpec{AttachRequired: ptr.To(true)}},
		&corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "data", UID: "claim-uid"},
			Spec:       corev1.PersistentVolumeClaimSpec{VolumeName: "pv-1"},
			Status:     corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound},
		},
		&corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: "pv-1"},
			Spec: corev1.PersistentVolumeSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				ClaimRef:    &corev1.ObjectReference{Namespace: "app", Name: "data", UID: "claim-uid"},
				PersistentVolumeSource: corev1.PersistentVolumeSource{
					CSI: &corev1.CSIPersistentVolumeSource{Driver: csiDriverName, VolumeHandle: csiHandle},
				},
			},
		},
	)
	t.Cleanup(func() {
		// Whatever a failing test left: pods, then mounts.
		if e.rt != nil {
			pods, _ := e.p.GetPods(context.Background())
			for _, pod := range pods {
				_ = e.rt.RemoveSandbox(context.Background(), pod.UID)
			}
		}
		if e.stop != nil {
			e.stop()
		}
		srv.Stop()
		_ = filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
			if err == nil && info.IsDir() {
				_ = unix.Unmount(p, unix.MNT_DETACH)
			}
			return nil
		})
	})
	e.start()
	return e
}

// start runs an agent's provider, with its own informers and CSI mounter.
func (e *csiEnv) start() {
	t := e.t
	t.Helper()
	ctx, cancel := context.WithCancel(e.ctx)
	factory := informers.NewSharedInformerFactory(e.client, 0)
	sources := csimount.Sources{
		Claims:      factory.Core().V1().PersistentVolumeClaims().Lister(),
		Volumes:     factory.Core().V1().PersistentVolumes().Lister(),
		Drivers:     factory.Storage().V1().CSIDrivers().Lister(),
		Attachments: factory.Storage().V1().VolumeAttachments().Lister(),
		Nodes:       factory.Core().V1().Nodes().Lister(),
	}
	m, err := csimount.New(e.client, sources, csimount.Options{NodeName: csiNodeName, RootDir: e.root, AttachTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	rt, err := sandbox.NewManager(sandbox.Options{Exe: exe, RootDir: e.root, CgroupName: testCgroupName})
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(rt, lifecycle.Parts{
		Volumes: hostvolume.NewManager(e.client, hostvolume.Options{RootDir: e.root}),
		Env:     env.NewGetter(e.client), Recorder: e.recorder, CSI: m,
	}, Options{Options: hostnode.Options{NodeName: csiNodeName, Address: "127.0.0.1", RootDir: e.root}})
	if err != nil {
		t.Fatal(err)
	}
	changed := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { p.VolumesChanged() },
		UpdateFunc: func(any, any) { p.VolumesChanged() },
	}
	for _, inf := range []cache.SharedIndexInformer{factory.Core().V1().Nodes().Informer(), factory.Storage().V1().VolumeAttachments().Informer()} {
		if _, err := inf.AddEventHandler(changed); err != nil {
			t.Fatal(err)
		}
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	p.NotifyNodeStatus(ctx, func() {
		select {
		case e.notified <- struct{}{}:
		default:
		}
	})
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	e.p, e.m, e.rt = p, m, rt
	e.stop = func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		factory.Shutdown()
	}
}

// restart stops the agent, leaving its pods running, and starts another.
func (e *csiEnv) restart() {
	e.t.Helper()
	e.stop()
	e.stop = nil
	e.start()
}

// eventually polls check until it returns nil, failing with its last error
// after a deadline.
func (e *csiEnv) eventually(what string, check func() error) {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond) // polling interval, not synchronisation
	}
}

// event waits for a recorded Event containing want.
func (e *csiEnv) event(want string) {
	e.t.Helper()
	e.eventually("event "+want, func() error {
		for {
			select {
			case ev := <-e.recorder.Events:
				e.events = append(e.events, ev)
			default:
				for _, ev := range e.events {
					if strings.Contains(ev, want) {
						return nil
					}
				}
				return errors.New("not recorded; recorded: " + strings.Join(e.events, " | "))
			}
		}
	})
}

// waiting waits until the pod's container waits with a message containing
// want.
func (e *csiEnv) waiting(want string) {
	e.t.Helper()
	e.eventually("container waiting with "+want, func() error {
		pod, err := e.p.GetPod(e.ctx, "app", "web")
		if err != nil {
			return err
		}
		if cs := pod.Status.ContainerStatuses; len(cs) == 1 && cs[0].State.Waiting != nil &&
			cs[0].State.Waiting.Reason == "ContainerCreating" && strings.Contains(cs[0].State.Waiting.Message, want) {
			return nil
		}
		return errors.New(pod.Status.String())
	})
}

func (e *csiEnv) nodeStatus(update func(*corev1.NodeStatus)) {
	e.t.Helper()
	n, err := e.client.CoreV1().Nodes().Get(e.ctx, csiNodeName, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	update(&n.Status)
	if _, err := e.client.CoreV1().Nodes().UpdateStatus(e.ctx, n, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *csiEnv) volumesInUse() []corev1.UniqueVolumeName {
	n := &corev1.Node{}
	e.p.ConfigureNode(e.ctx, n)
	return n.Status.VolumesInUse
}

var csiUnique = attachdetach.CSIVolumeName(csiDriverName, csiHandle)

// csiPod writes into its CSI volume and sleeps.
func csiPod(t *testing.T) *corev1.Pod {
	return csiPodNamed(t, "web")
}

func csiPodNamed(t *testing.T, name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: name, UID: types.UID("uid-" + name + "-" + strings.ToLower(t.Name()))},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyAlways,
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"},
			}}},
			Containers: []corev1.Container{{
				Name: "main", Image: "none",
				Command:      []string{"sh", "-c", "echo written-through-the-mount > /data/out; exec sleep 3600"},
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
			}},
		},
	}
}

// attach makes the volume attached, as the volume controller and the
// external-attacher would.
func (e *csiEnv) attach() {
	e.t.Helper()
	va := &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: csi.AttachmentName(csiDriverName, csiHandle, csiNodeName)},
		Spec:       storagev1.VolumeAttachmentSpec{Attacher: csiDriverName, NodeName: csiNodeName},
		Status:     storagev1.VolumeAttachmentStatus{Attached: true, AttachmentMetadata: map[string]string{"dir": e.driver.data}},
	}
	if _, err := e.client.StorageV1().VolumeAttachments().Create(e.ctx, va, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.nodeStatus(func(s *corev1.NodeStatus) { s.VolumesAttached = []corev1.AttachedVolume{{Name: csiUnique}} })
}

// written waits until the container has written into the volume.
func (e *csiEnv) written() {
	e.t.Helper()
	e.eventually("the container writes into the volume", func() error {
		data, err := os.ReadFile(filepath.Join(e.driver.data, "out"))
		if err != nil {
			return err
		}
		if string(data) != "written-through-the-mount\n" {
			return errors.New("out holds " + string(data))
		}
		return nil
	})
}

// deleteAndWait deletes the pod and waits until the provider forgot it.
func (e *csiEnv) deleteAndWait(pod *corev1.Pod) {
	e.t.Helper()
	if err := e.p.DeletePod(e.ctx, pod.DeepCopy()); err != nil {
		e.t.Fatal(err)
	}
	e.eventually("the pod is gone", func() error {
		_, err := e.p.GetPod(e.ctx, "app", "web")
		if errors.Is(err, provider.ErrNotFound) {
			return nil
		}
		return errors.New("still there")
	})
}

func TestCSIVolumeOfAProcessPod(t *testing.T) {
	e := newCSIEnv(t)
	unique := csiUnique
	pod := csiPod(t)
	if err := e.p.CreatePod(e.ctx, pod); err != nil {
		t.Fatal(err)
	}

	// The volume is in use at once, and the node loop is told.
	e.waiting("to be reported in use by node")
	if got := e.volumesInUse(); !slices.Equal(got, []corev1.UniqueVolumeName{unique}) {
		t.Fatalf("volumesInUse = %v, want [%s]", got, unique)
	}
	select {
	case <-e.notified:
	default:
		t.Fatal("the node loop was not told that the volumes in use changed")
	}

	// Reported in use but never attached: FailedAttachVolume.
	e.nodeStatus(func(s *corev1.NodeStatus) { s.VolumesInUse = e.volumesInUse() })
	e.waiting("to be attached to node")
	e.event("Warning FailedAttachVolume")

	// Attached, but the driver fails to publish: FailedMount.
	e.driver.setFail("NodePublishVolume", status.Error(codes.Internal, "injected publish failure"))
	e.attach()
	e.waiting("injected publish failure")
	e.event("Warning FailedMount")

	// Once the driver publishes, the container writes through the mount.
	e.driver.setFail("NodePublishVolume", nil)
	e.written()
	// The container may write before the provider has reported it running.
	e.eventually("the container reported running", func() error {
		running, err := e.p.GetPod(e.ctx, "app", "web")
		if err != nil {
			return err
		}
		if cs := running.Status.ContainerStatuses; len(cs) != 1 || cs[0].State.Running == nil {
			return fmt.Errorf("container status = %+v, want running", cs)
		}
		return nil
	})

	// Deleted: unpublished, then unstaged; no longer in use.
	for len(e.notified) > 0 {
		<-e.notified
	}
	e.deleteAndWait(pod)
	if got, want := e.driver.called(), []string{"NodeStageVolume", "NodePublishVolume", "NodeUnpublishVolume", "NodeUnstageVolume"}; !slices.Equal(got, want) {
		t.Errorf("driver calls = %v, want %v", got, want)
	}
	if got := e.volumesInUse(); len(got) != 0 {
		t.Errorf("volumesInUse = %v after the pod is gone", got)
	}
	select {
	case <-e.notified:
	default:
		t.Error("the node loop was not told that the volume is no longer in use")
	}
	if _, err := os.Stat(filepath.Join(e.driver.data, "out")); err != nil {
		t.Errorf("the volume's data went with the pod: %v", err)
	}
	if _, err := os.Stat(filepath.Join(e.root, "pods", string(pod.UID))); !os.IsNotExist(err) {
		t.Errorf("the pod's directory remains: %v", err)
	}
}

func TestCSIVolumeAcrossAnAgentRestart(t *testing.T) {
	e := newCSIEnv(t)
	pod := csiPod(t)
	e.nodeStatus(func(s *corev1.NodeStatus) { s.VolumesInUse = []corev1.UniqueVolumeName{csiUnique} })
	e.attach()
	if err := e.p.CreatePod(e.ctx, pod); err != nil {
		t.Fatal(err)
	}
	e.written()

	e.restart()
	// The restarted agent reports the volume in use before it looked at any
	// pod, and keeps the running container's mount without asking the
	// driver again.
	if got := e.volumesInUse(); !slices.Equal(got, []corev1.UniqueVolumeName{csiUnique}) {
		t.Fatalf("volumesInUse after the restart = %v, want [%s]", got, csiUnique)
	}
	e.eventually("the pod is adopted and running", func() error {
		got, err := e.p.GetPod(e.ctx, "app", "web")
		if err != nil {
			return err
		}
		if cs := got.Status.ContainerStatuses; len(cs) != 1 || cs[0].State.Running == nil || cs[0].RestartCount != 0 {
			return errors.New(got.Status.String())
		}
		return nil
	})
	if stage, publish := e.driver.count("NodeStageVolume"), e.driver.count("NodePublishVolume"); stage != 1 || publish != 1 {
		t.Errorf("the driver staged %d and published %d times, want once each", stage, publish)
	}

	e.deleteAndWait(pod)
	if got, want := e.driver.called(), []string{"NodeStageVolume", "NodePublishVolume", "NodeUnpublishVolume", "NodeUnstageVolume"}; !slices.Equal(got, want) {
		t.Errorf("driver calls = %v, want %v", got, want)
	}
	if got := e.volumesInUse(); len(got) != 0 {
		t.Errorf("volumesInUse = %v after the pod is gone", got)
	}
}

// mountedAnywhere lists the processes in whose mount namespace path is a
// mount point.
func mountedAnywhere(path string) []string {
	var pids []string
	procs, _ := filepath.Glob("/proc/[0-9]*/mountinfo")
	for _, f := range procs {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			if fields := strings.Fields(line); len(fields) > 4 && fields[4] == path {
				pids = append(pids, filepath.Base(filepath.Dir(f)))
				break
			}
		}
	}
	return pids
}

// A sandbox's mount namespace is a private copy of the host's: a pod
// started while a volume is mounted holds a copy of its mounts. Removing the
// staging and publish directories once the driver unmounted them makes the
// kernel detach those copies too, before the volume leaves volumesInUse and
// may be detached.
func TestCSIVolumeLeavesNoMountInOtherPods(t *testing.T) {
	e := newCSIEnv(t)
	e.nodeStatus(func(s *corev1.NodeStatus) { s.VolumesInUse = []corev1.UniqueVolumeName{csiUnique} })
	e.attach()
	pod := csiPod(t)
	if err := e.p.CreatePod(e.ctx, pod); err != nil {
		t.Fatal(err)
	}
	e.written()
	// Another pod starts while the volume is mounted: its sandbox's mount
	// namespace is a copy of the host's, with the volume in it.
	other := csiPodNamed(t, "other")
	other.Spec.Volumes = nil
	other.Spec.Containers[0].Command = []string{"sleep", "3600"}
	other.Spec.Containers[0].VolumeMounts = nil
	if err := e.p.CreatePod(e.ctx, other); err != nil {
		t.Fatal(err)
	}
	e.eventually("the other pod runs", func() error {
		got, err := e.p.GetPod(e.ctx, "app", "other")
		if err != nil {
			return err
		}
		if cs := got.Status.ContainerStatuses; len(cs) != 1 || cs[0].State.Running == nil {
			return errors.New(got.Status.String())
		}
		return nil
	})
	staging, err := filepath.Glob(filepath.Join(e.root, "plugins", "kubernetes.io", "csi", csiDriverName, "*", "globalmount"))
	if err != nil || len(staging) != 1 {
		t.Fatalf("staging paths = %v, %v", staging, err)
	}
	if len(mountedAnywhere(staging[0])) < 2 {
		t.Fatalf("the staged volume is mounted in %v only, want the host and the other pod too", mountedAnywhere(staging[0]))
	}

	e.deleteAndWait(pod)
	if got := e.driver.called(); !slices.Contains(got, "NodeUnstageVolume") {
		t.Fatalf("driver calls = %v, want the volume unstaged", got)
	}
	if pids := mountedAnywhere(staging[0]); len(pids) > 0 {
		t.Errorf("the unstaged volume is still mounted in processes %v", pids)
	}
	e.deleteOther(other)
}

// deleteOther deletes a pod other than csiPod's and waits until it is gone.
func (e *csiEnv) deleteOther(pod *corev1.Pod) {
	e.t.Helper()
	if err := e.p.DeletePod(e.ctx, pod.DeepCopy()); err != nil {
		e.t.Fatal(err)
	}
	e.eventually("the pod is gone", func() error {
		if _, err := e.p.GetPod(e.ctx, pod.Namespace, pod.Name); errors.Is(err, provider.ErrNotFound) {
			return nil
		}
		return errors.New("still there")
	})
}
