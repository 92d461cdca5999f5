package cri

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/pkg/podrules"
)

// staticMaskedPaths and readonlyPaths are the /proc and /sys paths a
// container with the Default proc mount cannot read, or cannot write: the
// lists of moby (and so of the kubelet and every CRI runtime).
var (
	staticMaskedPaths = []string{
		"/proc/asound",
		"/proc/acpi",
		"/proc/interrupts",
		"/proc/kcore",
		"/proc/keys",
		"/proc/latency_stats",
		"/proc/timer_list",
		"/proc/timer_stats",
		"/proc/sched_debug",
		"/proc/scsi",
		"/sys/firmware",
		"/sys/devices/virtual/powercap",
	}
	readonlyPaths = []string{
		"/proc/bus",
		"/proc/fs",
		"/proc/irq",
		"/proc/sys",
		"/proc/sysrq-trigger",
	}
)

// defaultMaskedPaths are staticMaskedPaths plus the thermal throttling
// files of the host's CPUs that exist (they let a container see and steer
// other workloads' CPU heat), read once from sysfs.
var defaultMaskedPaths = sync.OnceValue(func() []string {
	paths := slices.Clone(staticMaskedPaths)
	for _, cpu := range possibleCPUs() {
		p := fmt.Sprintf("/sys/devices/system/cpu/cpu%d/thermal_throttle", cpu)
		if _, err := os.Stat(p); err == nil {
			paths = append(paths, p)
		}
	}
	return paths
})

// possibleCPUs lists the CPU numbers the host may ever have, from sysfs
// ("0-3,8"), or 0..NumCPU-1 when sysfs cannot say.
func possibleCPUs() []int {
	if data, err := os.ReadFile("/sys/devices/system/cpu/possible"); err == nil {
		if cpus, ok := parseCPUList(strings.TrimSpace(string(data))); ok {
			return cpus
		}
	}
	cpus := make([]int, runtime.NumCPU())
	for i := range cpus {
		cpus[i] = i
	}
	return cpus
}

// parseCPUList parses a kernel CPU list such as "0-3,8".
func parseCPUList(s string) ([]int, bool) {
	var cpus []int
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		first, err := strconv.Atoi(lo)
		if err != nil {
			return nil, false
		}
		last := first
		if isRange {
			if last, err = strconv.Atoi(hi); err != nil || last < first {
				return nil, false
			}
		}
		for cpu := first; cpu <= last; cpu++ {
			cpus = append(cpus, cpu)
		}
	}
	return cpus, true
}

// procMountPaths are the masked and read-only paths of a container's proc
// mount: none for Unmasked, the defaults otherwise. Runtimes ignore them for
// privileged containers.
func procMountPaths(pm *corev1.ProcMountType) (masked, readonly []string) {
	if pm != nil && *pm == corev1.UnmaskedProcMount {
		return []string{}, []string{}
	}
	return slices.Clone(defaultMaskedPaths()), slices.Clone(readonlyPaths)
}

// effectiveSecurityContext is the container's security context with the
// pod's filled in where the container sets nothing: the user, group,
// runAsNonRoot and SELinux options of the pod apply to every container that
// has none of its own. Seccomp and AppArmor profiles are resolved apart
// (seccompProfile, appArmorProfile). The result shares pointers with the
// pod: read it, never write through it.
func effectiveSecurityContext(pod *corev1.Pod, c *corev1.Container) *corev1.SecurityContext {
	sc := &corev1.SecurityContext{}
	if psc := pod.Spec.SecurityContext; psc != nil {
		sc.RunAsUser = psc.RunAsUser
		sc.RunAsGroup = psc.RunAsGroup
		sc.RunAsNonRoot = psc.RunAsNonRoot
		sc.SELinuxOptions = psc.SELinuxOptions
	}
	csc := c.SecurityContext
	if csc == nil {
		return sc
	}
	if csc.RunAsUser != nil {
		sc.RunAsUser = csc.RunAsUser
	}
	if csc.RunAsGroup != nil {
		sc.RunAsGroup = csc.RunAsGroup
	}
	if csc.RunAsNonRoot != nil {
		sc.RunAsNonRoot = csc.RunAsNonRoot
	}
	if csc.SELinuxOptions != nil {
		sc.SELinuxOptions = csc.SELinuxOptions
	}
	sc.Capabilities = csc.Capabilities
	sc.Privileged = csc.Privileged
	sc.ReadOnlyRootFilesystem = csc.ReadOnlyRootFilesystem
	sc.AllowPrivilegeEscalation = csc.AllowPrivilegeEscalation
	sc.ProcMount = csc.ProcMount
	return sc
}

