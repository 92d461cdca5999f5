package attachdetach_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/pkg/attachdetach"
	"github.com/nodelet/nodelet/pkg/attachdetach/simattacher"
)

func TestAttachNeededVolume(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.addNode("node1", true)
	v := h.volumeOf(pv("pv1"))
	h.addPod(pod("ns1", "a", "node1"), v)

	h.reconcile()

	h.expectAttached(v.Name, "node1")
	av := h.attachedVolume(v.Name, "node1")
	if !av.MountedByNode || !av.ReportedAttached || !av.AttachConfirmed {
		t.Errorf("attached volume = %+v, want mounted (until the node says otherwise), reported and confirmed", av)
	}
	// The status is written in the next pass, after the attach finished.
	h.reconcile()
	if !h.status.lists("node1", v.Name) {
		t.Errorf("node status does not list %q as attached", v.Name)
	}
	want := []string{`Normal SuccessfulAttachVolume AttachVolume.Attach succeeded for volume "pv1"`}
	if got := h.events(); !slices.Equal(got, want) {
		t.Errorf("events = %q, want %q", got, want)
	}
	// Attached volumes are left alone.
	h.reconcile()
	if n := h.sim.Calls(simattacher.OpAttach); n != 1 {
		t.Errorf("attach calls = %d, want 1", n)
	}
}

func TestAttachFailureIsUncertainAndRetriedWithBackoff(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.addNode("node1", true)
	v := h.volumeOf(pv("pv1"))
	h.addPod(pod("ns1", "a", "node1"), v)
	h.setFailure(simattacher.OpAttach, errBoom)

	h.reconcile()
	if s := h.asw.GetAttachState(v.Name, "node1"); s != attachdetach.AttachStateUncertain {
		t.Errorf("attach state after a failed attach = %v, want Uncertain", s)
	}
	want := []string{`Warning FailedAttachVolume AttachVolume.Attach failed for volume "pv1" : boom`}
	if got := h.events(); !slices.Equal(got, want) {
		t.Errorf("events = %q, want %q", got, want)
	}
	if h.status.lists("node1", v.Name) {
		t.Error("an uncertain volume is reported as attached")
	}
	h.step(500 * time.Millisecond)
	h.reconcile()
	if n := h.sim.Calls(simattacher.OpAttach); n != 1 {
		t.Fatalf("attach calls within the backoff = %d, want 1", n)
	}
	h.setFailure(simattacher.OpAttach, nil)
	h.step(time.Millisecond)
	h.reconcile()
	h.expectAttached(v.Name, "node1")

	// An uncertain attachment that no pod needs is detached.
	v2 := h.volumeOf(pv("pv2"))
	p2 := pod("ns1", "b", "node1")
	h.addPod(p2, v2)
	h.setFailure(simattacher.OpAttach, errBoom)
	h.reconcile()
	h.dsw.DeletePod(p2.UID)
	h.asw.SetVolumesMountedByNode("node1", nil)
	h.reconcile()
	if n := h.sim.Calls(simattacher.OpDetach); n != 1 {
		t.Errorf("detach calls for an uncertain attachment = %d, want 1", n)
	}
	h.expectDetached(v2.Name, "node1")
}

func TestDetachAfterPodGoesOnlyOnceUnmounted(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.addNode("node1", true)
	v := h.volumeOf(pv("pv1"))
	p := pod("ns1", "a", "node1")
	h.addPod(p, v)
	h.reconcile()
	h.reconcile()
	h.expectAttached(v.Name, "node1")

	h.dsw.DeletePod(p.UID)
	for range 3 {
		h.step(time.Minute)
		h.reconcile()
	}
	h.expectAttached(v.Name, "node1")
	if got := h.attachedVolume(v.Name, "node1").DetachRequestedTime; got.IsZero() {
		t.Error("detach request time not set while the detach waits for the unmount")
	}

	// The node reports it unmounted; the status must drop the volume before
	// the detach call.
	var listedAtDetach bool
	h.onFail = func(op simattacher.Op, _ attachdetach.Volume, node types.NodeName) {
		if op == simattacher.OpDetach {
			listedAtDetach = h.status.lists(string(node), v.Name)
		}
	}
	h.asw.SetVolumesMountedByNode("node1", nil)
	h.reconcile()
	h.expectDetached(v.Name, "node1")
	if listedAtDetach {
		t.Error("node status still listed the volume when it was detached")
	}
	if h.status.lists("node1", v.Name) {
		t.Error("node status lists the detached volume")
	}
	if n := h.forcedDetaches(attachdetach.ForceDetachReasonTimeout) + h.forcedDetaches(attachdetach.ForceDetachReasonOutOfService); n != 0 {
		t.Errorf("forced detaches = %v, want 0", n)
	}
}

