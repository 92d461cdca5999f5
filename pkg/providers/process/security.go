package process

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/nodelet/nodelet/pkg/podrules"
	"github.com/nodelet/nodelet/pkg/providers/process/sandbox"
)

// A process container runs as its pod asks, as a CRI runtime would run it
// (containerd's choices where the kubelet leaves them to the runtime), or
// not at all: what the process sandbox cannot honour is refused, naming
// the field, never ignored. The host's filesystem stands for the image:
// its /etc/passwd and /etc/group give the user's group and groups when
// the pod names only a user.

// capabilityNumbers are the capabilities by name, as the API spells them
// (without CAP_), numbered as the kernel does.
var capabilityNumbers = map[string]int{
	"CHOWN": 0, "DAC_OVERRIDE": 1, "DAC_READ_SEARCH": 2, "FOWNER": 3, "FSETID": 4, "KILL": 5,
	"SETGID": 6, "SETUID": 7, "SETPCAP": 8, "LINUX_IMMUTABLE": 9, "NET_BIND_SERVICE": 10,
	"NET_BROADCAST": 11, "NET_ADMIN": 12, "NET_RAW": 13, "IPC_LOCK": 14, "IPC_OWNER": 15,
	"SYS_MODULE": 16, "SYS_RAWIO": 17, "SYS_CHROOT": 18, "SYS_PTRACE": 19, "SYS_PACCT": 20,
	"SYS_ADMIN": 21, "SYS_BOOT": 22, "SYS_NICE": 23, "SYS_RESOURCE": 24, "SYS_TIME": 25,
	"SYS_TTY_CONFIG": 26, "MKNOD": 27, "LEASE": 28, "AUDIT_WRITE": 29, "AUDIT_CONTROL": 30,
	"SETFCAP": 31, "MAC_OVERRIDE": 32, "MAC_ADMIN": 33, "SYSLOG": 34, "WAKE_ALARM": 35,
	"BLOCK_SUSPEND": 36, "AUDIT_READ": 37, "PERFMON": 38, "BPF": 39, "CHECKPOINT_RESTORE": 40,
}

// allCapabilities is every capability above (the kernel's own, fewer on
// an older kernel, is applied by the shim).
const allCapabilities = uint64(1)<<41 - 1

// defaultCapabilities is the set containerd gives a container that is not
// privileged.
var defaultCapabilities = capabilityMask("CHOWN", "DAC_OVERRIDE", "FSETID", "FOWNER", "MKNOD", "NET_RAW",
	"SETGID", "SETUID", "SETFCAP", "SETPCAP", "NET_BIND_SERVICE", "SYS_CHROOT", "KILL", "AUDIT_WRITE")

func capabilityMask(names ...string) uint64 {
	var m uint64
	for _, n := range names {
		m |= 1 << capabilityNumbers[n]
	}
	return m
}

// hostSecurity is what a container's security depends on besides its pod.
type hostSecurity struct {
	// AppArmor: the host enforces AppArmor (a pod that asks for a profile
	// on a host without it is refused at admission, see podrules.AdmitAppArmor).
	AppArmor bool
	// Users finds a user in the host's account database; nil finds none.
	Users func(uid int64) (hostUser, bool)
}

// hostUser is an account of the host: its primary group and the groups
// that list it as a member.
type hostUser struct {
	GID    int64
	Groups []int64
}

