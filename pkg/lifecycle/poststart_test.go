package lifecycle

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// quietFor is how long a test watches for something that must not happen
// (a container starting while a postStart hook runs). Not a
// synchronisation: a worker that wrongly starts it does so within
// milliseconds of the hook's start, and one that waits is unaffected.
const quietFor = 300 * time.Millisecond

// never fails the test if cond becomes true within quietFor.
func never(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	for deadline := time.Now().Add(quietFor); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if ok, msg := cond(); ok {
			t.Fatalf("%s: %s", what, msg)
		}
	}
}

// gateHook is a postStart hook that runs until the test opens its
// container's gate (fakeRuntime.open).
func gateHook() *corev1.Lifecycle {
	return &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"gate"}}}}
}

// reportedStatus is the status of the container name among the pod's
// init and app containers, and whether there is one.
func reportedStatus(s corev1.PodStatus, name string) (corev1.ContainerStatus, bool) {
	for _, cs := range append(slices.Clone(s.InitContainerStatuses), s.ContainerStatuses...) {
		if cs.Name == name {
			return cs, true
		}
	}
	return corev1.ContainerStatus{}, false
}

// A container's postStart hook runs before anything after it in the
// pod's start order starts, as the kubelet runs it within the container's
// start; meanwhile the container is neither started nor ready. The node
// suite's "should terminate sidecars simultaneously if prestop doesn't
// exit" found the app container started while the last sidecar's hook
// still ran.
func TestPostStartHookHoldsBackTheNextContainer(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	for _, tc := range []struct {
		name        string
		spec        corev1.PodSpec
		gated, next string
	}{{
		name: "sidecar before the app container",
		spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "side", Image: "i", RestartPolicy: &always, Lifecycle: gateHook()}},
			Containers:     []corev1.Container{{Name: "app", Image: "i"}},
		},
		gated: "side", next: "app",
	}, {
		name: "app container before the next",
		spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "first", Image: "i", Lifecycle: gateHook()},
			{Name: "second", Image: "i"},
		}},
		gated: "first", next: "second",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newLifecycleFixture(t, nil)
			pod := testPod("p", tc.spec)
			if err := f.m.CreatePod(context.Background(), pod); err != nil {
				t.Fatal(err)
			}
			eventually(t, "the hook runs", func() (bool, string) {
				ev := f.rt.recorded()
				return slices.Contains(ev, "gate "+tc.gated), fmt.Sprint(ev)
			})
			never(t, "started while the hook of "+tc.gated+" ran", func() (bool, string) {
				ev := f.rt.recorded()
				if slices.Contains(ev, "start "+tc.next) {
					return true, fmt.Sprintf("%s started: %v", tc.next, ev)
				}
				cs, _ := reportedStatus(f.status("p"), tc.gated)
				if (cs.Started != nil && *cs.Started) || cs.Ready {
					return true, fmt.Sprintf("%s reported started or ready: %+v", tc.gated, cs)
				}
				return false, ""
			})
			f.rt.open(tc.gated)
			eventually(t, tc.next+" started after the hook, "+tc.gated+" started", func() (bool, string) {
				ev := f.rt.recorded()
				passed, started := slices.Index(ev, "gate passed "+tc.gated), slices.Index(ev, "start "+tc.next)
				cs, _ := reportedStatus(f.status("p"), tc.gated)
				return passed >= 0 && started > passed && cs.Started != nil && *cs.Started, fmt.Sprint(ev, cs)
			})
		})
	}
}

// A postStart hook that fails kills its container, preStop hook first,
// before the next container starts, and a FailedPostStartHook Event says
// so; under restartPolicy Never the container stays dead.
func TestFailedPostStartHookKillsTheContainer(t *testing.T) {
	f := newLifecycleFixture(t, nil)
	pod := testPod("p", corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{
		{Name: "first", Image: "i", Lifecycle: &corev1.Lifecycle{
			PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"fail"}}},
			PreStop:   &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"hook"}}},
		}},
		{Name: "second", Image: "i"},
	}})
	if err := f.m.CreatePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	want := []string{"start first", "hook first", "stop first", "start second"}
	eventually(t, "first killed, then second started", func() (bool, string) {
		ev := f.rt.recorded()
		return len(ev) >= len(want), fmt.Sprint(ev)
	})
	if got := f.rt.recorded(); !slices.Equal(got, want) {
		t.Errorf("runtime saw %v, want %v", got, want)
	}
	eventually(t, "first reported dead", func() (bool, string) {
		cs, _ := reportedStatus(f.status("p"), "first")
		return cs.State.Terminated != nil && cs.RestartCount == 0, fmt.Sprintf("%+v", cs)
	})
	var seen []string
	for len(f.recorder.Events) > 0 {
		seen = append(seen, <-f.recorder.Events)
	}
	if !slices.ContainsFunc(seen, func(e string) bool { return strings.HasPrefix(e, "Warning FailedPostStartHook") }) {
		t.Errorf("events %q, want a FailedPostStartHook warning", seen)
	}
}

