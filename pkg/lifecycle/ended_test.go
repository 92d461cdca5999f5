package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/lifecycle/probe"
)

// volumeGone tells whether a volume directory of the pod is gone, and what
// was found otherwise.
func volumeGone(path string) (bool, string) {
	_, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return true, ""
	}
	return false, fmt.Sprintf("%s: %v", path, err)
}

// synced waits until the pod's worker has gone through a whole sync since
// it is called: the worker takes a kick only between syncs, so the second
// kick taken shows that the sync the first began has ended.
func synced(t *testing.T, w *podWorker) {
	t.Helper()
	for range 2 {
		w.kick()
		eventually(t, "the worker took the kick", func() (bool, string) {
			return len(w.kickCh) == 0, "not yet"
		})
	}
}

// A pod that ended (restartPolicy Never, its container exited) has its
// volumes torn down while the pod is still there, as the kubelet's volume
// manager does (the node e2e suite's "Kubelet Volume Manager … should
// remove the volume from the node"); they once stayed until the pod was
// deleted. A change of the pod (which resets the volumes, for the downward
// API) and a restarted agent set them up no more, and the pod's deletion
// still goes through.
func TestEndedPodsVolumesAreTornDownForGood(t *testing.T) {
	rt := &fakeRuntime{sandboxes: map[types.UID]*fakeSandbox{}}
	root := t.TempDir()
	f := startLifecycleFixture(t, rt, root)
	pod := testPod("p", corev1.PodSpec{
		RestartPolicy: corev1.RestartPolicyNever,
		Containers: []corev1.Container{{Name: "app", Image: "img",
			VolumeMounts: []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}}},
		Volumes: []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
	})
	volume := filepath.Join(root, "pods", string(pod.UID), "volumes", "kubernetes.io~empty-dir", "scratch")
	if err := f.m.CreatePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the pod runs", func() (bool, string) {
		s := f.status("p")
		return s.Phase == corev1.PodRunning, string(s.Phase)
	})
	if _, err := os.Stat(volume); err != nil {
		t.Fatalf("the volume of the running pod: %v", err)
	}
	if !rt.exit(pod.UID, "app", 0) {
		t.Fatal("app not running")
	}
	eventually(t, "the pod succeeded, its volume gone", func() (bool, string) {
		s := f.status("p")
		gone, msg := volumeGone(volume)
		return s.Phase == corev1.PodSucceeded && gone, fmt.Sprint(s.Phase, " ", msg)
	})
	if pods, err := f.m.GetPods(context.Background()); err != nil || len(pods) != 1 {
		t.Fatalf("the pod that ended is no longer known: %d pods, %v", len(pods), err)
	}

	w, err := f.m.worker("ns", "p")
	if err != nil {
		t.Fatal(err)
	}
	changed := pod.DeepCopy()
	changed.Labels = map[string]string{"changed": "yes"}
	if err := f.m.UpdatePod(context.Background(), changed); err != nil {
		t.Fatal(err)
	}
	synced(t, w)
	if gone, msg := volumeGone(volume); !gone {
		t.Errorf("a change of the pod that ended set its volume up again: %s", msg)
	}

	// The agent restarts, and the runtime lost the pod's sandbox meanwhile:
	// what the agent saved alone tells that the pod ended.
	f.stop()
	rt.mu.Lock()
	delete(rt.sandboxes, pod.UID)
	rt.mu.Unlock()
	ensured := rt.ensured.Load()
	f = startLifecycleFixture(t, rt, root)
	if w, err = f.m.worker("ns", "p"); err != nil {
		t.Fatal(err)
	}
	synced(t, w)
	if gone, msg := volumeGone(volume); !gone {
		t.Errorf("a restarted agent set the volume of the pod that ended up again: %s", msg)
	}
	if got, want := rt.recorded(), []string{"start app"}; !slices.Equal(got, want) || rt.ensured.Load() != ensured {
		t.Errorf("runtime calls %v and %d sandboxes set up, want %v and %d: nothing of the pod that ended runs again",
			got, rt.ensured.Load(), want, ensured)
	}
	if got, err := f.m.GetPod(context.Background(), "ns", "p"); err != nil || got.Status.Phase != corev1.PodSucceeded {
		t.Errorf("the restarted agent reports the pod that ended as %v (%v), want Succeeded", got.Status.Phase, err)
	}

	if err := f.m.DeletePod(context.Background(), changed); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the pod gone", func() (bool, string) {
		pods, err := f.m.GetPods(context.Background())
		return err == nil && len(pods) == 0, fmt.Sprintf("%d pods, %v", len(pods), err)
	})
}

