package cri

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/pkg/lifecycle"
)

// Image volumes (spec.volumes[].image), as the kubelet mounts them: the
// image of each image volume a container mounts is pulled before the
// container is created, by the volume's pull policy and with the pod's
// image pull secrets, exactly as a container's image (ensure: the same
// Events, back-off and waiting reasons); each volumeMount of it is then a
// CRI Mount of the image by its resolved ID, read-only, with the subPath
// as the image sub-path, which the runtime resolves inside the image (one
// it does not find fails CreateContainer: CreateContainerError).

// volumeImage tells an image volume's image apart: its reference as the
// pod names it, and its pull policy.
type volumeImage struct {
	reference string
	policy    corev1.PullPolicy
}

// volumeImageOf is the image of an image volume, its pull policy defaulted
// as the API server defaults it.
func volumeImageOf(src *corev1.ImageVolumeSource) volumeImage {
	return volumeImage{reference: src.Reference, policy: pullPolicy(src.Reference, src.PullPolicy)}
}

// ensureVolumes pulls the images of the image volumes among mounts, each
// once, and returns the ID the runtime resolved each to. The first image
// that cannot be had is the container's wait, as ensure words it.
func (m *imageManager) ensureVolumes(ctx context.Context, pod *corev1.Pod, mounts []lifecycle.Mount, sbCfg *runtimeapi.PodSandboxConfig) (map[volumeImage]string, error) {
	var refs map[volumeImage]string
	for _, mnt := range mounts {
		if mnt.Image == nil {
			continue
		}
		vi := volumeImageOf(mnt.Image)
		if _, done := refs[vi]; done {
			continue
		}
		img, err := m.ensure(ctx, pod, vi.reference, vi.policy, sbCfg)
		if err != nil {
			return nil, err
		}
		if refs == nil {
			refs = map[volumeImage]string{}
		}
		refs[vi] = img.ref
	}
	return refs, nil
}

// criMount is one of a container's mounts for its configuration: a host
// path as it is, or an image volume's image by the ID refs resolved it to
// (ensureVolumes), read-only whatever the volumeMount says; rro is whether
// it is read-only recursively (recursiveReadOnly).
func criMount(m lifecycle.Mount, refs map[volumeImage]string, rro bool) containerMount {
	cm := containerMount{HostPath: m.Source, ContainerPath: m.Destination, ReadOnly: m.ReadOnly, Propagation: m.Propagation, RecursiveReadOnly: rro}
	if m.Image != nil {
		cm.HostPath, cm.ReadOnly = "", true
		cm.Image = &runtimeapi.ImageSpec{Image: refs[volumeImageOf(m.Image)], UserSpecifiedImage: m.Image.Reference}
		cm.ImageSubPath = m.ImageSubPath
	}
	return cm
}