// imageUser is the user an image runs as, from the runtime's ImageStatus:
// its numeric uid or, for a named user, its name. An image that names no
// user runs as root.
func imageUser(uid *int64, username string) (*int64, string) {
	if uid == nil && username == "" {
		return new(int64), ""
	}
	return uid, username
}

// verifyRunAsNonRoot refuses a container that must not run as root
// (runAsNonRoot) when it would, or when that cannot be told: the image's
// user is a name. imageUID and imageUsername describe the image's user as
// the runtime's ImageStatus reports it (neither means root). The messages
// are the kubelet's; callers report the error as CreateContainerConfigError.
func verifyRunAsNonRoot(pod *corev1.Pod, c *corev1.Container, imageUID *int64, imageUsername string) error {
	sc := effectiveSecurityContext(pod, c)
	if sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		return nil
	}
	if sc.RunAsUser != nil {
		if *sc.RunAsUser == 0 {
			return fmt.Errorf("container's runAsUser breaks non-root policy (pod: %q, container: %s)", podDesc(pod), c.Name)
		}
		return nil
	}
	uid, name := imageUser(imageUID, imageUsername)
	switch {
	case uid == nil:
		return fmt.Errorf("container has runAsNonRoot and image has non-numeric user (%s), cannot verify user is non-root (pod: %q, container: %s)", name, podDesc(pod), c.Name)
	case *uid == 0:
		return fmt.Errorf("container has runAsNonRoot and image will run as root (pod: %q, container: %s)", podDesc(pod), c.Name)
	}
	if msgs := validation.IsValidUserID(*uid); len(msgs) > 0 {
		return fmt.Errorf("container has runAsNonRoot and image has an invalid user id (%d). (Must be 1-(%d)): %s (pod: %q, container: %s)",
			*uid, math.MaxInt32, strings.Join(msgs, "; "), podDesc(pod), c.Name)
	}
	return nil
}

// containerSecurity are the inputs of a container's security context
// besides the pod and the container.
type containerSecurity struct {
	ImageUID       *int64 // the image's user, as verifyRunAsNonRoot takes it
	ImageUsername  string
	ExtraGroups    []int64                   // supplemental groups the pod's volumes need
	UserNamespace  *runtimeapi.UserNamespace // the pod's user namespace; nil for the host's
	TargetID       string                    // for an ephemeral container, the container whose PID namespace it joins
	SeccompDefault bool
	SeccompRoot    string
}

