package cri

import (
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"
)

func TestVerifyRunAsNonRoot(t *testing.T) {
	tests := []struct {
		name     string
		podSC    *corev1.PodSecurityContext
		sc       *corev1.SecurityContext
		uid      *int64
		username string
		err      string
	}{
		{name: "not asked", uid: ptr.To[int64](0)},
		{name: "asked, runAsUser root", podSC: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](0)},
			err: `container's runAsUser breaks non-root policy (pod: "p_ns(uid)", container: c)`},
		{name: "asked, runAsUser set", podSC: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true)}, sc: &corev1.SecurityContext{RunAsUser: ptr.To[int64](1000)},
			uid: ptr.To[int64](0)},
		{name: "image root", sc: &corev1.SecurityContext{RunAsNonRoot: ptr.To(true)}, uid: ptr.To[int64](0),
			err: `container has runAsNonRoot and image will run as root (pod: "p_ns(uid)", container: c)`},
		{name: "image without user", sc: &corev1.SecurityContext{RunAsNonRoot: ptr.To(true)},
			err: "image will run as root"},
		{name: "image user name", sc: &corev1.SecurityContext{RunAsNonRoot: ptr.To(true)}, username: "nginx",
			err: `container has runAsNonRoot and image has non-numeric user (nginx), cannot verify user is non-root (pod: "p_ns(uid)", container: c)`},
		{name: "image uid", sc: &corev1.SecurityContext{RunAsNonRoot: ptr.To(true)}, uid: ptr.To[int64](1000)},
		{name: "image uid out of range", sc: &corev1.SecurityContext{RunAsNonRoot: ptr.To(true)}, uid: ptr.To[int64](math.MaxInt32 + 1),
			err: "container has runAsNonRoot and image has an invalid user id (2147483648). (Must be 1-(2147483647))"},
		{name: "container lifts the pod's rule", podSC: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true)}, sc: &corev1.SecurityContext{RunAsNonRoot: ptr.To(false)},
			uid: ptr.To[int64](0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := podWith(corev1.Container{Name: "c", SecurityContext: tt.sc})
			pod.Spec.SecurityContext = tt.podSC
			err := verifyRunAsNonRoot(pod, &pod.Spec.Containers[0], tt.uid, tt.username)
			if tt.err == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("err = %v, want %q", err, tt.err)
			}
		})
	}
}