// The sandbox of a pod that ended is stopped, as the kubelet stops a
// terminal pod's (its network and IPs given back before the pod is
// deleted), its containers' records kept: the pod goes on reporting its
// IP and its containers' exits, also after the agent restarted and found
// the stopped sandbox without IPs, and nothing of it is set up again.
func TestEndedPodsSandboxIsStoppedKeepingItsIPs(t *testing.T) {
	rt := &fakeRuntime{ips: []string{"10.0.0.5"}, sandboxes: map[types.UID]*fakeSandbox{}}
	root := t.TempDir()
	f := startLifecycleFixture(t, rt, root)
	pod := testPod("p", corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "app", Image: "img"}}})
	if err := f.m.CreatePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the pod runs", func() (bool, string) {
		s := f.status("p")
		return s.Phase == corev1.PodRunning, string(s.Phase)
	})
	if !rt.exit(pod.UID, "app", 0) {
		t.Fatal("app not running")
	}
	ended := func(f *lifecycleFixture) func() (bool, string) {
		return func() (bool, string) {
			got, err := f.m.GetPod(context.Background(), "ns", "p")
			if err != nil {
				return false, err.Error()
			}
			s := got.Status
			var sandboxReady corev1.ConditionStatus
			for _, c := range s.Conditions {
				if c.Type == corev1.PodReadyToStartContainers {
					sandboxReady = c.Status
				}
			}
			exited := len(s.ContainerStatuses) == 1 && s.ContainerStatuses[0].State.Terminated != nil
			return s.Phase == corev1.PodSucceeded && rt.sandboxesStopped.Load() > 0 && s.PodIP == "10.0.0.5" &&
					sandboxReady == corev1.ConditionFalse && exited,
				fmt.Sprintf("%s, %d stops, IP %q, sandbox ready %q, containers %v", s.Phase, rt.sandboxesStopped.Load(), s.PodIP, sandboxReady, s.ContainerStatuses)
		}
	}
	eventually(t, "the pod succeeded, its sandbox stopped, its IP and exit kept", ended(f))
	ensured := rt.ensured.Load()
	f.stop()
	f = startLifecycleFixture(t, rt, root)
	eventually(t, "the restarted agent reports the same", ended(f))
	if rt.ensured.Load() != ensured {
		t.Errorf("%d sandboxes set up, want %d: nothing of the pod that ended is set up again", rt.ensured.Load(), ensured)
	}
}

// Once the only app container of a restartPolicy Never pod is being killed
// for a failed liveness probe (its preStop hook running), the pod is
// ending: a sidecar whose liveness probe fails is not killed for it, and a
// sidecar that exits is not restarted, as the kubelet does neither (the
// node e2e suite's "should not continue running liveness probes for
// restartable init containers and restart them while in preStop"). Both
// once happened until the app container had exited.
func TestSidecarsOfAnEndingPodAreNeitherKilledNorRestarted(t *testing.T) {
	f := newLifecycleFixture(t, nil)
	app := corev1.Container{Name: "app", Image: "i", Lifecycle: &corev1.Lifecycle{
		PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"forever"}}}}}
	pod := testPod("p", corev1.PodSpec{
		RestartPolicy:                 corev1.RestartPolicyNever,
		TerminationGracePeriodSeconds: ptr.To[int64](100),
		InitContainers:                []corev1.Container{sidecarSpec("side")},
		Containers:                    []corev1.Container{app},
	})
	if err := f.m.CreatePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the sidecar and the app run", func() (bool, string) {
		return slices.Equal(f.rt.recorded(), []string{"start side", "start app"}), fmt.Sprint(f.rt.recorded())
	})
	w, err := f.m.worker("ns", "p")
	if err != nil {
		t.Fatal(err)
	}
	spec := w.spec()
	failed := func(c *corev1.Container) {
		w.probeChanged(f.m.ctx, probe.Liveness, c, &corev1.Probe{}, 0, probe.Failure, "")
	}
	failed(&spec.Spec.Containers[0]) // the app's kill begins: its hook runs on
	failed(&spec.Spec.InitContainers[0])
	w.mu.Lock()
	killed := w.containerLocked("side").killedAttempt != 0
	w.mu.Unlock()
	if killed {
		t.Error("the sidecar of the ending pod was killed for its failed liveness probe")
	}

	if !f.rt.exit(pod.UID, "side", 1) {
		t.Fatal("the sidecar is not running")
	}
	// Restarted, it would be reported running again, never terminated.
	eventually(t, "the sidecar reported terminated", func() (bool, string) {
		s := f.status("p")
		if len(s.InitContainerStatuses) != 1 {
			return false, fmt.Sprint(s.InitContainerStatuses)
		}
		st := s.InitContainerStatuses[0].State
		return st.Terminated != nil, fmt.Sprintf("%+v %v", st, f.rt.recorded())
	})
	if got, want := f.rt.recorded(), []string{"start side", "start app"}; !slices.Equal(got, want) {
		t.Errorf("runtime calls %v, want %v: the sidecar of the ending pod restarted", got, want)
	}

	// The app's hook would run for its grace period: the pod is deleted at
	// once.
	if err := f.m.DeletePod(context.Background(), withGrace(pod, 0)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the pod gone", func() (bool, string) {
		pods, err := f.m.GetPods(context.Background())
		return err == nil && len(pods) == 0, fmt.Sprintf("%d pods, %v", len(pods), err)
	})
}

func withGrace(pod *corev1.Pod, seconds int64) *corev1.Pod {
	c := pod.DeepCopy()
	c.DeletionGracePeriodSeconds = &seconds
	return c
}