// containerSecurity resolves the security of a process container from its
// own security context and its pod's, as the kubelet merges them (the
// container's fields win), and refuses, naming the field, what a process
// container cannot have. The error is the container's
// CreateContainerConfigError.
func containerSecurity(pod *corev1.Pod, c *corev1.Container, host hostSecurity) (*sandbox.Security, error) {
	path := podrules.ContainerFieldPath(pod, c.Name).Child("securityContext")
	psc := pod.Spec.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	csc := c.SecurityContext
	if csc == nil {
		csc = &corev1.SecurityContext{}
	}
	podPath := field.NewPath("spec", "securityContext")
	var errs field.ErrorList

	// What the process sandbox cannot give.
	if pod.Spec.HostUsers != nil && !*pod.Spec.HostUsers {
		errs = append(errs, field.Forbidden(field.NewPath("spec", "hostUsers"), "the process provider runs no pod in a user namespace"))
	}
	if csc.ReadOnlyRootFilesystem != nil && *csc.ReadOnlyRootFilesystem {
		errs = append(errs, field.Forbidden(path.Child("readOnlyRootFilesystem"), "a process container sees the host's root filesystem, which the process provider cannot make read-only"))
	}
	if csc.ProcMount != nil && *csc.ProcMount == corev1.UnmaskedProcMount {
		errs = append(errs, field.Forbidden(path.Child("procMount"), "a process container sees the pod's /proc, which the process provider does not mask, and cannot have it unmasked either (that needs hostUsers: false)"))
	}
	if setSELinux(csc.SELinuxOptions) {
		errs = append(errs, field.Forbidden(path.Child("seLinuxOptions"), "the process provider applies no SELinux label"))
	} else if setSELinux(psc.SELinuxOptions) {
		errs = append(errs, field.Forbidden(podPath.Child("seLinuxOptions"), "the process provider applies no SELinux label"))
	}
	if p, at := appArmorProfile(pod, c, path, podPath); p != nil && p.Type != corev1.AppArmorProfileTypeUnconfined && host.AppArmor {
		errs = append(errs, field.Forbidden(at, fmt.Sprintf("the process provider loads no AppArmor profile (%s); only Unconfined can run", p.Type)))
	}
	privileged := csc.Privileged != nil && *csc.Privileged
	sec := &sandbox.Security{}
	if !privileged {
		// As containerd, a privileged container has no seccomp filter.
		seccomp, err := seccompProfile(csc, psc, path, podPath)
		if err != nil {
			errs = append(errs, err)
		}
		sec.Seccomp = seccomp
	}

	// User and groups: the container's, else the pod's, else root (there
	// is no image to name a user).
	uid := firstSet(csc.RunAsUser, psc.RunAsUser)
	if nonRoot := firstSet(csc.RunAsNonRoot, psc.RunAsNonRoot); nonRoot != nil && *nonRoot {
		switch {
		case uid == nil:
			errs = append(errs, field.Required(path.Child("runAsUser"),
				"runAsNonRoot is set but no runAsUser (on the container or the pod): a process container has no image whose user could be checked, so it must name a non-root user"))
		case *uid == 0:
			at := path.Child("runAsUser")
			if csc.RunAsUser == nil {
				at = podPath.Child("runAsUser")
			}
			errs = append(errs, field.Invalid(at, *uid, "runAsNonRoot is set: the user must not be root (0)"))
		}
	}
	if len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	if uid != nil {
		sec.UID = uint32(*uid)
	}
	var account hostUser
	found := false
	if host.Users != nil {
		account, found = host.Users(int64(sec.UID))
	}
	switch gid := firstSet(csc.RunAsGroup, psc.RunAsGroup); {
	case gid != nil:
		sec.GID = uint32(*gid)
	case found:
		sec.GID = uint32(account.GID)
	}
	groups := []int64{int64(sec.GID)}
	strict := psc.SupplementalGroupsPolicy != nil && *psc.SupplementalGroupsPolicy == corev1.SupplementalGroupsPolicyStrict
	if psc.SupplementalGroupsPolicy != nil && !strict && *psc.SupplementalGroupsPolicy != corev1.SupplementalGroupsPolicyMerge {
		return nil, field.NotSupported(podPath.Child("supplementalGroupsPolicy"), *psc.SupplementalGroupsPolicy,
			[]corev1.SupplementalGroupsPolicy{corev1.SupplementalGroupsPolicyMerge, corev1.SupplementalGroupsPolicyStrict})
	}
	if found && !strict {
		groups = append(groups, account.Groups...)
	}
	if psc.FSGroup != nil {
		groups = append(groups, *psc.FSGroup)
	}
	groups = append(groups, psc.SupplementalGroups...)
	for _, g := range groups {
		if !slices.Contains(sec.Groups, uint32(g)) {
			sec.Groups = append(sec.Groups, uint32(g))
		}
	}

	// Capabilities: containerd's defaults, or all when privileged; add and
	// drop as containerd applies them (ALL first, then each name).
	sec.Capabilities = defaultCapabilities
	if privileged {
		sec.Capabilities = allCapabilities
	}
	if caps := csc.Capabilities; caps != nil {
		if hasAll(caps.Add) {
			sec.Capabilities = allCapabilities
		}
		if hasAll(caps.Drop) {
			sec.Capabilities = 0
		}
		for i, name := range caps.Add {
			if n, ok, err := capability(name, path.Child("capabilities", "add").Index(i)); err != nil {
				errs = append(errs, err)
			} else if ok {
				sec.Capabilities |= 1 << n
			}
		}
		for i, name := range caps.Drop {
			if n, ok, err := capability(name, path.Child("capabilities", "drop").Index(i)); err != nil {
				errs = append(errs, err)
			} else if ok {
				sec.Capabilities &^= 1 << n
			}
		}
	}
	sec.NoNewPrivs = csc.AllowPrivilegeEscalation != nil && !*csc.AllowPrivilegeEscalation
	if len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	return sec, nil
}