func TestEffectiveSecurityContext(t *testing.T) {
	pod := podWith(corev1.Container{Name: "c", SecurityContext: &corev1.SecurityContext{
		RunAsUser: ptr.To[int64](2000), Privileged: ptr.To(true),
	}})
	pod.Spec.SecurityContext = &corev1.PodSecurityContext{
		RunAsUser: ptr.To[int64](1000), RunAsGroup: ptr.To[int64](3000), RunAsNonRoot: ptr.To(true),
		SELinuxOptions: &corev1.SELinuxOptions{Level: "s0:c1"},
	}
	got := effectiveSecurityContext(pod, &pod.Spec.Containers[0])
	want := &corev1.SecurityContext{
		RunAsUser: ptr.To[int64](2000), RunAsGroup: ptr.To[int64](3000), RunAsNonRoot: ptr.To(true),
		SELinuxOptions: &corev1.SELinuxOptions{Level: "s0:c1"}, Privileged: ptr.To(true),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestContainerSecurityContext(t *testing.T) {
	masked, readonly := defaultMaskedPaths(), readonlyPaths
	nodeUserns := &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_NODE}
	podUserns := &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD,
		Uids: []*runtimeapi.IDMapping{{HostId: 65536, ContainerId: 0, Length: 65536}}}
	podNS := func() *runtimeapi.NamespaceOption {
		return &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_POD, Pid: runtimeapi.NamespaceMode_CONTAINER,
			Ipc: runtimeapi.NamespaceMode_POD, UsernsOptions: nodeUserns}
	}
	unconfined := &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}
	runtimeDefault := &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}

	tests := []struct {
		name  string
		pod   func(p *corev1.Pod)
		sc    *corev1.SecurityContext
		in    containerSecurity
		want  func() *runtimeapi.LinuxContainerSecurityContext
		error string
	}{
		{
			name: "defaults: the image's root user, unconfined",
			want: func() *runtimeapi.LinuxContainerSecurityContext {
				return &runtimeapi.LinuxContainerSecurityContext{
					RunAsUser: &runtimeapi.Int64Value{}, Seccomp: unconfined, NamespaceOptions: podNS(),
					MaskedPaths: masked, ReadonlyPaths: readonly,
				}
			},
		},
		{
			name: "everything set",
			pod: func(p *corev1.Pod) {
				p.Spec.SecurityContext = &corev1.PodSecurityContext{
					RunAsUser: ptr.To[int64](1000), FSGroup: ptr.To[int64](2000), SupplementalGroups: []int64{3000, 3001},
					SupplementalGroupsPolicy: ptr.To(corev1.SupplementalGroupsPolicyStrict),
					SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					SELinuxOptions:           &corev1.SELinuxOptions{Type: "spc_t"},
				}
				p.Spec.ShareProcessNamespace = ptr.To(true)
			},
			sc: &corev1.SecurityContext{
				RunAsGroup:               ptr.To[int64](1500),
				Capabilities:             &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}, Drop: []corev1.Capability{"ALL"}},
				Privileged:               ptr.To(false),
				ReadOnlyRootFilesystem:   ptr.To(true),
				AllowPrivilegeEscalation: ptr.To(false),
				AppArmorProfile:          &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeLocalhost, LocalhostProfile: ptr.To("k8s-web")},
			},
			in: containerSecurity{ImageUID: ptr.To[int64](0), ExtraGroups: []int64{4000}},
			want: func() *runtimeapi.LinuxContainerSecurityContext {
				ns := podNS()
				ns.Pid = runtimeapi.NamespaceMode_POD
				return &runtimeapi.LinuxContainerSecurityContext{
					Capabilities:             &runtimeapi.Capability{AddCapabilities: []string{"NET_ADMIN"}, DropCapabilities: []string{"ALL"}},
					RunAsUser:                &runtimeapi.Int64Value{Value: 1000},
					RunAsGroup:               &runtimeapi.Int64Value{Value: 1500},
					ReadonlyRootfs:           true,
					NoNewPrivs:               true,
					SelinuxOptions:           &runtimeapi.SELinuxOption{Type: "spc_t"},
					SupplementalGroups:       []int64{2000, 3000, 3001, 4000},
					SupplementalGroupsPolicy: runtimeapi.SupplementalGroupsPolicy_Strict,
					Seccomp:                  runtimeDefault,
					Apparmor:                 &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "k8s-web"},
					ApparmorProfile:          "localhost/k8s-web",
					NamespaceOptions:         ns,
					MaskedPaths:              masked,
					ReadonlyPaths:            readonly,
				}
			},
		},
		{
			name: "image user name, seccomp default, host namespaces",
			pod: func(p *corev1.Pod) {
				p.Spec.HostNetwork, p.Spec.HostPID, p.Spec.HostIPC = true, true, true
				p.Annotations = map[string]string{"container.apparmor.security.beta.kubernetes.io/c": "runtime/default"}
			},
			sc: &corev1.SecurityContext{Privileged: ptr.To(true), AllowPrivilegeEscalation: ptr.To(true)},
			in: containerSecurity{ImageUsername: "nginx", SeccompDefault: true, TargetID: "abc"},
			want: func() *runtimeapi.LinuxContainerSecurityContext {
				return &runtimeapi.LinuxContainerSecurityContext{
					Privileged:      true,
					RunAsUsername:   "nginx",
					Seccomp:         runtimeDefault,
					Apparmor:        runtimeDefault,
					ApparmorProfile: "runtime/default",
					NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE, Pid: runtimeapi.NamespaceMode_NODE,
						Ipc: runtimeapi.NamespaceMode_NODE, UsernsOptions: nodeUserns},
					MaskedPaths:   masked,
					ReadonlyPaths: readonly,
				}
			},
		},
		{
			name: "ephemeral container targets another's PID namespace; localhost seccomp",
			sc:   &corev1.SecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("profiles/audit.json")}},
			in:   containerSecurity{ImageUID: ptr.To[int64](1000), TargetID: "abc", SeccompRoot: "/var/lib/nodelet/seccomp"},
			want: func() *runtimeapi.LinuxContainerSecurityContext {
				ns := podNS()
				ns.Pid, ns.TargetId = runtimeapi.NamespaceMode_TARGET, "abc"
				return &runtimeapi.LinuxContainerSecurityContext{
					RunAsUser:        &runtimeapi.Int64Value{Value: 1000},
					Seccomp:          &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "/var/lib/nodelet/seccomp/profiles/audit.json"},
					NamespaceOptions: ns,
					MaskedPaths:      masked,
					ReadonlyPaths:    readonly,
				}
			},
		},
		{
			name: "unmasked proc in a user namespace",
			pod:  func(p *corev1.Pod) { p.Spec.HostUsers = ptr.To(false) },
			sc:   &corev1.SecurityContext{ProcMount: ptr.To(corev1.UnmaskedProcMount), RunAsUser: ptr.To[int64](0)},
			in:   containerSecurity{UserNamespace: podUserns},
			want: func() *runtimeapi.LinuxContainerSecurityContext {
				ns := podNS()
				ns.UsernsOptions = podUserns
				return &runtimeapi.LinuxContainerSecurityContext{
					RunAsUser: &runtimeapi.Int64Value{}, Seccomp: unconfined, NamespaceOptions: ns,
					MaskedPaths: []string{}, ReadonlyPaths: []string{},
				}
			},
		},
		{
			name:  "unmasked proc on the host's users",
			sc:    &corev1.SecurityContext{ProcMount: ptr.To(corev1.UnmaskedProcMount)},
			error: "spec.containers[0].securityContext.procMount: Invalid value",
		},
		{
			name:  "user namespace not provided",
			pod:   func(p *corev1.Pod) { p.Spec.HostUsers = ptr.To(false) },
			error: "spec.hostUsers: Forbidden",
		},
		{
			name: "localhost seccomp without a profile",
			pod: func(p *corev1.Pod) {
				p.Spec.SecurityContext = &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost}}
			},
			error: "spec.securityContext.seccompProfile.localhostProfile: Required value",
		},
		{
			name:  "localhost seccomp outside the root",
			sc:    &corev1.SecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("../etc/x.json")}},
			error: "spec.containers[0].securityContext.seccompProfile.localhostProfile: Invalid value",
		},
		{
			name:  "unknown seccomp type",
			sc:    &corev1.SecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: "Strict"}},
			error: "spec.containers[0].securityContext.seccompProfile.type: Unsupported value",
		},
		{
			name: "localhost apparmor without a profile",
			pod: func(p *corev1.Pod) {
				p.Spec.SecurityContext = &corev1.PodSecurityContext{AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeLocalhost}}
			},
			error: "spec.securityContext.appArmorProfile.localhostProfile: Required value",
		},
		{
			name: "bad supplemental groups policy",
			pod: func(p *corev1.Pod) {
				p.Spec.SecurityContext = &corev1.PodSecurityContext{SupplementalGroupsPolicy: ptr.To(corev1.SupplementalGroupsPolicy("Loose"))}
			},
			error: "spec.securityContext.supplementalGroupsPolicy: Unsupported value",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := podWith(corev1.Container{Name: "c", SecurityContext: tt.sc})
			if tt.pod != nil {
				tt.pod(pod)
			}
			got, err := containerSecurityContext(pod, &pod.Spec.Containers[0], tt.in)
			if tt.error != "" {
				if err == nil || !strings.Contains(err.Error(), tt.error) {
					t.Fatalf("err = %v, want %q", err, tt.error)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want(), got, protocmp.Transform()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestAppArmorProfileSources(t *testing.T) {
	tests := []struct {
		name       string
		annotation string
		pod, own   *corev1.AppArmorProfile
		want       *runtimeapi.SecurityProfile
		deprecated string
	}{
		{name: "none"},
		{name: "pod", pod: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined},
			want: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}, deprecated: "unconfined"},
		{name: "annotation before pod", annotation: "localhost/old", pod: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined},
			want: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "old"}, deprecated: "localhost/old"},
		{name: "container before annotation", annotation: "unconfined", own: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeRuntimeDefault},
			want: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}, deprecated: "runtime/default"},
		{name: "invalid annotation is ignored", annotation: "bogus", pod: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined},
			want: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}, deprecated: "unconfined"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := podWith(corev1.Container{Name: "c"})
			if tt.own != nil {
				pod.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{AppArmorProfile: tt.own}
			}
			if tt.pod != nil {
				pod.Spec.SecurityContext = &corev1.PodSecurityContext{AppArmorProfile: tt.pod}
			}
			if tt.annotation != "" {
				pod.Annotations = map[string]string{"container.apparmor.security.beta.kubernetes.io/c": tt.annotation}
			}
			got, deprecated, err := appArmorProfile(pod, &pod.Spec.Containers[0])
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, protocmp.Transform()); diff != "" || deprecated != tt.deprecated {
				t.Errorf("(-want +got):\n%s\ndeprecated = %q, want %q", diff, deprecated, tt.deprecated)
			}
		})
	}
}

