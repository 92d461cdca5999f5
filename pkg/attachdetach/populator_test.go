package attachdetach

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
)

// csiPlugin attaches every CSI volume except those of driver "noattach".
type csiPlugin struct{}

func (csiPlugin) Name() string               { return "test" }
func (csiPlugin) CanSupport(spec *Spec) bool { return spec.CSI() != nil }
func (csiPlugin) AttachRequired(spec *Spec) (bool, error) {
	return spec.CSI().Driver != "noattach", nil
}
func (csiPlugin) VolumeName(spec *Spec) (corev1.UniqueVolumeName, error) {
	return CSIVolumeName(spec.CSI().Driver, spec.CSI().VolumeHandle), nil
}
func (csiPlugin) Attach(context.Context, Volume, types.NodeName) error { return nil }
func (csiPlugin) Detach(context.Context, Volume, types.NodeName) error { return nil }
func (csiPlugin) VolumesAreAttached(context.Context, []Volume, types.NodeName) (map[corev1.UniqueVolumeName]bool, error) {
	return nil, nil
}

func boundPair(name, driver string) (*corev1.PersistentVolume, *corev1.PersistentVolumeClaim) {
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
		Spec:       corev1.PersistentVolumeClaimSpec{VolumeName: "pv-" + name},
		Status:     corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound},
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv-" + name},
		Spec: corev1.PersistentVolumeSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			ClaimRef:    &corev1.ObjectReference{Namespace: "ns", Name: name, UID: pvc.UID},
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				CSI: &corev1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: name},
			},
		},
	}
	return pv, pvc
}

func claimPod(name, node string, claims ...string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	for _, c := range claims {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: c, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c},
		}})
	}
	return p
}

