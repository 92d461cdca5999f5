package cri

import (
	"fmt"
	"path"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/pkg/deviceplugin"
	"github.com/nodelet/nodelet/pkg/podrules"
)

// containerParams are the inputs of a container's configuration that the
// pod lifecycle and the runtime work out before CreateContainer.
type containerParams struct {
	// Attempt is the container's restart count.
	Attempt uint32
	// Command and Args are the container's, with $(VAR) references
	// expanded from its environment. An empty Command runs the image's
	// entrypoint (the runtime applies it), with Args, or else the image's
	// own arguments.
	Command []string
	Args    []string
	// Env is the container's environment, in order (envKeyValues converts
	// the NAME=value form).
	Env []*runtimeapi.KeyValue
	// Mounts are the container's volume mounts, resolved on the host.
	Mounts []containerMount
	// HostsFile is the host path of the pod's managed /etc/hosts, mounted
	// unless a volume already is; "" for none (needsHostsFile).
	HostsFile string
	// TerminationMessageFile is the host file (created, mode 0666) mounted
	// at the container's terminationMessagePath; "" for none.
	TerminationMessageFile string
	// ImageRef is the image's ID as the runtime resolved it (ImageStatus
	// or PullImage).
	ImageRef string
	// ImageUID or ImageUsername is the user the image runs as, from
	// ImageStatus; neither means root.
	ImageUID      *int64
	ImageUsername string
	// ExtraGroups are supplemental groups the pod's volumes need.
	ExtraGroups []int64
	// UserNamespace is the pod's user namespace, as given to its sandbox.
	UserNamespace *runtimeapi.UserNamespace
	// TargetID is, for an ephemeral container that targets another
	// container, that container's ID, whose PID namespace it joins.
	TargetID string
}

// containerMount is a volume mount of a container, resolved on the host:
// the volume's (and subPath's) host path, or the image of an image volume,
// and where and how it appears.
type containerMount struct {
	HostPath          string
	ContainerPath     string
	ReadOnly          bool
	RecursiveReadOnly bool
	// Propagation is the volume mount's mountPropagation; "" is None.
	Propagation corev1.MountPropagationMode
	// Image is, for an image volume, its image by the ID the runtime
	// resolved (HostPath is empty and the mount read-only), and
	// ImageSubPath the directory of it to mount ("" for all of it).
	Image        *runtimeapi.ImageSpec
	ImageSubPath string
}

// containerConfig is the configuration of one of the pod's containers
// (init, regular or ephemeral), as the kubelet builds it: the container's
// name and attempt, image, command, environment, working directory,
// mounts (its volumes, then the pod's /etc/hosts and its termination
// message file), log path, labels and annotations, terminal settings, and
// its Linux resources and security context. It refuses a container that
// must not run as root and would (verifyRunAsNonRoot). Every error is a
// CreateContainerConfigError for the container's status.
func containerConfig(pod *corev1.Pod, c *corev1.Container, node nodeSettings, p containerParams) (*runtimeapi.ContainerConfig, error) {
	if err := verifyRunAsNonRoot(pod, c, p.ImageUID, p.ImageUsername); err != nil {
		return nil, err
	}
	mounts, err := runtimeMounts(pod, c, p)
	if err != nil {
		return nil, err
	}
	annotations, err := containerAnnotations(pod, c, p.Attempt, terminationMessageFile(c, p))
	if err != nil {
		return nil, err
	}
	resources, err := containerResources(pod, c, node)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", podrules.ContainerFieldPath(pod, c.Name).Child("resources"), err)
	}
	sc, err := containerSecurityContext(pod, c, containerSecurity{
		ImageUID:       p.ImageUID,
		ImageUsername:  p.ImageUsername,
		ExtraGroups:    p.ExtraGroups,
		UserNamespace:  p.UserNamespace,
		TargetID:       p.TargetID,
		SeccompDefault: node.SeccompDefault,
		SeccompRoot:    node.SeccompProfileRoot,
	})
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ContainerConfig{
		Metadata:    &runtimeapi.ContainerMetadata{Name: c.Name, Attempt: p.Attempt},
		Image:       &runtimeapi.ImageSpec{Image: p.ImageRef, UserSpecifiedImage: c.Image},
		Command:     p.Command,
		Args:        p.Args,
		WorkingDir:  c.WorkingDir,
		Envs:        p.Env,
		Mounts:      mounts,
		Labels:      containerLabels(pod, c, node.NodeName),
		Annotations: annotations,
		LogPath:     containerLogPath(c.Name, p.Attempt),
		Stdin:       c.Stdin,
		StdinOnce:   c.StdinOnce,
		Tty:         c.TTY,
		Linux:       &runtimeapi.LinuxContainerConfig{Resources: resources, SecurityContext: sc},
	}, nil
}