func TestSandboxSecurityContext(t *testing.T) {
	pod := podWith(corev1.Container{Name: "c"})
	pod.Spec.InitContainers = []corev1.Container{{Name: "i", SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}}}
	pod.Spec.SecurityContext = &corev1.PodSecurityContext{
		RunAsUser: ptr.To[int64](1000), RunAsGroup: ptr.To[int64](1000), FSGroup: ptr.To[int64](2000),
		SupplementalGroups: []int64{3000}, SELinuxOptions: &corev1.SELinuxOptions{Level: "s0"},
	}
	got, err := sandboxSecurityContext(pod, []int64{4000}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := &runtimeapi.LinuxSandboxSecurityContext{
		NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_POD, Pid: runtimeapi.NamespaceMode_CONTAINER,
			Ipc: runtimeapi.NamespaceMode_POD, UsernsOptions: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_NODE}},
		SelinuxOptions:     &runtimeapi.SELinuxOption{Level: "s0"},
		RunAsUser:          &runtimeapi.Int64Value{Value: 1000},
		RunAsGroup:         &runtimeapi.Int64Value{Value: 1000},
		SupplementalGroups: []int64{2000, 4000, 3000},
		Privileged:         true,
		Seccomp:            &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault},
	}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}

	pod.Spec.SecurityContext = nil
	pod.Spec.InitContainers = nil
	pod.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
		Name: "dbg", SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}}}}
	got, err = sandboxSecurityContext(pod, []int64{4000}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Privileged || got.RunAsUser != nil || !cmp.Equal(got.SupplementalGroups, []int64{4000}) {
		t.Errorf("without a pod security context: %v", got)
	}

	pod.Spec.HostUsers = ptr.To(false)
	if _, err := sandboxSecurityContext(pod, nil, nil); err == nil || !strings.Contains(err.Error(), "spec.hostUsers") {
		t.Errorf("err = %v, want a spec.hostUsers error", err)
	}
}