func TestPodBackBeforeDetachResetsDetachRequest(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.addNode("node1", false)
	v := h.volumeOf(pv("pv1"))
	p := pod("ns1", "a", "node1")
	h.addPod(p, v)
	h.reconcile()
	h.dsw.DeletePod(p.UID)
	h.reconcile() // detach requested, waits for the unmount
	h.step(5 * time.Minute)
	h.addPod(pod("ns1", "b", "node1"), v)
	h.reconcile()
	if got := h.attachedVolume(v.Name, "node1").DetachRequestedTime; !got.IsZero() {
		t.Errorf("detach request time = %v after the volume was wanted again, want zero", got)
	}
}

func TestMultiAttachWaitsWithEventsAndAttachesAfterFirstPodLeaves(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.addNode("node1", true)
	h.addNode("node2", true)
	v := h.volumeOf(pv("pv1", corev1.ReadWriteOnce))

	first, other := pod("ns1", "first", "node1"), pod("ns2", "other", "node1")
	h.addPod(first, v)
	h.addPod(other, v)
	h.reconcile()
	h.expectAttached(v.Name, "node1")
	h.events()

	waiting, stranger := pod("ns1", "second", "node2"), pod("ns3", "third", "node2")
	h.addPod(waiting, v)
	h.addPod(stranger, v)
	h.reconcile()
	want := []string{
		`Warning FailedAttachVolume Multi-Attach error for volume "pv1" Volume is already used by pod(s) first and 1 pod(s) in different namespaces`,
		`Warning FailedAttachVolume Multi-Attach error for volume "pv1" Volume is already used by 2 pod(s) in different namespaces`,
	}
	if got := h.events(); !slices.Equal(got, want) {
		t.Errorf("events = %q\nwant %q", got, want)
	}
	if got := h.sim.Nodes(v.Name); !slices.Equal(got, []types.NodeName{"node1"}) {
		t.Errorf("volume attached to %v, want only node1", got)
	}
	// Reported once, not every pass.
	h.reconcile()
	if got := h.events(); len(got) != 0 {
		t.Errorf("events on the next pass = %q, want none", got)
	}

	// The first node's pods go and it unmounts: detach there, then attach
	// on the second node.
	h.dsw.DeletePod(first.UID)
	h.dsw.DeletePod(other.UID)
	h.asw.SetVolumesMountedByNode("node1", nil)
	h.reconcile()
	h.expectDetached(v.Name, "node1")
	h.reconcile()
	h.expectAttached(v.Name, "node2")
	if got := h.sim.Nodes(v.Name); !slices.Equal(got, []types.NodeName{"node2"}) {
		t.Errorf("volume attached to %v, want only node2", got)
	}
}

func TestMultiAttachWithoutPodsOnOtherNode(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.addNode("node1", true)
	h.addNode("node2", true)
	v := h.volumeOf(pv("pv1"))
	first := pod("ns1", "first", "node1")
	h.addPod(first, v)
	h.reconcile()
	h.dsw.DeletePod(first.UID) // gone, but node1 still mounts it
	h.events()

	h.addPod(pod("ns1", "second", "node2"), v)
	h.reconcile()
	want := []string{`Warning FailedAttachVolume Multi-Attach error for volume "pv1" Volume is already exclusively attached to one node and can't be attached to another`}
	if got := h.events(); !slices.Equal(got, want) {
		t.Errorf("events = %q\nwant %q", got, want)
	}
}