// withDevices adds to a container's configuration what its devices need,
// as the kubelet does: their environment, mounts and device nodes after
// the container's own, their annotations and CDI devices.
func withDevices(cfg *runtimeapi.ContainerConfig, d *deviceplugin.ContainerDevices) {
	cfg.Envs = append(cfg.Envs, d.Envs...)
	cfg.Mounts = append(cfg.Mounts, d.Mounts...)
	cfg.Devices = append(cfg.Devices, d.Devices...)
	cfg.CDIDevices = append(cfg.CDIDevices, d.CDIDevices...)
	for k, v := range d.Annotations {
		if cfg.Annotations == nil {
			cfg.Annotations = map[string]string{}
		}
		cfg.Annotations[k] = v
	}
}

// containerLogPath is a container's log file relative to its pod's log
// directory: <container>/<attempt>.log.
func containerLogPath(name string, attempt uint32) string {
	return filepath.Join(name, fmt.Sprintf("%d.log", attempt))
}

// terminationMessageFile is the host file mounted at the container's
// terminationMessagePath, if one is.
func terminationMessageFile(c *corev1.Container, p containerParams) string {
	if c.TerminationMessagePath == "" {
		return ""
	}
	return p.TerminationMessageFile
}

// runtimeMounts are the container's mounts: its volumes (image volumes
// always read-only, by their image, which the runtime mounts), then the
// pod's /etc/hosts unless a volume is mounted there, then its termination
// message file. In a pod with its own user namespace every mount is
// ID-mapped into it (the runtime maps an image volume's snapshot).
func runtimeMounts(pod *corev1.Pod, c *corev1.Container, p containerParams) ([]*runtimeapi.Mount, error) {
	mounts := make([]*runtimeapi.Mount, 0, len(p.Mounts)+2)
	hostsMounted := false
	for i, m := range p.Mounts {
		prop, err := mountPropagation(m.Propagation)
		if err != nil {
			return nil, fmt.Errorf("mount %d (%s): %w", i, m.ContainerPath, err)
		}
		hostsMounted = hostsMounted || path.Clean(m.ContainerPath) == etcHostsPath
		mounts = append(mounts, &runtimeapi.Mount{
			HostPath:          m.HostPath,
			ContainerPath:     m.ContainerPath,
			Readonly:          m.ReadOnly || m.Image != nil,
			RecursiveReadOnly: m.RecursiveReadOnly,
			Propagation:       prop,
			Image:             m.Image,
			ImageSubPath:      m.ImageSubPath,
		})
	}
	if p.HostsFile != "" && !hostsMounted {
		mounts = append(mounts, &runtimeapi.Mount{HostPath: p.HostsFile, ContainerPath: etcHostsPath})
	}
	if f := terminationMessageFile(c, p); f != "" {
		mounts = append(mounts, &runtimeapi.Mount{HostPath: f, ContainerPath: c.TerminationMessagePath})
	}
	if u := p.UserNamespace; u != nil {
		for _, m := range mounts {
			m.UidMappings, m.GidMappings = u.Uids, u.Gids
		}
	}
	return mounts, nil
}

// mountPropagation converts a volume mount's mountPropagation.
func mountPropagation(m corev1.MountPropagationMode) (runtimeapi.MountPropagation, error) {
	switch m {
	case "", corev1.MountPropagationNone:
		return runtimeapi.MountPropagation_PROPAGATION_PRIVATE, nil
	case corev1.MountPropagationHostToContainer:
		return runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER, nil
	case corev1.MountPropagationBidirectional:
		return runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL, nil
	}
	return 0, fmt.Errorf("unsupported mount propagation %q", m)
}

// envKeyValues converts an environment in NAME=value form to the runtime's.
func envKeyValues(env []string) []*runtimeapi.KeyValue {
	kvs := make([]*runtimeapi.KeyValue, 0, len(env))
	for _, e := range env {
		k, v, _ := strings.Cut(e, "=")
		kvs = append(kvs, &runtimeapi.KeyValue{Key: k, Value: []byte(v)})
	}
	return kvs
}
