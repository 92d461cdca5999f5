package attachdetach

import (
	"errors"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"
)

func testSpec(name string, modes ...corev1.PersistentVolumeAccessMode) *Spec {
	return SpecFromPersistentVolume(&corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			AccessModes: modes,
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				CSI: &corev1.CSIPersistentVolumeSource{Driver: "d", VolumeHandle: name},
			},
		},
	}, false)
}

func testVolume(name string, modes ...corev1.PersistentVolumeAccessMode) Volume {
	return Volume{Name: CSIVolumeName("d", name), Spec: testSpec(name, modes...)}
}

func testPod(ns, name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "/" + name)}}
}

func TestMultiAttachAllowed(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec *Spec
		want bool
	}{
		{"nil", nil, false},
		{"no access modes", testSpec("v"), false},
		{"ReadWriteOnce", testSpec("v", corev1.ReadWriteOnce), false},
		{"ReadWriteOncePod", testSpec("v", corev1.ReadWriteOncePod), false},
		{"ReadWriteMany", testSpec("v", corev1.ReadWriteMany), true},
		{"ReadOnlyMany", testSpec("v", corev1.ReadWriteOnce, corev1.ReadOnlyMany), true},
		{"inline", SpecFromVolume(&corev1.Volume{Name: "v"}), true},
		{"inline Cinder", SpecFromVolume(&corev1.Volume{Name: "v", VolumeSource: corev1.VolumeSource{Cinder: &corev1.CinderVolumeSource{}}}), false},
	} {
		if got := tc.spec.MultiAttachAllowed(); got != tc.want {
			t.Errorf("%s: MultiAttachAllowed = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestDesiredStateOfWorld(t *testing.T) {
	d := NewDesiredStateOfWorld()
	v := testVolume("v1")
	a, b, c := testPod("ns1", "a"), testPod("ns1", "b"), testPod("ns2", "c")
	if err := d.AddPod(a, v, "node1"); err == nil {
		t.Error("pod added on an unmanaged node")
	}
	d.AddNode("node1")
	d.AddNode("node2")
	for _, x := range []struct {
		pod  *corev1.Pod
		node types.NodeName
	}{{a, "node1"}, {b, "node1"}, {c, "node2"}} {
		if err := d.AddPod(x.pod, v, x.node); err != nil {
			t.Fatal(err)
		}
	}
	if !d.VolumeExists(v.Name, "node1") || !d.VolumeExists(v.Name, "node2") {
		t.Error("volume missing on a node")
	}
	got := d.GetVolumesToAttach()
	if len(got) != 2 || got[0].NodeName != "node1" || len(got[0].ScheduledPods) != 2 || got[1].NodeName != "node2" {
		t.Errorf("volumes to attach = %+v", got)
	}
	if pods := d.GetVolumePodsOnNodes([]types.NodeName{"node1", "node3"}, v.Name); !slices.Equal(pods, []*corev1.Pod{a, b}) {
		t.Errorf("pods on node1 = %v", pods)
	}
	if err := d.DeleteNode("node1"); err == nil {
		t.Error("node with volumes deleted")
	}

	d.SetMultiAttachError(v.Name, "node2")
	if vs := d.GetVolumesToAttach(); !vs[1].MultiAttachErrorReported || vs[0].MultiAttachErrorReported {
		t.Errorf("multi-attach reports = %v, %v; want only node2's", vs[0].MultiAttachErrorReported, vs[1].MultiAttachErrorReported)
	}
	// The report is forgotten with the pair.
	d.DeletePodVolume(c.UID, v.Name, "node2")
	if d.VolumeExists(v.Name, "node2") {
		t.Error("volume without pods still on node2")
	}
	if err := d.AddPod(c, v, "node2"); err != nil {
		t.Fatal(err)
	}
	if vs := d.GetVolumesToAttach(); vs[1].MultiAttachErrorReported {
		t.Error("multi-attach report survived the pair")
	}

	d.DeletePod(a.UID)
	if !d.VolumeExists(v.Name, "node1") {
		t.Error("volume left node1 while pod b needs it")
	}
	if n := len(d.GetPodVolumes()); n != 2 {
		t.Errorf("pod volumes = %d, want 2", n)
	}
	d.DeletePod(b.UID)
	if d.VolumeExists(v.Name, "node1") {
		t.Error("volume still on node1 after its pods left")
	}
	if err := d.DeleteNode("node1"); err != nil || d.NodeExists("node1") {
		t.Errorf("DeleteNode = %v, exists %v", err, d.NodeExists("node1"))
	}
}

func TestActualStateOfWorld(t *testing.T) {
	clk := testingclock.NewFakePassiveClock(time.Unix(1000, 0))
	a := NewActualStateOfWorld(clk)
	v, w := testVolume("v1"), testVolume("v2")

	if err := a.MarkVolumeAsUncertain(v, "node1"); err != nil {
		t.Fatal(err)
	}
	if s := a.GetAttachState(v.Name, "node1"); s != AttachStateUncertain {
		t.Errorf("state = %v, want Uncertain", s)
	}
	if got := a.GetNodesForAttachedVolume(v.Name); len(got) != 0 {
		t.Errorf("uncertain attachment counts as attached on %v", got)
	}
	if got := a.GetAttachedVolumesPerNode(); len(got) != 0 {
		t.Errorf("uncertain attachment verified: %v", got)
	}
	if got := a.GetVolumesToReportAttached(); len(got) != 0 {
		t.Errorf("uncertain attachment reported: %v", got)
	}

	if err := a.MarkVolumeAsAttached(v, "node1"); err != nil {
		t.Fatal(err)
	}
	_ = a.MarkVolumeAsAttached(w, "node1")
	// Uncertain after attached stays attached.
	_ = a.MarkVolumeAsUncertain(v, "node1")
	if s := a.GetAttachState(v.Name, "node1"); s != AttachStateAttached {
		t.Errorf("state = %v, want Attached", s)
	}
	av := a.GetAttachedVolumesForNode("node1")
	if len(av) != 2 || !av[0].MountedByNode || !av[0].ReportedAttached {
		t.Errorf("attached volumes = %+v, want two, mounted and reported", av)
	}
	got := a.GetVolumesToReportAttached()
	if want := []corev1.AttachedVolume{{Name: v.Name}, {Name: w.Name}}; !slices.Equal(got["node1"], want) {
		t.Errorf("to report = %v, want %v", got, want)
	}
	if got := a.GetVolumesToReportAttached(); len(got) != 0 {
		t.Errorf("report needed again without a change: %v", got)
	}

	a.SetVolumesMountedByNode("node1", []corev1.UniqueVolumeName{w.Name})
	av = a.GetAttachedVolumesForNode("node1")
	if av[0].MountedByNode || !av[1].MountedByNode {
		t.Errorf("mounted = %v, %v; want false, true", av[0].MountedByNode, av[1].MountedByNode)
	}

	if d, err := a.SetDetachRequestTime(v.Name, "node1"); err != nil || d != 0 {
		t.Errorf("first SetDetachRequestTime = %v, %v", d, err)
	}
	clk.SetTime(clk.Now().Add(time.Minute))
	if d, _ := a.SetDetachRequestTime(v.Name, "node1"); d != time.Minute {
		t.Errorf("elapsed = %v, want 1m", d)
	}
	a.ResetDetachRequestTime(v.Name, "node1")
	if d, _ := a.SetDetachRequestTime(v.Name, "node1"); d != 0 {
		t.Errorf("elapsed after reset = %v, want 0", d)
	}
	if _, err := a.SetDetachRequestTime(v.Name, "node2"); err == nil {
		t.Error("detach request time set on a node the volume is not attached to")
	}

	if err := a.RemoveVolumeFromReportAsAttached(v.Name, "node1"); err != nil {
		t.Fatal(err)
	}
	if err := a.RemoveVolumeFromReportAsAttached(v.Name, "node1"); err == nil {
		t.Error("removed twice from the report")
	}
	if ok, vs := a.GetVolumesToReportAttachedForNode("node1"); !ok || len(vs) != 1 {
		t.Errorf("report for node1 = %v, %v; want needed, one volume", ok, vs)
	}
	a.AddVolumeToReportAsAttached(v.Name, "node1")
	if got := a.VolumesReportedAttached("node1"); len(got) != 2 {
		t.Errorf("reported = %v, want both", got)
	}
	a.SetNodeStatusUpdateNeeded("node1")
	if ok, _ := a.GetVolumesToReportAttachedForNode("node1"); !ok {
		t.Error("update not needed after SetNodeStatusUpdateNeeded")
	}

	a.MarkVolumeAsDetached(v.Name, "node1")
	if s := a.GetAttachState(v.Name, "node1"); s != AttachStateDetached {
		t.Errorf("state = %v, want Detached", s)
	}
	// A detached volume cannot be reported again.
	a.AddVolumeToReportAsAttached(v.Name, "node1")
	if got := a.VolumesReportedAttached("node1"); !slices.Equal(got, []corev1.AttachedVolume{{Name: w.Name}}) {
		t.Errorf("reported = %v, want only %s", got, w.Name)
	}
}

func TestPendingOperationsKeysAndBackoff(t *testing.T) {
	clk := testingclock.NewFakePassiveClock(time.Unix(1000, 0))
	p := newPendingOperations(clk)
	release := make(chan error)
	block := func() error { return <-release }

	// An operation keyed by the volume alone excludes it on every node.
	if err := p.run(operationKey{"v", ""}, OperationAttach, block); err != nil {
		t.Fatal(err)
	}
	for _, k := range []operationKey{{"v", ""}, {"v", "node1"}} {
		if !p.isPending(k) || p.isSafeToRetry(k, OperationDetach) {
			t.Errorf("%v not pending", k)
		}
		if err := p.run(k, OperationDetach, block); err != ErrOperationPending {
			t.Errorf("run %v = %v, want ErrOperationPending", k, err)
		}
	}
	if p.isPending(operationKey{"w", ""}) {
		t.Error("another volume is pending")
	}
	release <- errBoomInternal
	p.wait()

	// Backoff: 500ms, doubling, up to 2m2s, for the same operation only.
	want := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second}
	for i, wait := range want {
		clk.SetTime(clk.Now().Add(wait))
		if p.isSafeToRetry(operationKey{"v", ""}, OperationAttach) {
			t.Fatalf("failure %d: safe to retry at %v", i+1, wait)
		}
		if err := p.run(operationKey{"v", ""}, OperationAttach, block); !IsBackoff(err) {
			t.Fatalf("failure %d: run at %v = %v, want a backoff error", i+1, wait, err)
		}
		if !p.isSafeToRetry(operationKey{"v", ""}, OperationDetach) {
			t.Error("another operation is held back by attach's backoff")
		}
		clk.SetTime(clk.Now().Add(time.Nanosecond))
		if err := p.run(operationKey{"v", ""}, OperationAttach, block); err != nil {
			t.Fatal(err)
		}
		release <- errBoomInternal
		p.wait()
	}
	op := p.find(operationKey{"v", ""})
	for range 10 {
		op.wait = min(2*op.wait, backoffMax)
	}
	if op.wait != backoffMax || backoffMax != 122*time.Second {
		t.Errorf("backoff cap = %v", op.wait)
	}

	// Another operation on the key resets the backoff; success forgets it.
	if err := p.run(operationKey{"v", "node1"}, OperationDetach, block); err != nil {
		t.Fatal(err)
	}
	release <- nil
	p.wait()
	if p.find(operationKey{"v", ""}) != nil {
		t.Error("a successful operation is remembered")
	}
}

var errBoomInternal = errors.New("boom")
