package process

import (
	"os"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/providers/process/sandbox"
)

func securityPod(psc *corev1.PodSecurityContext, csc *corev1.SecurityContext) *corev1.Pod {
	return &corev1.Pod{Spec: corev1.PodSpec{
		SecurityContext: psc,
		Containers:      []corev1.Container{{Name: "sidecar"}, {Name: "main", SecurityContext: csc}},
	}}
}

func TestContainerSecurity(t *testing.T) {
	users := func(uid int64) (hostUser, bool) {
		if uid == 1000 {
			return hostUser{GID: 100, Groups: []int64{27, 100}}, true
		}
		return hostUser{}, false
	}
	chown := uint64(1) << 0
	netAdmin := uint64(1) << 12
	sysAdmin := uint64(1) << 21
	for _, tc := range []struct {
		name string
		psc  *corev1.PodSecurityContext
		csc  *corev1.SecurityContext
		want sandbox.Security
	}{{
		name: "nothing set: root with containerd's default capabilities",
		want: sandbox.Security{Groups: []uint32{0}, Capabilities: defaultCapabilities},
	}, {
		name: "the pod's user and groups, fsGroup before supplementalGroups",
		psc:  &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](4242), RunAsGroup: ptr.To[int64](2000), FSGroup: ptr.To[int64](4000), SupplementalGroups: []int64{3000, 2000}},
		want: sandbox.Security{UID: 4242, GID: 2000, Groups: []uint32{2000, 4000, 3000}, Capabilities: defaultCapabilities},
	}, {
		name: "the container's user and group win over the pod's",
		psc:  &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](4242), RunAsGroup: ptr.To[int64](2000)},
		csc:  &corev1.SecurityContext{RunAsUser: ptr.To[int64](5000), RunAsGroup: ptr.To[int64](6000)},
		want: sandbox.Security{UID: 5000, GID: 6000, Groups: []uint32{6000}, Capabilities: defaultCapabilities},
	}, {
		name: "a user of the host without runAsGroup: its group and groups, as of an image",
		csc:  &corev1.SecurityContext{RunAsUser: ptr.To[int64](1000)},
		want: sandbox.Security{UID: 1000, GID: 100, Groups: []uint32{100, 27}, Capabilities: defaultCapabilities},
	}, {
		name: "supplementalGroupsPolicy Strict leaves out the host's groups",
		psc:  &corev1.PodSecurityContext{SupplementalGroupsPolicy: ptr.To(corev1.SupplementalGroupsPolicyStrict), SupplementalGroups: []int64{3000}},
		csc:  &corev1.SecurityContext{RunAsUser: ptr.To[int64](1000)},
		want: sandbox.Security{UID: 1000, GID: 100, Groups: []uint32{100, 3000}, Capabilities: defaultCapabilities},
	}, {
		name: "runAsNonRoot with a non-root user",
		psc:  &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](4242)},
		want: sandbox.Security{UID: 4242, Groups: []uint32{0}, Capabilities: defaultCapabilities},
	}, {
		name: "drop ALL",
		csc:  &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
		want: sandbox.Security{Groups: []uint32{0}},
	}, {
		name: "drop ALL, then add one (with or without CAP_, any case)",
		csc:  &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"all"}, Add: []corev1.Capability{"CAP_NET_ADMIN", "chown"}}},
		want: sandbox.Security{Groups: []uint32{0}, Capabilities: netAdmin | chown},
	}, {
		name: "add ALL, then drop one",
		csc:  &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"ALL"}, Drop: []corev1.Capability{"SYS_ADMIN"}}},
		want: sandbox.Security{Groups: []uint32{0}, Capabilities: allCapabilities &^ sysAdmin},
	}, {
		name: "add and drop on the default set",
		csc:  &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}, Drop: []corev1.Capability{"CHOWN"}}},
		want: sandbox.Security{Groups: []uint32{0}, Capabilities: (defaultCapabilities | netAdmin) &^ chown},
	}, {
		name: "privileged: every capability and no seccomp filter",
		psc:  &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
		csc:  &corev1.SecurityContext{Privileged: ptr.To(true)},
		want: sandbox.Security{Groups: []uint32{0}, Capabilities: allCapabilities},
	}, {
		name: "allowPrivilegeEscalation false sets no_new_privs",
		csc:  &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false)},
		want: sandbox.Security{Groups: []uint32{0}, Capabilities: defaultCapabilities, NoNewPrivs: true},
	}, {
		name: "allowPrivilegeEscalation true does not",
		csc:  &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(true)},
		want: sandbox.Security{Groups: []uint32{0}, Capabilities: defaultCapabilities},
	}, {
		name: "the pod's RuntimeDefault seccomp profile",
		psc:  &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
		want: sandbox.Security{Groups: []uint32{0}, Capabilities: defaultCapabilities, Seccomp: sandbox.SeccompRuntimeDefault},
	}, {
		name: "the container's Unconfined wins over the pod's RuntimeDefault",
		psc:  &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
		csc:  &corev1.SecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}},
		want: sandbox.Security{Groups: []uint32{0}, Capabilities: defaultCapabilities},
	}, {
		name: "the e2e framework's restricted pod",
		psc: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](1000),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
		csc:  &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
		want: sandbox.Security{UID: 1000, GID: 100, Groups: []uint32{100, 27}, NoNewPrivs: true, Seccomp: sandbox.SeccompRuntimeDefault},
	}, {
		name: "Unconfined AppArmor, empty SELinux options and the Default proc mount are fine",
		psc:  &corev1.PodSecurityContext{SELinuxOptions: &corev1.SELinuxOptions{}, AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}},
		csc:  &corev1.SecurityContext{ProcMount: ptr.To(corev1.DefaultProcMount), ReadOnlyRootFilesystem: ptr.To(false)},
		want: sandbox.Security{Groups: []uint32{0}, Capabilities: defaultCapabilities},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			pod := securityPod(tc.psc, tc.csc)
			got, err := containerSecurity(pod, &pod.Spec.Containers[1], hostSecurity{Users: users})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(*got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", *got, tc.want)
			}
		})
	}
}

