package lifecycle

import (
	"context"
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
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
