package sim

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// fakeVolumes is the attach/detach controller as a simulated pod sees it:
// pods need the volumes listed for them (or get err), attached when the
// test says.
type fakeVolumes struct {
	mu       sync.Mutex
	byPod    map[string][]corev1.UniqueVolumeName
	err      error
	attached map[corev1.UniqueVolumeName]types.NodeName
}

func (f *fakeVolumes) PodVolumes(pod *corev1.Pod) ([]corev1.UniqueVolumeName, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	names, ok := f.byPod[pod.Name]
	if !ok {
		return nil, nil
	}
	return names, f.err
}

func (f *fakeVolumes) IsVolumeAttachedToNode(v corev1.UniqueVolumeName, node types.NodeName) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.attached[v] == node
}

func (f *fakeVolumes) set(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn()
}

func TestPodWaitsForItsVolumes(t *testing.T) {
	vols := &fakeVolumes{
		byPod:    map[string][]corev1.UniqueVolumeName{"db": {"kubernetes.io/csi/d^1"}},
		attached: map[corev1.UniqueVolumeName]types.NodeName{},
		err:      errors.New("claim ns/data is not bound"),
	}
	p, clk, _ := newTest(t, func(o *Options) { o.Volumes = vols })
	var nodeReports atomic.Int32
	p.NotifyNodeStatus(context.Background(), func() { nodeReports.Add(1) })
	ctx := context.Background()

	plain := testPod("plain", "100m", "")
	if err := p.CreatePod(ctx, plain); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, p, "plain").Status.Phase; got != corev1.PodRunning {
		t.Fatalf("a pod without attachable volumes is %s, want Running at once", got)
	}

	db := testPod("db", "100m", "")
	if err := p.CreatePod(ctx, db); err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{}
	p.ConfigureNode(ctx, node)
	if len(node.Status.VolumesInUse) != 0 {
		t.Errorf("volumesInUse = %v before the pod's volumes are resolved, want none", node.Status.VolumesInUse)
	}

	// Resolved but not attached: still Pending, and now in use.
	vols.set(func() { vols.err = nil })
	clk.Step(volumeRecheck)
	poll(t, "the volume in use", func() bool {
		p.ConfigureNode(ctx, node)
		return slices.Equal(node.Status.VolumesInUse, []corev1.UniqueVolumeName{"kubernetes.io/csi/d^1"})
	})
	if nodeReports.Load() == 0 {
		t.Error("the node was not reported when its volumes in use changed")
	}
	if got := mustGet(t, p, "db").Status.Phase; got != corev1.PodPending {
		t.Fatalf("pod with an unattached volume is %s, want Pending", got)
	}

	// Attached elsewhere does not count.
	vols.set(func() { vols.attached["kubernetes.io/csi/d^1"] = "other-node" })
	clk.Step(volumeRecheck)
	p.rearming.Wait()
	if got := mustGet(t, p, "db").Status.Phase; got != corev1.PodPending {
		t.Fatalf("pod whose volume is attached to another node is %s, want Pending", got)
	}

	vols.set(func() { vols.attached["kubernetes.io/csi/d^1"] = "sim-0" })
	clk.Step(volumeRecheck)
	poll(t, "the pod Running once attached", func() bool { return mustGet(t, p, "db").Status.Phase == corev1.PodRunning })

	before := nodeReports.Load()
	if err := p.DeletePod(ctx, mustGet(t, p, "db")); err != nil {
		t.Fatal(err)
	}
	p.ConfigureNode(ctx, node)
	if len(node.Status.VolumesInUse) != 0 {
		t.Errorf("volumesInUse = %v after the pod terminated, want none", node.Status.VolumesInUse)
	}
	if nodeReports.Load() == before {
		t.Error("the node was not reported when its pod's volume was released")
	}
}

func TestRestoredPodVolumesAreInUse(t *testing.T) {
	vols := &fakeVolumes{byPod: map[string][]corev1.UniqueVolumeName{"db": {"kubernetes.io/csi/d^1"}}}
	p, _, _ := newTest(t, func(o *Options) { o.Volumes = vols })
	running := testPod("db", "100m", "")
	other, _, _ := newTest(t, nil)
	if err := other.CreatePod(context.Background(), running); err != nil {
		t.Fatal(err)
	}
	if err := p.RestorePod(context.Background(), mustGet(t, other, "db")); err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{}
	p.ConfigureNode(context.Background(), node)
	if !slices.Equal(node.Status.VolumesInUse, []corev1.UniqueVolumeName{"kubernetes.io/csi/d^1"}) {
		t.Errorf("volumesInUse of a restored pod = %v, want its volume", node.Status.VolumesInUse)
	}
}

func TestPingErrorFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "ping-error")
	p, _, _ := newTest(t, func(o *Options) { o.PingErrorFile = file })
	if err := p.Ping(context.Background()); err != nil {
		t.Fatalf("ping without the file: %v", err)
	}
	if err := os.WriteFile(file, []byte("disk gone\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := p.Ping(context.Background()); err == nil || !strings.Contains(err.Error(), "disk gone") {
		t.Fatalf("ping with the file = %v, want its content", err)
	}
}

// poll waits for cond until a deadline.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestUnhealthyNodeIsWedged(t *testing.T) {
	file := filepath.Join(t.TempDir(), "ping-error")
	vols := &fakeVolumes{
		byPod:    map[string][]corev1.UniqueVolumeName{"db": {"kubernetes.io/csi/d^1"}},
		attached: map[corev1.UniqueVolumeName]types.NodeName{"kubernetes.io/csi/d^1": "sim-0"},
	}
	p, clk, _ := newTest(t, func(o *Options) { o.PingErrorFile, o.Volumes = file, vols })
	ctx := context.Background()
	if err := p.CreatePod(ctx, testPod("db", "100m", "")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte("hung"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := p.DeletePod(ctx, mustGet(t, p, "db")); err != nil {
		t.Fatal(err)
	}
	clk.Step(10 * volumeRecheck)
	p.rearming.Wait()
	node := &corev1.Node{}
	p.ConfigureNode(ctx, node)
	if _, err := p.GetPod(ctx, "ns", "db"); err != nil || len(node.Status.VolumesInUse) != 1 {
		t.Fatalf("a wedged node's deleted pod: %v, volumesInUse %v; want the pod kept and its volume in use", err, node.Status.VolumesInUse)
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	clk.Step(volumeRecheck)
	poll(t, "the pod terminated once the node recovered", func() bool {
		_, err := p.GetPod(ctx, "ns", "db")
		return err != nil
	})
}

// A pod with an image volume runs as any other: a simulated node has
// nothing to pull or mount, and an image volume needs no attaching.
func TestImageVolumePodRuns(t *testing.T) {
	p, _, _ := newTest(t, func(o *Options) { o.Volumes = &fakeVolumes{} })
	pod := testPod("tools", "", "")
	pod.Spec.Volumes = []corev1.Volume{{Name: "tools", VolumeSource: corev1.VolumeSource{
		Image: &corev1.ImageVolumeSource{Reference: "busybox:1.37", PullPolicy: corev1.PullIfNotPresent}}}}
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "tools", MountPath: "/vol", SubPath: "bin"}}
	if err := p.CreatePod(context.Background(), pod); err != nil {
		t.Fatalf("CreatePod: %v", err)
	}
	checkRunning(t, mustGet(t, p, "tools"), t0)
}
