package lifecycle

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

func sidecarSpec(name string) corev1.Container {
	return corev1.Container{Name: name, Image: "i", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}
}

// A regular container whose own restartPolicy is Always is no sidecar: a
// deleted pod stops it with the other app containers, before its
// sidecars. The stop once took it for a sidecar and so never stopped it
// (it is none of the pod's init containers): it died with the sandbox.
func TestAppContainerWithRestartPolicyStopsBeforeTheSidecars(t *testing.T) {
	f := newLifecycleFixture(t, nil)
	app := corev1.Container{Name: "app", Image: "i", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}
	pod := testPod("rp", corev1.PodSpec{InitContainers: []corev1.Container{sidecarSpec("side")}, Containers: []corev1.Container{app}})
	if err := f.m.CreatePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the sidecar and the app run", func() (bool, string) {
		s := f.status("rp")
		return s.Phase == corev1.PodRunning && slices.Equal(f.rt.recorded(), []string{"start side", "start app"}), fmt.Sprint(s.Phase, f.rt.recorded())
	})
	if err := f.m.DeletePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the pod gone", func() (bool, string) {
		pods, err := f.m.GetPods(context.Background())
		return err == nil && len(pods) == 0, fmt.Sprintf("%d pods, %v", len(pods), err)
	})
	if got, want := f.rt.recorded(), []string{"start side", "start app", "stop app", "stop side"}; !slices.Equal(got, want) {
		t.Errorf("runtime calls %v, want %v: the app stopped first, then the sidecar", got, want)
	}
}

// A stopping pod's containers all run their preStop hooks at once, as the
// kubelet's do, and only then stop in turn: the app containers, then the
// sidecars, the last started first (the node e2e suite's "should call
// sidecar container PreStop hook simultaneously"). Each group's hooks once
// waited for the group before it to stop.
func TestPreStopHooksRunAtOnceAndStopsInTurn(t *testing.T) {
	rt := &fakeRuntime{sandboxes: map[types.UID]*fakeSandbox{}, hooksTogether: 3}
	f := startLifecycleFixture(t, rt, t.TempDir())
	hook := &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"hook"}}}}
	var sidecars []corev1.Container
	for _, name := range []string{"side1", "side2", "side3"} {
		c := sidecarSpec(name)
		c.Lifecycle = hook
		sidecars = append(sidecars, c)
	}
	pod := testPod("hooks", corev1.PodSpec{InitContainers: sidecars, Containers: []corev1.Container{{Name: "app", Image: "i"}}})
	if err := f.m.CreatePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	eventually(t, "running", func() (bool, string) {
		return len(f.rt.recorded()) == 4, fmt.Sprint(f.rt.recorded())
	})
	if err := f.m.DeletePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the pod gone", func() (bool, string) {
		pods, err := f.m.GetPods(context.Background())
		return err == nil && len(pods) == 0, fmt.Sprintf("%d pods, %v", len(pods), err)
	})
	got := f.rt.recorded()[4:]
	var stops []string
	firstStop := -1
	for i, e := range got {
		if strings.HasPrefix(e, "stop side") {
			stops = append(stops, e)
			if firstStop < 0 {
				firstStop = i
			}
		}
	}
	for _, h := range []string{"hook side1", "hook side2", "hook side3"} {
		if i := slices.Index(got, h); i < 0 || i > firstStop {
			t.Errorf("%s ran at %d, after the first sidecar stopped (%d): %v", h, i, firstStop, got)
		}
	}
	if want := []string{"stop side3", "stop side2", "stop side1"}; !slices.Equal(stops, want) {
		t.Errorf("sidecars stopped %v, want %v", stops, want)
	}
	if i := slices.Index(got, "stop app"); i < 0 || i > firstStop {
		t.Errorf("the app stopped at %d, after a sidecar: %v", i, got)
	}
}

// A container whose turn to stop comes after the pod's grace period ran out
// (a sidecar after one whose preStop hook took it all) still gets the
// kubelet's minimum of 2 seconds to exit, not a SIGKILL (the node e2e
// suite's "should terminate sidecars ... exceeded its termination grace
// period seconds by prestop hook").
func TestLateTurnsGetTheMinimumGracePeriod(t *testing.T) {
	f := newLifecycleFixture(t, nil)
	side1, side2 := sidecarSpec("side1"), sidecarSpec("side2")
	side2.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 30}}}
	pod := testPod("late", corev1.PodSpec{TerminationGracePeriodSeconds: ptr.To[int64](1),
		InitContainers: []corev1.Container{side1, side2}, Containers: []corev1.Container{{Name: "app", Image: "i"}}})
	if err := f.m.CreatePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	eventually(t, "running", func() (bool, string) {
		return len(f.rt.recorded()) == 3, fmt.Sprint(f.rt.recorded())
	})
	if err := f.m.DeletePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the pod gone", func() (bool, string) {
		pods, err := f.m.GetPods(context.Background())
		return err == nil && len(pods) == 0, fmt.Sprintf("%d pods, %v", len(pods), err)
	})
	f.rt.mu.Lock()
	defer f.rt.mu.Unlock()
	for _, name := range []string{"side1", "side2"} {
		if g := f.rt.graces[name]; g < minimumGracePeriod {
			t.Errorf("%s stopped with %s of grace, want at least %s", name, g, minimumGracePeriod)
		}
	}
}

// A preStop hook that never exits keeps running past the grace period
// until its container is stopped, as the kubelet runs it (ExecSync without
// a timeout): the container's SIGKILL ends it, 2 seconds after the grace
// period, not the grace period itself (the node e2e suite's "should
// terminate sidecars simultaneously if prestop doesn't exit").
func TestPreStopHookRunsUntilTheContainerStops(t *testing.T) {
	f := newLifecycleFixture(t, nil)
	app := corev1.Container{Name: "app", Image: "i", Lifecycle: &corev1.Lifecycle{
		PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"forever"}}}}}
	pod := testPod("forever", corev1.PodSpec{TerminationGracePeriodSeconds: ptr.To[int64](1), Containers: []corev1.Container{app}})
	if err := f.m.CreatePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	eventually(t, "running", func() (bool, string) {
		return len(f.rt.recorded()) == 1, fmt.Sprint(f.rt.recorded())
	})
	if err := f.m.DeletePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the pod gone", func() (bool, string) {
		pods, err := f.m.GetPods(context.Background())
		return err == nil && len(pods) == 0, fmt.Sprintf("%d pods, %v", len(pods), err)
	})
	got := f.rt.recorded()
	stop, ended := slices.Index(got, "stop app"), slices.Index(got, "forever ended app")
	if stop < 0 || ended < stop {
		t.Errorf("the hook ended at %d, before its container stopped (%d): %v", ended, stop, got)
	}
}