// containerSecurityContext is the Linux security context of a container, as
// the kubelet builds it from the container's and the pod's: user and
// groups (the image's user when neither sets one), capabilities as given
// (runtimes accept names with or without CAP_ and "ALL"), privileged,
// read-only root, no_new_privs when privilege escalation is disallowed,
// seccomp and AppArmor profiles, SELinux options, the pod's namespaces and
// the masked and read-only /proc paths of its proc mount.
func containerSecurityContext(pod *corev1.Pod, c *corev1.Container, in containerSecurity) (*runtimeapi.LinuxContainerSecurityContext, error) {
	esc := effectiveSecurityContext(pod, c)
	if esc.ProcMount != nil && *esc.ProcMount == corev1.UnmaskedProcMount && (pod.Spec.HostUsers == nil || *pod.Spec.HostUsers) {
		return nil, field.Invalid(podrules.ContainerFieldPath(pod, c.Name).Child("securityContext", "procMount"), *esc.ProcMount,
			"`hostUsers` must be false to use `Unmasked`")
	}
	sc := &runtimeapi.LinuxContainerSecurityContext{
		Privileged:     esc.Privileged != nil && *esc.Privileged,
		ReadonlyRootfs: esc.ReadOnlyRootFilesystem != nil && *esc.ReadOnlyRootFilesystem,
		NoNewPrivs:     esc.AllowPrivilegeEscalation != nil && !*esc.AllowPrivilegeEscalation,
		SelinuxOptions: selinuxOption(esc.SELinuxOptions),
	}
	if caps := esc.Capabilities; caps != nil {
		sc.Capabilities = &runtimeapi.Capability{AddCapabilities: []string{}, DropCapabilities: []string{}}
		for _, cap := range caps.Add {
			sc.Capabilities.AddCapabilities = append(sc.Capabilities.AddCapabilities, string(cap))
		}
		for _, cap := range caps.Drop {
			sc.Capabilities.DropCapabilities = append(sc.Capabilities.DropCapabilities, string(cap))
		}
	}
	if esc.RunAsUser != nil {
		sc.RunAsUser = &runtimeapi.Int64Value{Value: *esc.RunAsUser}
	} else {
		uid, name := imageUser(in.ImageUID, in.ImageUsername)
		if uid != nil {
			sc.RunAsUser = &runtimeapi.Int64Value{Value: *uid}
		}
		sc.RunAsUsername = name
	}
	if esc.RunAsGroup != nil {
		sc.RunAsGroup = &runtimeapi.Int64Value{Value: *esc.RunAsGroup}
	}
	var err error
	if sc.Seccomp, err = seccompProfile(pod, c, in.SeccompDefault, in.SeccompRoot); err != nil {
		return nil, err
	}
	if sc.Apparmor, sc.ApparmorProfile, err = appArmorProfile(pod, c); err != nil {
		return nil, err
	}
	if sc.NamespaceOptions, err = namespaceOptions(pod, in.UserNamespace); err != nil {
		return nil, err
	}
	if in.TargetID != "" && sc.NamespaceOptions.Pid == runtimeapi.NamespaceMode_CONTAINER {
		sc.NamespaceOptions.Pid = runtimeapi.NamespaceMode_TARGET
		sc.NamespaceOptions.TargetId = in.TargetID
	}
	if psc := pod.Spec.SecurityContext; psc != nil {
		if psc.FSGroup != nil {
			sc.SupplementalGroups = append(sc.SupplementalGroups, *psc.FSGroup)
		}
		sc.SupplementalGroups = append(sc.SupplementalGroups, psc.SupplementalGroups...)
		if sc.SupplementalGroupsPolicy, err = supplementalGroupsPolicy(psc.SupplementalGroupsPolicy); err != nil {
			return nil, err
		}
	}
	sc.SupplementalGroups = append(sc.SupplementalGroups, in.ExtraGroups...)
	sc.MaskedPaths, sc.ReadonlyPaths = procMountPaths(esc.ProcMount)
	return sc, nil
}

// sandboxSecurityContext is the Linux security context of a pod's
// sandbox: the pod's user, groups, SELinux options and namespaces,
// privileged if any of its containers is, and always the runtime's default
// seccomp profile (the sandbox only pauses; containers choose their own).
func sandboxSecurityContext(pod *corev1.Pod, extraGroups []int64, userns *runtimeapi.UserNamespace) (*runtimeapi.LinuxSandboxSecurityContext, error) {
	sc := &runtimeapi.LinuxSandboxSecurityContext{
		Privileged: anyPrivileged(pod),
		Seccomp:    &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault},
	}
	var err error
	if sc.NamespaceOptions, err = namespaceOptions(pod, userns); err != nil {
		return nil, err
	}
	psc := pod.Spec.SecurityContext
	if psc == nil {
		sc.SupplementalGroups = append(sc.SupplementalGroups, extraGroups...)
		return sc, nil
	}
	if psc.RunAsUser != nil {
		sc.RunAsUser = &runtimeapi.Int64Value{Value: *psc.RunAsUser}
	}
	if psc.RunAsGroup != nil {
		sc.RunAsGroup = &runtimeapi.Int64Value{Value: *psc.RunAsGroup}
	}
	if psc.FSGroup != nil {
		sc.SupplementalGroups = append(sc.SupplementalGroups, *psc.FSGroup)
	}
	sc.SupplementalGroups = append(sc.SupplementalGroups, extraGroups...)
	sc.SupplementalGroups = append(sc.SupplementalGroups, psc.SupplementalGroups...)
	if sc.SupplementalGroupsPolicy, err = supplementalGroupsPolicy(psc.SupplementalGroupsPolicy); err != nil {
		return nil, err
	}
	sc.SelinuxOptions = selinuxOption(psc.SELinuxOptions)
	return sc, nil
}