func TestParseCPUList(t *testing.T) {
	tests := []struct {
		in   string
		want []int
		ok   bool
	}{
		{"0", []int{0}, true},
		{"0-3,8", []int{0, 1, 2, 3, 8}, true},
		{"0-1,4-5", []int{0, 1, 4, 5}, true},
		{"x", nil, false},
		{"3-1", nil, false},
		{"", nil, false},
	}
	for _, tt := range tests {
		got, ok := parseCPUList(tt.in)
		if ok != tt.ok || !cmp.Equal(got, tt.want) {
			t.Errorf("parseCPUList(%q) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func TestProcMountPaths(t *testing.T) {
	masked, ro := procMountPaths(nil)
	if !cmp.Equal(masked[:len(staticMaskedPaths)], staticMaskedPaths) || !cmp.Equal(ro, readonlyPaths) {
		t.Errorf("default proc mount: masked %v, read-only %v", masked, ro)
	}
	masked[0] = "changed"
	if defaultMaskedPaths()[0] == "changed" {
		t.Error("procMountPaths shares the default list")
	}
	masked, ro = procMountPaths(ptr.To(corev1.DefaultProcMount))
	if len(masked) < len(staticMaskedPaths) || len(ro) != len(readonlyPaths) {
		t.Errorf("Default proc mount: masked %v, read-only %v", masked, ro)
	}
	masked, ro = procMountPaths(ptr.To(corev1.UnmaskedProcMount))
	if masked == nil || len(masked) != 0 || ro == nil || len(ro) != 0 {
		t.Errorf("Unmasked proc mount: masked %v, read-only %v", masked, ro)
	}
}