func TestMultiAttachAllowedForReadWriteMany(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.addNode("node1", true)
	h.addNode("node2", true)
	v := h.volumeOf(pv("pv1", corev1.ReadWriteMany))
	h.addPod(pod("ns1", "a", "node1"), v)
	h.addPod(pod("ns1", "b", "node2"), v)
	h.reconcile()
	h.expectAttached(v.Name, "node1")
	h.expectAttached(v.Name, "node2")
	for _, e := range h.events() {
		if e != `Normal SuccessfulAttachVolume AttachVolume.Attach succeeded for volume "pv1"` {
			t.Errorf("unexpected event %q", e)
		}
	}
}

func TestUnhealthyNodeForcedDetachAfterMaxWaitForUnmount(t *testing.T) {
	h := newHarness(t, harnessOptions{reconciler: attachdetach.ReconcilerOptions{MaxWaitForUnmount: 6 * time.Minute}})
	h.addNode("node1", true)
	h.addNode("node2", true)
	v := h.volumeOf(pv("pv1"))
	healthyV := h.volumeOf(pv("pv2"))
	p, q := pod("ns1", "a", "node1"), pod("ns1", "b", "node2")
	h.addPod(p, v)
	h.addPod(q, healthyV)
	h.reconcile()
	h.nodes.update("node1", func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionUnknown })

	h.dsw.DeletePod(p.UID)
	h.dsw.DeletePod(q.UID)
	h.reconcile() // the detach request time is now
	h.step(6 * time.Minute)
	h.reconcile()
	h.expectAttached(v.Name, "node1")
	if n := h.forcedDetaches(attachdetach.ForceDetachReasonTimeout); n != 0 {
		t.Errorf("forced detaches at maxWaitForUnmount = %v, want 0", n)
	}

	h.step(time.Millisecond)
	h.reconcile()
	h.expectDetached(v.Name, "node1")
	if n := h.forcedDetaches(attachdetach.ForceDetachReasonTimeout); n != 1 {
		t.Errorf("forced detaches (timeout) = %v, want 1", n)
	}
	// A healthy node's mounted volume still waits, however long.
	h.expectAttached(healthyV.Name, "node2")
	h.step(time.Hour)
	h.reconcile()
	h.expectAttached(healthyV.Name, "node2")
}