// capability is the number of a capability named with or without CAP_ in
// any case; false for ALL, which the caller applied.
func capability(name corev1.Capability, at *field.Path) (int, bool, *field.Error) {
	s := strings.TrimPrefix(strings.ToUpper(string(name)), "CAP_")
	if s == "ALL" {
		return 0, false, nil
	}
	n, ok := capabilityNumbers[s]
	if !ok {
		return 0, false, field.Invalid(at, name, "not a capability of the Linux kernel")
	}
	return n, true, nil
}

func hasAll(names []corev1.Capability) bool {
	return slices.ContainsFunc(names, func(n corev1.Capability) bool { return strings.ToUpper(string(n)) == "ALL" })
}

func firstSet[T any](ps ...*T) *T {
	for _, p := range ps {
		if p != nil {
			return p
		}
	}
	return nil
}

func setSELinux(o *corev1.SELinuxOptions) bool {
	return o != nil && *o != corev1.SELinuxOptions{}
}

// seccompProfile is the container's seccomp profile, else the pod's, else
// none (the kubelet's default without SeccompDefault): RuntimeDefault is
// the shim's default filter, Unconfined none, and a Localhost profile is
// refused.
func seccompProfile(csc *corev1.SecurityContext, psc *corev1.PodSecurityContext, path, podPath *field.Path) (string, *field.Error) {
	p, at := csc.SeccompProfile, path.Child("seccompProfile")
	if p == nil {
		p, at = psc.SeccompProfile, podPath.Child("seccompProfile")
	}
	if p == nil {
		return "", nil
	}
	switch p.Type {
	case corev1.SeccompProfileTypeRuntimeDefault:
		if !sandbox.DefaultSeccompSupported {
			return "", field.Forbidden(at.Child("type"), "the process provider has no RuntimeDefault seccomp filter for this architecture (amd64 only)")
		}
		return sandbox.SeccompRuntimeDefault, nil
	case corev1.SeccompProfileTypeUnconfined:
		return "", nil
	case corev1.SeccompProfileTypeLocalhost:
		return "", field.Forbidden(at.Child("type"), "the process provider loads no Localhost seccomp profile; RuntimeDefault and Unconfined can run")
	}
	return "", field.NotSupported(at.Child("type"), p.Type,
		[]corev1.SeccompProfileType{corev1.SeccompProfileTypeRuntimeDefault, corev1.SeccompProfileTypeUnconfined})
}

// appArmorProfile is the container's AppArmor profile and where it is set:
// its own, else its deprecated annotation, else the pod's, as the kubelet
// reads them; nil for none.
func appArmorProfile(pod *corev1.Pod, c *corev1.Container, path, podPath *field.Path) (*corev1.AppArmorProfile, *field.Path) {
	if c.SecurityContext != nil && c.SecurityContext.AppArmorProfile != nil {
		return c.SecurityContext.AppArmorProfile, path.Child("appArmorProfile")
	}
	key := corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix + c.Name
	if v, ok := pod.Annotations[key]; ok {
		p := &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeLocalhost}
		switch {
		case v == corev1.DeprecatedAppArmorBetaProfileRuntimeDefault:
			p.Type = corev1.AppArmorProfileTypeRuntimeDefault
		case v == corev1.DeprecatedAppArmorBetaProfileNameUnconfined:
			p.Type = corev1.AppArmorProfileTypeUnconfined
		}
		return p, field.NewPath("metadata", "annotations").Key(key)
	}
	if sc := pod.Spec.SecurityContext; sc != nil && sc.AppArmorProfile != nil {
		return sc.AppArmorProfile, podPath.Child("appArmorProfile")
	}
	return nil, nil
}

// asksSecurity tells whether the container's security differs from that
// of a container and pod without a security context: a sandbox of an
// earlier agent, which runs every container as root with every
// capability, may still run the container only when it does not.
func asksSecurity(pod *corev1.Pod, c *corev1.Container) bool {
	return pod.Spec.SecurityContext != nil && !reflect.DeepEqual(*pod.Spec.SecurityContext, corev1.PodSecurityContext{}) ||
		c.SecurityContext != nil && !reflect.DeepEqual(*c.SecurityContext, corev1.SecurityContext{}) ||
		podrules.RequiresAppArmor(pod)
}
