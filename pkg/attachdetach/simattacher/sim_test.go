package simattacher_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/pkg/attachdetach"
	"github.com/nodelet/nodelet/pkg/attachdetach/simattacher"
)

func csiVolume(driver, handle string, modes ...corev1.PersistentVolumeAccessMode) attachdetach.Volume {
	spec := attachdetach.SpecFromPersistentVolume(&corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: handle},
		Spec: corev1.PersistentVolumeSpec{
			AccessModes: modes,
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				CSI: &corev1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: handle},
			},
		},
	}, false)
	return attachdetach.Volume{Name: attachdetach.CSIVolumeName(driver, handle), Spec: spec}
}

func TestOptionsValidate(t *testing.T) {
	for _, o := range []simattacher.Options{{Latency: -1}, {FailureRate: -0.1}, {FailureRate: 1.5}} {
		if _, err := simattacher.New(o); err == nil {
			t.Errorf("New(%+v) accepted", o)
		}
	}
}

func TestSupportAndNames(t *testing.T) {
	p, err := simattacher.New(simattacher.Options{
		Drivers:        []string{"a", "b"},
		AttachRequired: func(driver string) (bool, error) { return driver == "a", nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	va, vb, vc := csiVolume("a", "h"), csiVolume("b", "h"), csiVolume("c", "h")
	if !p.CanSupport(va.Spec) || !p.CanSupport(vb.Spec) || p.CanSupport(vc.Spec) {
		t.Error("CanSupport does not follow Drivers")
	}
	if p.CanSupport(attachdetach.SpecFromVolume(&corev1.Volume{Name: "x"})) {
		t.Error("inline volume supported")
	}
	if name, err := p.VolumeName(va.Spec); err != nil || name != "kubernetes.io/csi/a^h" {
		t.Errorf("VolumeName = %q, %v", name, err)
	}
	plugins := attachdetach.Plugins{p}
	if got, err := plugins.FindAttachable(va.Spec); err != nil || got == nil {
		t.Errorf("FindAttachable(a) = %v, %v; want the plugin", got, err)
	}
	if got, err := plugins.FindAttachable(vb.Spec); err != nil || got != nil {
		t.Errorf("FindAttachable(b, attachRequired false) = %v, %v; want none", got, err)
	}
}

func TestAttachDetachVerify(t *testing.T) {
	ctx := context.Background()
	p, err := simattacher.New(simattacher.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rwo, rwx := csiVolume("d", "rwo", corev1.ReadWriteOnce), csiVolume("d", "rwx", corev1.ReadWriteMany)
	for _, n := range []types.NodeName{"n1", "n1"} { // twice: idempotent
		if err := p.Attach(ctx, rwo, n); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Attach(ctx, rwo, "n2"); !errors.Is(err, simattacher.ErrMultiAttach) {
		t.Errorf("second node attach of a ReadWriteOnce volume = %v, want ErrMultiAttach", err)
	}
	for _, n := range []types.NodeName{"n1", "n2"} {
		if err := p.Attach(ctx, rwx, n); err != nil {
			t.Fatal(err)
		}
	}
	got, err := p.VolumesAreAttached(ctx, []attachdetach.Volume{rwo, rwx}, "n2")
	if err != nil || got[rwo.Name] || !got[rwx.Name] {
		t.Errorf("VolumesAreAttached(n2) = %v, %v", got, err)
	}
	if err := p.Detach(ctx, rwo, "n1"); err != nil {
		t.Fatal(err)
	}
	if err := p.Detach(ctx, rwo, "n1"); err != nil {
		t.Errorf("second detach = %v", err)
	}
	if p.IsAttached(rwo.Name, "n1") || len(p.Nodes(rwx.Name)) != 2 {
		t.Errorf("attached: rwo on n1 %v, rwx on %v", p.IsAttached(rwo.Name, "n1"), p.Nodes(rwx.Name))
	}
	if p.Calls(simattacher.OpAttach) != 5 || p.Calls(simattacher.OpDetach) != 2 || p.Calls(simattacher.OpVerify) != 1 {
		t.Errorf("calls = %d, %d, %d", p.Calls(simattacher.OpAttach), p.Calls(simattacher.OpDetach), p.Calls(simattacher.OpVerify))
	}
}

func TestLatencyFollowsTheClock(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(0, 0))
	p, err := simattacher.New(simattacher.Options{Latency: 5 * time.Second, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	v := csiVolume("d", "h")
	done := make(chan error, 1)
	go func() { done <- p.Attach(context.Background(), v, "n1") }()
	waitFor(t, clk.HasWaiters)
	clk.Step(5*time.Second - time.Nanosecond)
	if p.IsAttached(v.Name, "n1") {
		t.Fatal("attached before the latency passed")
	}
	clk.Step(time.Nanosecond)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !p.IsAttached(v.Name, "n1") {
		t.Error("not attached after the latency")
	}

	// A cancelled context ends the wait.
	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- p.Detach(ctx, v, "n1") }()
	waitFor(t, clk.HasWaiters)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("detach with a cancelled context = %v", err)
	}
	if !p.IsAttached(v.Name, "n1") {
		t.Error("detached although cancelled")
	}
}

func TestFailureRate(t *testing.T) {
	p, err := simattacher.New(simattacher.Options{FailureRate: 0.3, Seed: 42})
	if err != nil {
		t.Fatal(err)
	}
	const n = 2000
	failed := 0
	for i := range n {
		v := csiVolume("d", string(rune('a'+i%26)), corev1.ReadWriteMany)
		if err := p.Attach(context.Background(), v, types.NodeName("n")); err != nil {
			if !errors.Is(err, simattacher.ErrInjected) {
				t.Fatal(err)
			}
			failed++
		}
	}
	if rate := float64(failed) / n; math.Abs(rate-0.3) > 0.05 {
		t.Errorf("failure rate = %v, want about 0.3", rate)
	}
}

// waitFor polls cond until it holds or a deadline passes.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met before the deadline")
		}
		time.Sleep(time.Millisecond)
	}
}
