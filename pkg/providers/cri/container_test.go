package cri

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/deviceplugin"
)

func containerTestPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "shop", UID: "uid-1", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "app", Image: "nginx", WorkingDir: "/srv",
				Command: []string{"nginx", "-g", "$(OPTS)"},
				Stdin:   true, StdinOnce: true, TTY: true,
				TerminationMessagePath:   "/dev/termination-log",
				TerminationMessagePolicy: corev1.TerminationMessageReadFile,
				Resources:                res(rl("cpu", "100m", "memory", "64Mi"), rl("cpu", "200m", "memory", "128Mi")),
			}},
		},
	}
}

func containerTestParams() containerParams {
	return containerParams{
		Attempt: 1,
		Command: []string{"nginx", "-g", "daemon off;"},
		Args:    []string{"-q"},
		Env:     envKeyValues([]string{"OPTS=daemon off;", "EMPTY=", "EQ=a=b"}),
		Mounts: []containerMount{
			{HostPath: "/var/lib/nodelet/pods/uid-1/volumes/cfg", ContainerPath: "/etc/nginx", ReadOnly: true, RecursiveReadOnly: true},
			{HostPath: "/mnt/shared", ContainerPath: "/shared", Propagation: corev1.MountPropagationHostToContainer},
			{HostPath: "/mnt/bidi", ContainerPath: "/bidi", Propagation: corev1.MountPropagationBidirectional},
		},
		HostsFile:              "/var/lib/nodelet/pods/uid-1/etc-hosts",
		TerminationMessageFile: "/var/lib/nodelet/pods/uid-1/containers/app/1a2b",
		ImageRef:               "sha256:0123",
		ImageUID:               ptr.To[int64](101),
	}
}

func TestContainerConfig(t *testing.T) {
	pod := containerTestPod()
	c := &pod.Spec.Containers[0]
	got, err := containerConfig(pod, c, testNode(), containerTestParams())
	if err != nil {
		t.Fatal(err)
	}
	annotations, err := containerAnnotations(pod, c, 1, "/var/lib/nodelet/pods/uid-1/containers/app/1a2b")
	if err != nil {
		t.Fatal(err)
	}
	want := &runtimeapi.ContainerConfig{
		Metadata:   &runtimeapi.ContainerMetadata{Name: "app", Attempt: 1},
		Image:      &runtimeapi.ImageSpec{Image: "sha256:0123", UserSpecifiedImage: "nginx"},
		Command:    []string{"nginx", "-g", "daemon off;"},
		Args:       []string{"-q"},
		WorkingDir: "/srv",
		Envs: []*runtimeapi.KeyValue{
			{Key: "OPTS", Value: []byte("daemon off;")}, {Key: "EMPTY", Value: []byte{}}, {Key: "EQ", Value: []byte("a=b")},
		},
		Mounts: []*runtimeapi.Mount{
			{HostPath: "/var/lib/nodelet/pods/uid-1/volumes/cfg", ContainerPath: "/etc/nginx", Readonly: true, RecursiveReadOnly: true},
			{HostPath: "/mnt/shared", ContainerPath: "/shared", Propagation: runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER},
			{HostPath: "/mnt/bidi", ContainerPath: "/bidi", Propagation: runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL},
			{HostPath: "/var/lib/nodelet/pods/uid-1/etc-hosts", ContainerPath: "/etc/hosts"},
			{HostPath: "/var/lib/nodelet/pods/uid-1/containers/app/1a2b", ContainerPath: "/dev/termination-log"},
		},
		Labels: map[string]string{
			labelPodName: "web-0", labelPodNamespace: "shop", labelPodUID: "uid-1", labelContainerName: "app", labelNode: "node-a",
		},
		Annotations: annotations,
		LogPath:     "app/1.log",
		Stdin:       true,
		StdinOnce:   true,
		Tty:         true,
		Linux: &runtimeapi.LinuxContainerConfig{
			Resources: &runtimeapi.LinuxContainerResources{
				CpuShares: 102, CpuPeriod: 100000, CpuQuota: 20000, MemoryLimitInBytes: 128 << 20, OomScoreAdj: 985,
			},
			SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
				RunAsUser: &runtimeapi.Int64Value{Value: 101},
				Seccomp:   &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined},
				NamespaceOptions: &runtimeapi.NamespaceOption{
					Network: runtimeapi.NamespaceMode_POD, Pid: runtimeapi.NamespaceMode_CONTAINER, Ipc: runtimeapi.NamespaceMode_POD,
					UsernsOptions: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_NODE},
				},
				MaskedPaths:   defaultMaskedPaths(),
				ReadonlyPaths: readonlyPaths,
			},
		},
	}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if got.Annotations[annotationTerminationMessageFile] == "" || got.Annotations[annotationRestartCount] != "1" {
		t.Errorf("annotations miss the termination message file or restart count: %v", got.Annotations)
	}
}