func TestOutOfServiceTaintDetachesWithoutWaiting(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.addNode("node1", false, corev1.Taint{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
	v := h.volumeOf(pv("pv1"))
	p := pod("ns1", "a", "node1")
	h.addPod(p, v)
	h.reconcile()
	// The node's last status says the volume is in use: the check is skipped.
	h.nodes.update("node1", func(n *corev1.Node) { n.Status.VolumesInUse = []corev1.UniqueVolumeName{v.Name} })

	h.dsw.DeletePod(p.UID)
	h.reconcile()
	h.expectDetached(v.Name, "node1")
	if n := h.forcedDetaches(attachdetach.ForceDetachReasonOutOfService); n != 1 {
		t.Errorf("forced detaches (out-of-service) = %v, want 1", n)
	}
}

func TestDetachChecksNodeStatusVolumesInUse(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.addNode("node1", true)
	v := h.volumeOf(pv("pv1"))
	p := pod("ns1", "a", "node1")
	h.addPod(p, v)
	h.reconcile()
	// The actual state says unmounted but the node's status still lists the
	// volume in use: the safe detach fails and the volume stays reported.
	h.nodes.update("node1", func(n *corev1.Node) { n.Status.VolumesInUse = []corev1.UniqueVolumeName{v.Name} })
	h.asw.SetVolumesMountedByNode("node1", nil)
	h.dsw.DeletePod(p.UID)
	h.reconcile()
	if n := h.sim.Calls(simattacher.OpDetach); n != 0 {
		t.Errorf("detach calls = %d, want 0", n)
	}
	h.expectAttached(v.Name, "node1")
	if !h.attachedVolume(v.Name, "node1").ReportedAttached {
		t.Error("volume no longer reported as attached after a failed detach")
	}
}

func TestDetachFailureStaysReportedAndBacksOff(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.addNode("node1", true)
	v := h.volumeOf(pv("pv1"))
	p := pod("ns1", "a", "node1")
	h.addPod(p, v)
	h.reconcile()
	h.reconcile()
	h.dsw.DeletePod(p.UID)
	h.asw.SetVolumesMountedByNode("node1", nil)
	h.setFailure(simattacher.OpDetach, errBoom)

	h.reconcile()
	if n := h.sim.Calls(simattacher.OpDetach); n != 1 {
		t.Fatalf("detach calls = %d, want 1", n)
	}
	h.expectAttached(v.Name, "node1")
	if !h.attachedVolume(v.Name, "node1").ReportedAttached {
		t.Error("volume not reported as attached after the failed detach")
	}
	h.reconcile() // writes the status with the volume put back
	if !h.status.lists("node1", v.Name) {
		t.Error("node status does not list the volume after the failed detach")
	}

	// Each failure doubles the wait, from 500ms up to 2m2s: a retry comes
	// only strictly after the wait.
	calls := 1
	for _, wait := range []time.Duration{
		500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second,
		16 * time.Second, 32 * time.Second, 64 * time.Second, 122 * time.Second, 122 * time.Second,
	} {
		h.step(wait)
		h.reconcile()
		if n := h.sim.Calls(simattacher.OpDetach); n != calls {
			t.Fatalf("detach calls %v into a %v backoff = %d, want %d", wait, wait, n, calls)
		}
		h.step(time.Millisecond)
		h.reconcile()
		calls++
		if n := h.sim.Calls(simattacher.OpDetach); n != calls {
			t.Fatalf("detach calls just after a %v backoff = %d, want %d", wait, n, calls)
		}
	}

	h.setFailure(simattacher.OpDetach, nil)
	h.step(122*time.Second + time.Millisecond)
	h.reconcile()
	h.expectDetached(v.Name, "node1")
	h.reconcile()
	if h.status.lists("node1", v.Name) {
		t.Error("node status lists the detached volume")
	}
}

func TestNodeStatusFailureKeepsVolume(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.addNode("node1", true)
	v := h.volumeOf(pv("pv1"))
	p := pod("ns1", "a", "node1")
	h.addPod(p, v)
	h.reconcile()
	h.reconcile()
	h.dsw.DeletePod(p.UID)
	h.asw.SetVolumesMountedByNode("node1", nil)

	h.status.setFail(errBoom)
	h.reconcile()
	if n := h.sim.Calls(simattacher.OpDetach); n != 0 {
		t.Errorf("detach calls after a failed status update = %d, want 0", n)
	}
	h.expectAttached(v.Name, "node1")
	if !h.attachedVolume(v.Name, "node1").ReportedAttached {
		t.Error("volume not reported as attached again after the failed status update")
	}

	h.status.setFail(nil)
	h.reconcile()
	h.expectDetached(v.Name, "node1")
}

// raceExecutor lets a detach finish (the volume leaves the actual state of
// world) between the reconciler's listing and its pending check.
type raceExecutor struct {
	*attachdetach.Executor
	asw      *attachdetach.ActualStateOfWorld
	mu       sync.Mutex
	race     bool
	detaches int
}

func (e *raceExecutor) IsOperationSafeToRetry(v corev1.UniqueVolumeName, node types.NodeName, op string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.race && op == attachdetach.OperationDetach {
		for _, av := range e.asw.GetAttachedVolumes() {
			if av.VolumeName == v {
				e.asw.MarkVolumeAsDetached(v, av.NodeName)
			}
		}
	}
	return e.Executor.IsOperationSafeToRetry(v, node, op)
}

func (e *raceExecutor) DetachVolume(ctx context.Context, av attachdetach.AttachedVolume, verifySafe bool) error {
	e.mu.Lock()
	e.detaches++
	e.mu.Unlock()
	return e.Executor.DetachVolume(ctx, av, verifySafe)
}

func TestVolumeDetachedBetweenListingAndPendingCheckIsNotDetached(t *testing.T) {
	for _, race := range []bool{false, true} {
		var ex *raceExecutor
		h := newHarness(t, harnessOptions{wrap: func(e *attachdetach.Executor) attachdetach.OperationExecutor {
			ex = &raceExecutor{Executor: e}
			return ex
		}})
		ex.asw = h.asw
		h.addNode("node1", true)
		v := h.volumeOf(pv("pv1"))
		p := pod("ns1", "a", "node1")
		h.addPod(p, v)
		h.reconcile()
		h.dsw.DeletePod(p.UID)
		h.asw.SetVolumesMountedByNode("node1", nil)
		ex.race = race

		h.reconcile()
		want := 1
		if race {
			want = 0
		}
		if ex.detaches != want {
			t.Errorf("race %v: detaches started = %d, want %d", race, ex.detaches, want)
		}
		if n := h.sim.Calls(simattacher.OpDetach); n != want {
			t.Errorf("race %v: detach calls = %d, want %d", race, n, want)
		}
		// The second look at the actual state stops it, before anything
		// else tries to act on the attachment.
		if logs := h.logs(); race && (!strings.Contains(logs, "Volume already detached") || strings.Contains(logs, "ERROR")) {
			t.Errorf("race: the detach was not stopped by the second look at the actual state; log:\n%s", logs)
		}
	}
}

func TestVerifyAttachedVolumesEverySyncPeriod(t *testing.T) {
	h := newHarness(t, harnessOptions{reconciler: attachdetach.ReconcilerOptions{SyncPeriod: time.Minute}})
	h.addNode("node1", true)
	v := h.volumeOf(pv("pv1"))
	h.addPod(pod("ns1", "a", "node1"), v)
	h.reconcile()
	h.sim.SetAttached(v.Name, "node1", false) // detached behind our back

	h.step(time.Minute)
	h.reconcile()
	if n := h.sim.Calls(simattacher.OpVerify); n != 0 {
		t.Fatalf("verify calls before the sync period passed = %d, want 0", n)
	}
	h.step(time.Millisecond)
	h.reconcile()
	if n := h.sim.Calls(simattacher.OpVerify); n != 1 {
		t.Fatalf("verify calls after the sync period = %d, want 1", n)
	}
	if s := h.asw.GetAttachState(v.Name, "node1"); s != attachdetach.AttachStateDetached {
		t.Errorf("attach state after verification = %v, want Detached", s)
	}
	h.reconcile() // still needed: attached again
	h.expectAttached(v.Name, "node1")
}

func TestSyncDisabledBelowOneSecond(t *testing.T) {
	for _, o := range []attachdetach.ReconcilerOptions{{SyncPeriod: 999 * time.Millisecond}, {DisableSync: true}} {
		h := newHarness(t, harnessOptions{reconciler: o})
		h.addNode("node1", true)
		h.addPod(pod("ns1", "a", "node1"), h.volumeOf(pv("pv1")))
		for range 5 {
			h.step(time.Hour)
			h.reconcile()
		}
		if n := h.sim.Calls(simattacher.OpVerify); n != 0 {
			t.Errorf("%+v: verify calls = %d, want 0", o, n)
		}
	}
}

func TestRunReconcilesEveryLoopPeriod(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.addNode("node1", true)
	v := h.volumeOf(pv("pv1"))
	ctx, cancel := context.WithCancel(h.ctx)
	done := make(chan error)
	go func() { done <- h.rc.Run(ctx) }()

	h.addPod(pod("ns1", "a", "node1"), v)
	deadline := time.Now().Add(10 * time.Second)
	for h.asw.GetAttachState(v.Name, "node1") != attachdetach.AttachStateAttached {
		if time.Now().After(deadline) {
			t.Fatal("volume not attached by the running reconciler")
		}
		if h.clock.HasWaiters() {
			h.step(attachdetach.DefaultLoopPeriod)
		}
		time.Sleep(time.Millisecond) // yield; the deadline is the bound
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
}

func TestReconcilerOptionsValidate(t *testing.T) {
	_, err := attachdetach.NewReconciler(nil, nil, nil, nil, nil, nil, attachdetach.ReconcilerOptions{LoopPeriod: -1, MaxWaitForUnmount: -1, SyncPeriod: -1})
	if err == nil {
		t.Fatal("negative durations accepted")
	}
	for _, field := range []string{"loopPeriod", "maxWaitForUnmount", "syncPeriod"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("error %q does not name %s", err, field)
		}
	}
}