// anyPrivileged says whether any container of the pod is privileged.
func anyPrivileged(pod *corev1.Pod) bool {
	privileged := func(sc *corev1.SecurityContext) bool {
		return sc != nil && sc.Privileged != nil && *sc.Privileged
	}
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			if privileged(c.SecurityContext) {
				return true
			}
		}
	}
	for _, c := range pod.Spec.EphemeralContainers {
		if privileged(c.SecurityContext) {
			return true
		}
	}
	return false
}

// namespaceOptions are the namespaces of the pod's containers: the node's
// network, PID and IPC namespaces when the pod asks for them; otherwise
// the pod's own network and IPC namespaces and a PID namespace per
// container, or one for the pod with shareProcessNamespace. userns is the
// pod's user namespace when it has one (hostUsers false); nil is the
// node's, and an error for a pod that needs its own.
func namespaceOptions(pod *corev1.Pod, userns *runtimeapi.UserNamespace) (*runtimeapi.NamespaceOption, error) {
	ns := &runtimeapi.NamespaceOption{
		Network: runtimeapi.NamespaceMode_POD,
		Pid:     runtimeapi.NamespaceMode_CONTAINER,
		Ipc:     runtimeapi.NamespaceMode_POD,
	}
	if pod.Spec.HostNetwork {
		ns.Network = runtimeapi.NamespaceMode_NODE
	}
	if pod.Spec.HostIPC {
		ns.Ipc = runtimeapi.NamespaceMode_NODE
	}
	switch {
	case pod.Spec.HostPID:
		ns.Pid = runtimeapi.NamespaceMode_NODE
	case pod.Spec.ShareProcessNamespace != nil && *pod.Spec.ShareProcessNamespace:
		ns.Pid = runtimeapi.NamespaceMode_POD
	}
	switch {
	case userns != nil:
		ns.UsernsOptions = userns
	case pod.Spec.HostUsers != nil && !*pod.Spec.HostUsers:
		return nil, field.Forbidden(field.NewPath("spec", "hostUsers"), "this node runs no pod in a user namespace")
	default:
		ns.UsernsOptions = &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_NODE}
	}
	return ns, nil
}

// supplementalGroupsPolicy converts the pod's supplementalGroupsPolicy.
func supplementalGroupsPolicy(p *corev1.SupplementalGroupsPolicy) (runtimeapi.SupplementalGroupsPolicy, error) {
	if p == nil {
		return runtimeapi.SupplementalGroupsPolicy_Merge, nil
	}
	v, ok := runtimeapi.SupplementalGroupsPolicy_value[string(*p)]
	if !ok {
		return 0, field.NotSupported(field.NewPath("spec", "securityContext", "supplementalGroupsPolicy"), *p,
			[]corev1.SupplementalGroupsPolicy{corev1.SupplementalGroupsPolicyMerge, corev1.SupplementalGroupsPolicyStrict})
	}
	return runtimeapi.SupplementalGroupsPolicy(v), nil
}

func selinuxOption(o *corev1.SELinuxOptions) *runtimeapi.SELinuxOption {
	if o == nil {
		return nil
	}
	return &runtimeapi.SELinuxOption{User: o.User, Role: o.Role, Type: o.Type, Level: o.Level}
}