func TestContainerConfigVariants(t *testing.T) {
	tests := []struct {
		name   string
		pod    func(*corev1.Pod)
		params func(*containerParams)
		check  func(*testing.T, *runtimeapi.ContainerConfig)
		err    string
	}{
		{
			name: "a volume at /etc/hosts replaces the managed one",
			params: func(p *containerParams) {
				p.Mounts = append(p.Mounts, containerMount{HostPath: "/custom/hosts", ContainerPath: "/etc//hosts"})
			},
			check: func(t *testing.T, c *runtimeapi.ContainerConfig) {
				for _, m := range c.Mounts {
					if m.HostPath == "/var/lib/nodelet/pods/uid-1/etc-hosts" {
						t.Error("managed hosts file mounted over a volume")
					}
				}
			},
		},
		{
			name: "no hosts file, no termination message path, entrypoint of the image",
			pod:  func(p *corev1.Pod) { p.Spec.Containers[0].TerminationMessagePath = "" },
			params: func(p *containerParams) {
				p.HostsFile, p.Mounts, p.Command, p.Args = "", nil, nil, nil
			},
			check: func(t *testing.T, c *runtimeapi.ContainerConfig) {
				if len(c.Mounts) != 0 || c.Command != nil || c.Args != nil {
					t.Errorf("mounts %v, command %v, args %v", c.Mounts, c.Command, c.Args)
				}
				if _, ok := c.Annotations[annotationTerminationMessageFile]; ok {
					t.Error("termination message file recorded but not mounted")
				}
			},
		},
		{
			name: "user namespace maps every mount",
			pod:  func(p *corev1.Pod) { p.Spec.HostUsers = ptr.To(false) },
			params: func(p *containerParams) {
				p.UserNamespace = &runtimeapi.UserNamespace{
					Mode: runtimeapi.NamespaceMode_POD,
					Uids: []*runtimeapi.IDMapping{{HostId: 65536, Length: 65536}},
					Gids: []*runtimeapi.IDMapping{{HostId: 65536, Length: 65536}},
				}
			},
			check: func(t *testing.T, c *runtimeapi.ContainerConfig) {
				for _, m := range c.Mounts {
					if len(m.UidMappings) != 1 || len(m.GidMappings) != 1 {
						t.Errorf("mount %s not ID-mapped", m.ContainerPath)
					}
				}
				if c.Linux.SecurityContext.NamespaceOptions.UsernsOptions.Mode != runtimeapi.NamespaceMode_POD {
					t.Error("container not in the pod's user namespace")
				}
			},
		},
		{
			name: "image user name",
			params: func(p *containerParams) {
				p.ImageUID, p.ImageUsername = nil, "nginx"
			},
			check: func(t *testing.T, c *runtimeapi.ContainerConfig) {
				sc := c.Linux.SecurityContext
				if sc.RunAsUser != nil || sc.RunAsUsername != "nginx" {
					t.Errorf("runAsUser %v, runAsUsername %q", sc.RunAsUser, sc.RunAsUsername)
				}
			},
		},
		{
			name: "run as non-root refused",
			pod: func(p *corev1.Pod) {
				p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true)}
			},
			params: func(p *containerParams) { p.ImageUID = ptr.To[int64](0) },
			err:    "container has runAsNonRoot and image will run as root",
		},
		{
			name:   "bad propagation",
			params: func(p *containerParams) { p.Mounts[1].Propagation = "Sideways" },
			err:    `mount 1 (/shared): unsupported mount propagation "Sideways"`,
		},
		{
			name: "bad huge page resource",
			pod: func(p *corev1.Pod) {
				p.Spec.Containers[0].Resources.Limits["hugepages-3000"] = p.Spec.Containers[0].Resources.Limits["memory"]
			},
			err: "spec.containers[0].resources: resource hugepages-3000",
		},
		{
			name: "bad seccomp profile",
			pod: func(p *corev1.Pod) {
				p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost}}
			},
			err: "spec.containers[0].securityContext.seccompProfile.localhostProfile",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := containerTestPod()
			if tt.pod != nil {
				tt.pod(pod)
			}
			params := containerTestParams()
			if tt.params != nil {
				tt.params(&params)
			}
			node := testNode()
			node.HugePageSizes = []string{"2MB"}
			got, err := containerConfig(pod, &pod.Spec.Containers[0], node, params)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, got)
		})
	}
}

func TestContainerLogPath(t *testing.T) {
	if got := containerLogPath("app", 3); got != "app/3.log" {
		t.Errorf("containerLogPath = %q", got)
	}
}

// A container's devices add their environment, mounts, device nodes,
// annotations and CDI devices to its configuration, after its own.
func TestWithDevices(t *testing.T) {
	cfg := &runtimeapi.ContainerConfig{
		Envs:   []*runtimeapi.KeyValue{{Key: "A", Value: []byte("1")}},
		Mounts: []*runtimeapi.Mount{{ContainerPath: "/data", HostPath: "/host/data"}},
	}
	withDevices(cfg, &deviceplugin.ContainerDevices{
		Envs:        []*runtimeapi.KeyValue{{Key: "DEVICES", Value: []byte("0")}},
		Mounts:      []*runtimeapi.Mount{{ContainerPath: "/dev/fake-0", HostPath: "/tmp/fake-0"}},
		Devices:     []*runtimeapi.Device{{ContainerPath: "/dev/gpu0", HostPath: "/dev/nvidia0", Permissions: "rw"}},
		Annotations: map[string]string{"example.com/device": "0"},
		CDIDevices:  []*runtimeapi.CDIDevice{{Name: "example.com/gpu=0"}},
	})
	if len(cfg.Envs) != 2 || cfg.Envs[1].Key != "DEVICES" || len(cfg.Mounts) != 2 || cfg.Mounts[1].ContainerPath != "/dev/fake-0" ||
		len(cfg.Devices) != 1 || cfg.Annotations["example.com/device"] != "0" || len(cfg.CDIDevices) != 1 {
		t.Errorf("config with devices: %+v", cfg)
	}
}