func TestContainerSecurityRefused(t *testing.T) {
	for _, tc := range []struct {
		name     string
		psc      *corev1.PodSecurityContext
		csc      *corev1.SecurityContext
		apparmor bool
		want     []string // in the message
	}{{
		name: "runAsNonRoot without a user",
		csc:  &corev1.SecurityContext{RunAsNonRoot: ptr.To(true)},
		want: []string{"spec.containers[1].securityContext.runAsUser", "no image whose user could be checked"},
	}, {
		name: "the pod's runAsNonRoot without a user",
		psc:  &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true)},
		want: []string{"runAsUser", "no image"},
	}, {
		name: "runAsNonRoot with root",
		psc:  &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](1000)},
		csc:  &corev1.SecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](0)},
		want: []string{"spec.containers[1].securityContext.runAsUser", "must not be root"},
	}, {
		name: "the pod's root user with the container's runAsNonRoot",
		psc:  &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](0)},
		csc:  &corev1.SecurityContext{RunAsNonRoot: ptr.To(true)},
		want: []string{"spec.securityContext.runAsUser", "must not be root"},
	}, {
		name: "readOnlyRootFilesystem",
		csc:  &corev1.SecurityContext{ReadOnlyRootFilesystem: ptr.To(true)},
		want: []string{"spec.containers[1].securityContext.readOnlyRootFilesystem", "host's root filesystem"},
	}, {
		name: "the container's SELinux options",
		csc:  &corev1.SecurityContext{SELinuxOptions: &corev1.SELinuxOptions{Level: "s0:c1"}},
		want: []string{"spec.containers[1].securityContext.seLinuxOptions", "SELinux"},
	}, {
		name: "the pod's SELinux options",
		psc:  &corev1.PodSecurityContext{SELinuxOptions: &corev1.SELinuxOptions{Type: "spc_t"}},
		want: []string{"spec.securityContext.seLinuxOptions"},
	}, {
		name: "an Unmasked proc mount",
		csc:  &corev1.SecurityContext{ProcMount: ptr.To(corev1.UnmaskedProcMount)},
		want: []string{"spec.containers[1].securityContext.procMount"},
	}, {
		name: "a Localhost seccomp profile",
		psc:  &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("p.json")}},
		want: []string{"spec.securityContext.seccompProfile.type", "Localhost"},
	}, {
		name:     "an AppArmor profile on a host with AppArmor",
		csc:      &corev1.SecurityContext{AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeRuntimeDefault}},
		apparmor: true,
		want:     []string{"spec.containers[1].securityContext.appArmorProfile", "RuntimeDefault"},
	}, {
		name: "an unknown capability",
		csc:  &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN", "FLY"}}},
		want: []string{"spec.containers[1].securityContext.capabilities.add[1]", "FLY"},
	}, {
		name: "two at once",
		csc:  &corev1.SecurityContext{RunAsNonRoot: ptr.To(true), ReadOnlyRootFilesystem: ptr.To(true)},
		want: []string{"readOnlyRootFilesystem", "runAsUser"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			pod := securityPod(tc.psc, tc.csc)
			_, err := containerSecurity(pod, &pod.Spec.Containers[1], hostSecurity{AppArmor: tc.apparmor})
			if err == nil {
				t.Fatal("not refused")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

func TestHostUsers(t *testing.T) {
	dir := t.TempDir()
	passwd := dir + "/passwd"
	group := dir + "/group"
	writeFile(t, passwd, "# comment\nroot:x:0:0:root:/root:/bin/sh\nalice:x:1000:100::/home/alice:/bin/sh\n")
	writeFile(t, group, "root:x:0:\nusers:x:100:\nsudo:x:27:bob,alice\ndocker:x:999:bob\n")
	name, gid, ok := passwdEntry(passwd, 1000)
	if !ok || name != "alice" || gid != 100 {
		t.Errorf("passwdEntry = %q %d %v", name, gid, ok)
	}
	if _, _, ok := passwdEntry(passwd, 4242); ok {
		t.Error("found a user that is not there")
	}
	if got := memberGroups(group, "alice"); !reflect.DeepEqual(got, []int64{27}) {
		t.Errorf("memberGroups = %v", got)
	}
}

func annotated(a map[string]string) metav1.ObjectMeta { return metav1.ObjectMeta{Annotations: a} }

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestAsksSecurity: a sandbox of an earlier agent may still run a container
// that sets no security context, and only that.
func TestAsksSecurity(t *testing.T) {
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"none", securityPod(nil, nil), false},
		{"empty ones", securityPod(&corev1.PodSecurityContext{}, &corev1.SecurityContext{}), false},
		{"the pod's user", securityPod(&corev1.PodSecurityContext{RunAsUser: ptr.To[int64](1)}, nil), true},
		{"the container's capabilities", securityPod(nil, &corev1.SecurityContext{Capabilities: &corev1.Capabilities{}}), true},
		{"an AppArmor annotation", &corev1.Pod{ObjectMeta: annotated(map[string]string{corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix + "main": "runtime/default"}),
			Spec: securityPod(nil, nil).Spec}, true},
	} {
		if got := asksSecurity(tc.pod, &tc.pod.Spec.Containers[1]); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
