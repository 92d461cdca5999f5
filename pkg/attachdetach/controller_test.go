package attachdetach_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"

	"github.com/nodelet/nodelet/pkg/attachdetach"
	"github.com/nodelet/nodelet/pkg/attachdetach/simattacher"
)

// TestControllerFromInformers runs the assembled controller against a fake
// clientset: a pod's bound claim is attached and reported in node status;
// once the pod is gone and the node no longer uses the volume it is
// detached.
func TestControllerFromInformers(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	p := pv("pv1")
	claim := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "data", UID: "claim-uid"},
		Spec:       corev1.PersistentVolumeClaimSpec{VolumeName: p.Name},
		Status:     corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound},
	}
	p.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "ns1", Name: "data", UID: claim.UID}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node1"},
		Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
	}
	user := pod("ns1", "user", "node1")
	user.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"},
	}}}
	client := fake.NewClientset(p, claim, node, user)
	factory := informers.NewSharedInformerFactory(client, 0)
	core := factory.Core().V1()

	plugin, err := simattacher.New(simattacher.Options{Drivers: []string{testDriver}})
	if err != nil {
		t.Fatal(err)
	}
	status := &statusWriter{written: map[types.NodeName][]corev1.UniqueVolumeName{}}
	recorder := record.NewFakeRecorder(100)
	world, err := attachdetach.NewWorld(attachdetach.Plugins{plugin}, attachdetach.Informers{
		Pods: core.Pods().Informer(), Claims: core.PersistentVolumeClaims().Informer(),
		Volumes: core.PersistentVolumes().Informer(), Nodes: core.Nodes().Informer(),
	}, func(n string) bool { return n == "node1" }, attachdetach.PopulatorOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := attachdetach.NewController(world, status, recorder, attachdetach.ReconcilerOptions{LoopPeriod: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Register(prometheus.NewRegistry()); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := c.Run(ctx); err != nil {
			t.Errorf("Run = %v", err)
		}
	}()
	factory.Start(ctx.Done())
	defer factory.Shutdown()

	name := attachdetach.CSIVolumeName(testDriver, "handle-pv1")
	poll(t, "volume attached and reported", func() bool {
		return plugin.IsAttached(name, "node1") && status.lists("node1", name)
	})
	if got := world.ActualState().VolumesReportedAttached("node1"); !slices.Equal(got, []corev1.AttachedVolume{{Name: name}}) {
		t.Errorf("reported attached = %v", got)
	}
	// What a provider asks before it starts a pod.
	if got, err := world.PodVolumes(user); err != nil || !slices.Equal(got, []corev1.UniqueVolumeName{name}) || !world.IsVolumeAttachedToNode(name, "node1") {
		t.Errorf("PodVolumes = %v, %v; attached %v; want [%s], nil, true", got, err, world.IsVolumeAttachedToNode(name, "node1"), name)
	}
	unbound := user.DeepCopy()
	unbound.Spec.Volumes = append(unbound.Spec.Volumes, corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "missing"},
	}}, corev1.Volume{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	if got, err := world.PodVolumes(unbound); err == nil || !strings.Contains(err.Error(), `volume "scratch"`) || !slices.Equal(got, []corev1.UniqueVolumeName{name}) {
		t.Errorf("PodVolumes with a missing claim = %v, %v; want [%s] and an error naming volume scratch", got, err, name)
	}

	if err := client.CoreV1().Pods("ns1").Delete(ctx, "user", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Still mounted: no detach until the node says it unmounted.
	poll(t, "detach requested", func() bool {
		for _, av := range world.ActualState().GetAttachedVolumes() {
			if !av.DetachRequestedTime.IsZero() {
				return true
			}
		}
		return false
	})
	if !plugin.IsAttached(name, "node1") {
		t.Fatal("detached while the node still mounted it")
	}
	n := node.DeepCopy()
	n.Status.VolumesInUse = nil
	n.Status.NodeInfo.KernelVersion = "changed" // an update with volumesInUse empty
	if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "volume detached and no longer reported", func() bool {
		return !plugin.IsAttached(name, "node1") && !status.lists("node1", name)
	})
	cancel()
	wg.Wait()
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