// A pod deleted or evicted while a postStart hook hangs ends the hook at
// once and stops: the hook, which has no time limit of its own, holds up
// neither the stop nor anything else, and what followed the container
// never starts.
func TestPodEndingEndsAHangingPostStartHook(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(f *lifecycleFixture, pod *corev1.Pod) error
		// ended tells whether the pod has ended as it should.
		ended func(f *lifecycleFixture) (bool, string)
	}{{
		name: "deleted",
		end: func(f *lifecycleFixture, pod *corev1.Pod) error {
			deleting := pod.DeepCopy()
			now, grace := metav1.Now(), int64(30)
			deleting.DeletionTimestamp, deleting.DeletionGracePeriodSeconds = &now, &grace
			return f.m.DeletePod(context.Background(), deleting)
		},
		ended: func(f *lifecycleFixture) (bool, string) {
			pods, err := f.m.GetPods(context.Background())
			return err == nil && len(pods) == 0, fmt.Sprintf("%d pods, %v", len(pods), err)
		},
	}, {
		name: "evicted",
		end: func(f *lifecycleFixture, pod *corev1.Pod) error {
			return f.m.Evict(pod, Eviction{Grace: 30 * time.Second, Reason: "Evicted", Message: "low on memory"})
		},
		ended: func(f *lifecycleFixture) (bool, string) {
			s := f.status("p")
			return s.Phase == corev1.PodFailed && s.Reason == "Evicted", fmt.Sprint(s.Phase, s.Reason)
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newLifecycleFixture(t, nil)
			grace := int64(30)
			pod := testPod("p", corev1.PodSpec{TerminationGracePeriodSeconds: &grace, Containers: []corev1.Container{
				{Name: "first", Image: "i", Lifecycle: gateHook()},
				{Name: "second", Image: "i"},
			}})
			if err := f.m.CreatePod(context.Background(), pod); err != nil {
				t.Fatal(err)
			}
			eventually(t, "the hook runs", func() (bool, string) {
				ev := f.rt.recorded()
				return slices.Contains(ev, "gate first"), fmt.Sprint(ev)
			})
			if err := tc.end(f, pod); err != nil {
				t.Fatal(err)
			}
			eventually(t, "the pod "+tc.name, func() (bool, string) { return tc.ended(f) })
			want := []string{"start first", "gate first", "gate ended first", "stop first"}
			if got := f.rt.recorded(); !slices.Equal(got, want) {
				t.Errorf("runtime saw %v, want %v", got, want)
			}
		})
	}
}

// A postStart hook has no time limit of its own, as the kubelet's: one
// bounded by the pod's grace period failed at once in a pod whose grace
// period is 0, and killed its container.
func TestPostStartHookOfAPodWithoutGracePeriod(t *testing.T) {
	f := newLifecycleFixture(t, nil)
	pod := testPod("p", corev1.PodSpec{TerminationGracePeriodSeconds: ptr.To[int64](0),
		Containers: []corev1.Container{{Name: "app", Image: "i", Lifecycle: gateHook()}}})
	if err := f.m.CreatePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the hook runs", func() (bool, string) {
		ev := f.rt.recorded()
		return slices.Contains(ev, "gate app"), fmt.Sprint(ev)
	})
	f.rt.open("app")
	eventually(t, "app started and running", func() (bool, string) {
		cs, _ := reportedStatus(f.status("p"), "app")
		return cs.Started != nil && *cs.Started && cs.State.Running != nil, fmt.Sprintf("%+v", cs)
	})
	if ev := f.rt.recorded(); slices.Contains(ev, "stop app") {
		t.Errorf("the container was killed: %v", ev)
	}
}
