package process

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/lifecycle"
	"github.com/nodelet/nodelet/pkg/provider"
)

// A pod with an image volume fails at admission, its reason and message
// naming the volume's field: the process provider pulls no image to mount.
func TestAdmitImageVolumes(t *testing.T) {
	image := corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: "busybox:1.37"}}
	emptyDir := corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
	for _, tc := range []struct {
		name    string
		volumes []corev1.Volume
		field   string // "" when admitted
	}{
		{name: "no volumes"},
		{name: "no image volume", volumes: []corev1.Volume{{Name: "a", VolumeSource: emptyDir}}},
		{name: "the second volume", volumes: []corev1.Volume{{Name: "a", VolumeSource: emptyDir}, {Name: "b", VolumeSource: image}},
			field: "spec.volumes[1].image"},
		{name: "unused, it is refused too", volumes: []corev1.Volume{{Name: "b", VolumeSource: image}}, field: "spec.volumes[0].image"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: corev1.PodSpec{Volumes: tc.volumes, Containers: []corev1.Container{{Name: "c"}}}}
			err := admitImageVolumes(pod)
			var rej *provider.Rejection
			switch {
			case tc.field == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.field == "":
			case !errors.As(err, &rej) || rej.Reason != "ImageVolumeNotSupported" ||
				rej.Message != tc.field+": image volumes are not supported by the process provider, which pulls no images":
				t.Fatalf("err = %v, want a rejection naming %s", err, tc.field)
			}
		})
	}
}

// A container that mounts an image volume (of a pod restored from an
// earlier agent's state, never admitted by this one) waits with a
// configuration error naming the field, and nothing is started.
func TestStartContainerRefusesImageVolume(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		Volumes:    []corev1.Volume{{Name: "tools", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: "busybox"}}}},
		Containers: []corev1.Container{{Name: "c", Command: []string{"true"}}},
	}}
	err := hostSandbox{}.StartContainer(context.Background(), lifecycle.ContainerSpec{
		Pod: pod, Container: &pod.Spec.Containers[0], Command: []string{"true"},
		Mounts: []lifecycle.Mount{{Destination: "/vol", ReadOnly: true, Image: pod.Spec.Volumes[0].Image}},
	})
	var we *lifecycle.WaitError
	if !errors.As(err, &we) || we.Reason != "CreateContainerConfigError" ||
		we.Message != "spec.volumes[0].image: image volumes are not supported by the process provider, which pulls no images" {
		t.Fatalf("err = %v, want a CreateContainerConfigError naming spec.volumes[0].image", err)
	}
}

// A mount that must be read-only recursively (recursiveReadOnly Enabled)
// cannot be made so by the process provider: the container waits with a
// configuration error naming the mount, and nothing is started; the
// provider once made such a mount read-only at its top only.
func TestStartContainerRefusesRecursiveReadOnly(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Command: []string{"true"}}}}}
	err := hostSandbox{}.StartContainer(context.Background(), lifecycle.ContainerSpec{
		Pod: pod, Container: &pod.Spec.Containers[0], Command: []string{"true"},
		Mounts: []lifecycle.Mount{{Source: t.TempDir(), Destination: "/vol", ReadOnly: true, RecursiveReadOnly: corev1.RecursiveReadOnlyEnabled}},
	})
	var we *lifecycle.WaitError
	if !errors.As(err, &we) || we.Reason != "CreateContainerConfigError" || !strings.Contains(we.Message, "/vol") ||
		!strings.Contains(we.Message, `runtime handler "process" does not support recursive read-only mounts`) {
		t.Fatalf("err = %v, want a CreateContainerConfigError naming /vol", err)
	}
}
