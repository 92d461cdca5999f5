package hostvolume

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"

	envvars "github.com/nodelet/nodelet/pkg/lifecycle/env"
)

// Mount is one mount of a container: a host path at a path inside the
// container's mount namespace or, for an image volume, the image the
// runtime mounts there.
type Mount struct {
	Source      string // host path, with symbolic links resolved; "" for an image volume
	Destination string // the volumeMount's mountPath
	ReadOnly    bool
	Propagation corev1.MountPropagationMode // the volumeMount's, if set
	// RecursiveReadOnly is the volumeMount's recursiveReadOnly ("" when
	// unset), which the runtime resolves against what it supports.
	RecursiveReadOnly corev1.RecursiveReadOnlyMode
	// Image is an image volume's source, and ImageSubPath the subPath in
	// it (checked, not resolved: the image is not on the host yet).
	Image        *corev1.ImageVolumeSource
	ImageSubPath string
}

// ContainerMounts resolves a container's volumeMounts against the host
// paths SetUp returned. subPath, or subPathExpr expanded with env, selects a
// path inside the volume; it may not leave the volume through ".." or
// symbolic links, and missing directories on the way are created as the
// kubelet does. configMap, secret, downwardAPI and projected volumes are
// always read-only. An image volume, which SetUp leaves to the runtime, is
// a read-only Mount of its Image with the subPath as ImageSubPath. Errors
// name the mount.
//
// The Sources are resolved when ContainerMounts runs: a process that can
// write into the volume and swaps a directory for a symbolic link before the
// bind mount is made is not guarded against.
func ContainerMounts(pod *corev1.Pod, c *corev1.Container, paths map[string]string, env map[string]string) ([]Mount, error) {
	volumes := make(map[string]*corev1.Volume, len(pod.Spec.Volumes))
	for i := range pod.Spec.Volumes {
		volumes[pod.Spec.Volumes[i].Name] = &pod.Spec.Volumes[i]
	}
	mounts := make([]Mount, 0, len(c.VolumeMounts))
	for _, vm := range c.VolumeMounts {
		m, err := containerMount(volumes, paths, env, &vm)
		if err != nil {
			return nil, fmt.Errorf("container %q: volumeMount %q at %s: %w", c.Name, vm.Name, vm.MountPath, err)
		}
		mounts = append(mounts, m)
	}
	return mounts, nil
}

func containerMount(volumes map[string]*corev1.Volume, paths, env map[string]string, vm *corev1.VolumeMount) (Mount, error) {
	vol, ok := volumes[vm.Name]
	if !ok {
		return Mount{}, fmt.Errorf("the pod has no volume %q", vm.Name)
	}
	if !path.IsAbs(vm.MountPath) {
		return Mount{}, fmt.Errorf("mountPath %q is not absolute", vm.MountPath)
	}
	sub := vm.SubPath
	if vm.SubPathExpr != "" {
		var err error
		if sub, err = envvars.Expand(vm.SubPathExpr, envvars.MapLookup(env)); err != nil {
			return Mount{}, fmt.Errorf("subPathExpr: %w", err)
		}
	}
	if sub != "" {
		if err := checkSubPath(sub); err != nil {
			return Mount{}, err
		}
	}
	var propagation corev1.MountPropagationMode
	if vm.MountPropagation != nil {
		propagation = *vm.MountPropagation
	}
	var rro corev1.RecursiveReadOnlyMode
	if vm.RecursiveReadOnly != nil {
		rro = *vm.RecursiveReadOnly
	}
	if vol.Image != nil {
		image := *vol.Image
		return Mount{Destination: vm.MountPath, ReadOnly: true, Propagation: propagation, RecursiveReadOnly: rro, Image: &image, ImageSubPath: sub}, nil
	}
	base, ok := paths[vm.Name]
	if !ok {
		return Mount{}, fmt.Errorf("volume %q is not set up", vm.Name)
	}
	src := base
	if sub != "" {
		var err error
		if src, err = resolveInside(base, sub); err != nil {
			return Mount{}, err
		}
	}
	_, content := contentPlugin(&vol.VolumeSource)
	return Mount{
		Source:            src,
		Destination:       vm.MountPath,
		Propagation:       propagation,
		ReadOnly:          vm.ReadOnly || content,
		RecursiveReadOnly: rro,
	}, nil
}

func checkSubPath(sub string) error {
	if filepath.IsAbs(sub) {
		return fmt.Errorf("subPath %q is absolute", sub)
	}
	for _, el := range strings.Split(filepath.ToSlash(sub), "/") {
		if el == ".." {
			return fmt.Errorf("subPath %q contains '..'", sub)
		}
	}
	return nil
}

// resolveInside walks sub inside base one element at a time, following
// symbolic links only while they stay inside base and creating missing
// directories with base's mode. It returns the resolved path.
func resolveInside(base, sub string) (string, error) {
	root, err := filepath.EvalSymlinks(base)
	if err != nil {
		return "", fmt.Errorf("resolve volume path: %w", err)
	}
	info, err := os.Stat(root)
	if err != nil {
		return "", fmt.Errorf("volume path: %w", err)
	}
	// New directories take the volume's permissions, with its set-group-ID
	// and sticky bits (fsGroup, tmpfs), as the kubelet makes them.
	perm := info.Mode() & (fs.ModePerm | fs.ModeSetgid | fs.ModeSticky)

	cur := root
	for _, el := range strings.Split(filepath.ToSlash(sub), "/") {
		if el == "" || el == "." {
			continue
		}
		next := filepath.Join(cur, el)
		fi, err := os.Lstat(next)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if err := os.Mkdir(next, perm); err != nil {
				return "", fmt.Errorf("create subPath directory %s: %w", el, err)
			}
			// Mkdir's mode is filtered by the umask.
			if err := os.Chmod(next, perm); err != nil {
				return "", fmt.Errorf("chmod subPath directory %s: %w", el, err)
			}
		case err != nil:
			return "", fmt.Errorf("subPath %q: %w", sub, err)
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := filepath.EvalSymlinks(next)
			if err != nil {
				return "", fmt.Errorf("subPath %q: %w", sub, err)
			}
			if !within(root, target) {
				return "", fmt.Errorf("subPath %q escapes the volume through a symbolic link", sub)
			}
			next = target
		}
		cur = next
	}
	return cur, nil
}

func within(root, p string) bool {
	rel, err := filepath.Rel(root, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../") && !filepath.IsAbs(rel)
}