func TestPopulatorFromInformers(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	pv1, c1 := boundPair("c1", "d")
	pvNo, cNo := boundPair("cno", "noattach")
	c2 := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c2", UID: "uid-c2"},
		Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending}}
	gone := CSIVolumeName("d", "gone")
	node1 := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1"}, Status: corev1.NodeStatus{
		VolumesAttached: []corev1.AttachedVolume{{Name: gone}, {Name: CSIVolumeName("d", "c1")}},
		VolumesInUse:    []corev1.UniqueVolumeName{CSIVolumeName("d", "c1")},
	}}
	node2 := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node2"}}
	withEmptyDir := claimPod("empty", "node1")
	withEmptyDir.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	client := fake.NewClientset(node1, node2, pv1, c1, pvNo, cNo, c2,
		claimPod("a", "node1", "c1"), claimPod("b", "node2", "c1"), claimPod("c", "node1", "c2"),
		claimPod("noattach", "node1", "cno"), withEmptyDir)

	factory := informers.NewSharedInformerFactory(client, 0)
	core := factory.Core().V1()
	dsw, asw := NewDesiredStateOfWorld(), NewActualStateOfWorld(nil)
	p, err := NewPopulator(dsw, asw, Plugins{csiPlugin{}}, Informers{
		Pods: core.Pods().Informer(), Claims: core.PersistentVolumeClaims().Informer(),
		Volumes: core.PersistentVolumes().Informer(), Nodes: core.Nodes().Informer(),
	}, func(node string) bool { return node != "node2" }, PopulatorOptions{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() { done <- p.Run(ctx) }()
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	select {
	case <-p.Synced():
	case err := <-done:
		t.Fatalf("Run = %v before sync", err)
	case <-time.After(30 * time.Second):
		t.Fatal("populator did not sync")
	}

	v1, v2 := CSIVolumeName("d", "c1"), CSIVolumeName("d", "c2")
	if !dsw.NodeExists("node1") || dsw.NodeExists("node2") {
		t.Errorf("managed nodes: node1 %v, node2 %v; want only node1", dsw.NodeExists("node1"), dsw.NodeExists("node2"))
	}
	got := dsw.GetVolumesToAttach()
	if len(got) != 1 || got[0].VolumeName != v1 || got[0].NodeName != "node1" || len(got[0].ScheduledPods) != 1 || got[0].ScheduledPods[0].Name != "a" {
		t.Errorf("volumes to attach = %+v, want %s on node1 for pod a", got, v1)
	}
	if s := got[0].Spec; s.Name() != "pv-c1" || s.MultiAttachAllowed() {
		t.Errorf("spec name %q, multi-attach %v", s.Name(), s.MultiAttachAllowed())
	}
	// The nodes' reports fill the actual state, with their mounts.
	for _, av := range asw.GetAttachedVolumesForNode("node1") {
		switch av.VolumeName {
		case gone:
			if av.MountedByNode || av.Spec.CSI() == nil || av.Spec.CSI().VolumeHandle != "gone" {
				t.Errorf("volume without PV: %+v, want unmounted with a CSI spec from its name", av)
			}
		case v1:
			if !av.MountedByNode || av.Spec.Name() != "pv-c1" {
				t.Errorf("volume c1: %+v, want mounted with its PV's spec", av)
			}
		default:
			t.Errorf("unexpected attached volume %s", av.VolumeName)
		}
	}

	// The claim gets bound: its pod's volume is added.
	pv2, bound := boundPair("c2", "d")
	mustDo(t, func() error {
		_, err := client.CoreV1().PersistentVolumes().Create(ctx, pv2, metav1.CreateOptions{})
		return err
	})
	mustDo(t, func() error {
		_, err := client.CoreV1().PersistentVolumeClaims("ns").Update(ctx, bound, metav1.UpdateOptions{})
		return err
	})
	poll(t, "volume of the newly bound claim added", func() bool { return dsw.VolumeExists(v2, "node1") })

	// Pod a is deleted, pod c succeeds: their volumes go.
	mustDo(t, func() error { return client.CoreV1().Pods("ns").Delete(ctx, "a", metav1.DeleteOptions{}) })
	poll(t, "volume of the deleted pod removed", func() bool { return !dsw.VolumeExists(v1, "node1") })
	c := claimPod("c", "node1", "c2")
	c.Status.Phase = corev1.PodSucceeded
	mustDo(t, func() error {
		_, err := client.CoreV1().Pods("ns").UpdateStatus(ctx, c, metav1.UpdateOptions{})
		return err
	})
	poll(t, "volume of the finished pod removed", func() bool { return !dsw.VolumeExists(v2, "node1") })

	// The node reports a volume in use.
	n1 := node1.DeepCopy()
	n1.Status.VolumesInUse = []corev1.UniqueVolumeName{gone}
	mustDo(t, func() error {
		_, err := client.CoreV1().Nodes().UpdateStatus(ctx, n1, metav1.UpdateOptions{})
		return err
	})
	poll(t, "mountedByNode follows volumesInUse", func() bool {
		for _, av := range asw.GetAttachedVolumesForNode("node1") {
			if av.VolumeName == gone {
				return av.MountedByNode
			}
		}
		return false
	})

	// A node that appears later gets the volumes of the pods already on it.
	_, c3 := boundPair("c3", "d")
	pv3, _ := boundPair("c3", "d")
	mustDo(t, func() error {
		_, err := client.CoreV1().PersistentVolumes().Create(ctx, pv3, metav1.CreateOptions{})
		return err
	})
	mustDo(t, func() error {
		_, err := client.CoreV1().PersistentVolumeClaims("ns").Create(ctx, c3, metav1.CreateOptions{})
		return err
	})
	mustDo(t, func() error {
		_, err := client.CoreV1().Pods("ns").Create(ctx, claimPod("late", "node3", "c3"), metav1.CreateOptions{})
		return err
	})
	mustDo(t, func() error {
		_, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node3"}}, metav1.CreateOptions{})
		return err
	})
	poll(t, "volume of a pod on a node managed later added", func() bool { return dsw.VolumeExists(CSIVolumeName("d", "c3"), "node3") })

	// Someone overwrites node1's attached volumes: they are written again.
	asw.GetVolumesToReportAttached()
	n1 = n1.DeepCopy()
	n1.Status.VolumesAttached = nil
	mustDo(t, func() error {
		_, err := client.CoreV1().Nodes().UpdateStatus(ctx, n1, metav1.UpdateOptions{})
		return err
	})
	poll(t, "overwritten status marked for an update", func() bool {
		ok, vs := asw.GetVolumesToReportAttachedForNode("node1")
		return ok && len(vs) == 2
	})

	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
}

func TestPopulatorRemovesPodsMissedByEvents(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := fake.NewClientset()
	factory := informers.NewSharedInformerFactory(client, 0)
	core := factory.Core().V1()
	dsw := NewDesiredStateOfWorld()
	p, err := NewPopulator(dsw, NewActualStateOfWorld(nil), Plugins{csiPlugin{}}, Informers{
		Pods: core.Pods().Informer(), Claims: core.PersistentVolumeClaims().Informer(),
		Volumes: core.PersistentVolumes().Informer(), Nodes: core.Nodes().Informer(),
	}, func(string) bool { return true }, PopulatorOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dsw.AddNode("node1")
	v := testVolume("v")
	alive, replaced, gone := claimPod("alive", "node1"), claimPod("replaced", "node1"), claimPod("gone", "node1")
	for _, pod := range []*corev1.Pod{alive, replaced, gone} {
		if err := dsw.AddPod(pod, v, "node1"); err != nil {
			t.Fatal(err)
		}
	}
	indexer := core.Pods().Informer().GetIndexer()
	newer := replaced.DeepCopy()
	newer.UID = "another"
	for _, pod := range []*corev1.Pod{alive, newer} {
		if err := indexer.Add(pod); err != nil {
			t.Fatal(err)
		}
	}

	p.removeDeletedPods(ctx)
	var left []string
	for _, pv := range dsw.GetPodVolumes() {
		left = append(left, pv.Pod.Name)
	}
	if len(left) != 1 || left[0] != "alive" {
		t.Errorf("pods left = %v, want [alive]", left)
	}
}

func TestPodTerminated(t *testing.T) {
	now := metav1.Now()
	running := corev1.ContainerStatus{State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
	exited := corev1.ContainerStatus{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{}}}
	for _, tc := range []struct {
		name string
		pod  corev1.Pod
		want bool
	}{
		{"running", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning}}, false},
		{"succeeded", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodSucceeded}}, true},
		{"failed", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed}}, true},
		{"deleting, container running", corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &now},
			Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{exited, running}}}, false},
		{"deleting, containers exited", corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &now},
			Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{exited}}}, true},
	} {
		if got := podTerminated(&tc.pod); got != tc.want {
			t.Errorf("%s: podTerminated = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func mustDo(t *testing.T, f func() error) {
	t.Helper()
	if err := f(); err != nil {
		t.Fatal(err)
	}
}

// poll waits for cond until a deadline.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