// seccompProfile is the container's seccomp profile: its own, else the
// pod's, else the runtime's default with SeccompDefault and none
// (Unconfined) without. A Localhost profile is a file under root.
func seccompProfile(pod *corev1.Pod, c *corev1.Container, seccompDefault bool, root string) (*runtimeapi.SecurityProfile, error) {
	var profile *corev1.SeccompProfile
	var path *field.Path
	switch {
	case c.SecurityContext != nil && c.SecurityContext.SeccompProfile != nil:
		profile, path = c.SecurityContext.SeccompProfile, podrules.ContainerFieldPath(pod, c.Name).Child("securityContext", "seccompProfile")
	case pod.Spec.SecurityContext != nil && pod.Spec.SecurityContext.SeccompProfile != nil:
		profile, path = pod.Spec.SecurityContext.SeccompProfile, field.NewPath("spec", "securityContext", "seccompProfile")
	case seccompDefault:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}, nil
	default:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}, nil
	}
	switch profile.Type {
	case corev1.SeccompProfileTypeRuntimeDefault:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}, nil
	case corev1.SeccompProfileTypeUnconfined:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}, nil
	case corev1.SeccompProfileTypeLocalhost:
		name := profile.LocalhostProfile
		if name == nil || *name == "" {
			return nil, field.Required(path.Child("localhostProfile"), "must be set when type is Localhost")
		}
		if !filepath.IsLocal(*name) {
			return nil, field.Invalid(path.Child("localhostProfile"), *name, "must be a relative path within the profile directory")
		}
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: filepath.Join(root, *name)}, nil
	}
	return nil, field.NotSupported(path.Child("type"), profile.Type,
		[]corev1.SeccompProfileType{corev1.SeccompProfileTypeRuntimeDefault, corev1.SeccompProfileTypeUnconfined, corev1.SeccompProfileTypeLocalhost})
}

// appArmorProfile is the container's AppArmor profile, in the CRI's field
// and its deprecated string form: the container's own, else the pod's
// deprecated per-container annotation, else the pod's; nil (the runtime's
// choice) when none is set.
func appArmorProfile(pod *corev1.Pod, c *corev1.Container) (*runtimeapi.SecurityProfile, string, error) {
	var profile *corev1.AppArmorProfile
	var path *field.Path
	if c.SecurityContext != nil && c.SecurityContext.AppArmorProfile != nil {
		profile, path = c.SecurityContext.AppArmorProfile, podrules.ContainerFieldPath(pod, c.Name).Child("securityContext", "appArmorProfile")
	} else if key := corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix + c.Name; pod.Annotations[key] != "" {
		v := pod.Annotations[key]
		path = field.NewPath("metadata", "annotations").Key(key)
		switch {
		case v == corev1.DeprecatedAppArmorBetaProfileRuntimeDefault:
			profile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeRuntimeDefault}
		case v == corev1.DeprecatedAppArmorBetaProfileNameUnconfined:
			profile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}
		case strings.HasPrefix(v, corev1.DeprecatedAppArmorBetaProfileNamePrefix):
			name := strings.TrimPrefix(v, corev1.DeprecatedAppArmorBetaProfileNamePrefix)
			profile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeLocalhost, LocalhostProfile: &name}
		}
	}
	if profile == nil && pod.Spec.SecurityContext != nil && pod.Spec.SecurityContext.AppArmorProfile != nil {
		profile, path = pod.Spec.SecurityContext.AppArmorProfile, field.NewPath("spec", "securityContext", "appArmorProfile")
	}
	if profile == nil {
		return nil, "", nil
	}
	switch profile.Type {
	case corev1.AppArmorProfileTypeRuntimeDefault:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}, corev1.DeprecatedAppArmorBetaProfileRuntimeDefault, nil
	case corev1.AppArmorProfileTypeUnconfined:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}, corev1.DeprecatedAppArmorBetaProfileNameUnconfined, nil
	case corev1.AppArmorProfileTypeLocalhost:
		if profile.LocalhostProfile == nil || *profile.LocalhostProfile == "" {
			return nil, "", field.Required(path.Child("localhostProfile"), "must be set when type is Localhost")
		}
		name := *profile.LocalhostProfile
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: name},
			corev1.DeprecatedAppArmorBetaProfileNamePrefix + name, nil
	}
	return nil, "", field.NotSupported(path.Child("type"), profile.Type,
		[]corev1.AppArmorProfileType{corev1.AppArmorProfileTypeRuntimeDefault, corev1.AppArmorProfileTypeUnconfined, corev1.AppArmorProfileTypeLocalhost})
}
