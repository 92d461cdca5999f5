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
)

func sandboxTestPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "web-0", Namespace: "shop", UID: "uid-1",
			Labels:      map[string]string{"app": "web"},
			Annotations: map[string]string{"team": "a"},
		},
		Spec: corev1.PodSpec{
			Hostname: "web", Subdomain: "www",
			SecurityContext: &corev1.PodSecurityContext{
				RunAsUser: ptr.To[int64](1000),
				Sysctls:   []corev1.Sysctl{{Name: "net.core.somaxconn", Value: "1024"}, {Name: "kernel.shm_rmid_forced", Value: "1"}},
			},
			Containers: []corev1.Container{
				{
					Name: "app", Resources: res(rl("cpu", "500m"), rl("cpu", "1", "memory", "512Mi")),
					Ports: []corev1.ContainerPort{
						{Name: "http", ContainerPort: 8080, HostPort: 80, Protocol: corev1.ProtocolTCP},
						{Name: "http", ContainerPort: 8081, Protocol: corev1.ProtocolTCP}, // duplicate name: dropped
						{ContainerPort: 53, Protocol: corev1.ProtocolUDP, HostIP: "fd00::1", HostPort: 53},
					},
				},
				{Name: "metrics", Ports: []corev1.ContainerPort{{ContainerPort: 9090, Protocol: corev1.ProtocolSCTP}, {ContainerPort: 9091}}},
			},
			InitContainers: []corev1.Container{{Name: "init", Ports: []corev1.ContainerPort{{ContainerPort: 1, HostPort: 1}}}},
		},
	}
}

func TestSandboxConfig(t *testing.T) {
	node := testNode()
	node.DNS.ClusterDomain = "cluster.local"
	dns := &runtimeapi.DNSConfig{Servers: []string{"10.96.0.10"}}
	got, err := sandboxConfig(sandboxTestPod(), node, sandboxParams{
		Attempt: 2, DNS: dns, CgroupParent: "/kubepods/burstable/poduid-1", ExtraGroups: []int64{5000},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "web-0", Namespace: "shop", Uid: "uid-1", Attempt: 2},
		Hostname:     "web",
		LogDirectory: "/var/log/pods/shop_web-0_uid-1",
		DnsConfig:    dns,
		PortMappings: []*runtimeapi.PortMapping{
			{Protocol: runtimeapi.Protocol_TCP, ContainerPort: 8080, HostPort: 80},
			{Protocol: runtimeapi.Protocol_UDP, ContainerPort: 53, HostPort: 53, HostIp: "fd00::1"},
			{Protocol: runtimeapi.Protocol_SCTP, ContainerPort: 9090},
			{Protocol: runtimeapi.Protocol_TCP, ContainerPort: 9091},
		},
		Labels: map[string]string{
			"app": "web", labelPodName: "web-0", labelPodNamespace: "shop", labelPodUID: "uid-1", labelNode: "node-a",
		},
		Annotations: map[string]string{"team": "a"},
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent: "/kubepods/burstable/poduid-1",
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{
					Network: runtimeapi.NamespaceMode_POD, Pid: runtimeapi.NamespaceMode_CONTAINER, Ipc: runtimeapi.NamespaceMode_POD,
					UsernsOptions: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_NODE},
				},
				RunAsUser:          &runtimeapi.Int64Value{Value: 1000},
				SupplementalGroups: []int64{5000},
				Seccomp:            &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault},
			},
			Sysctls:   map[string]string{"net.core.somaxconn": "1024", "kernel.shm_rmid_forced": "1"},
			Overhead:  &runtimeapi.LinuxContainerResources{},
			Resources: &runtimeapi.LinuxContainerResources{CpuShares: 512, CpuPeriod: 100000, CpuQuota: 100000, MemoryLimitInBytes: 512 << 20},
		},
	}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestSandboxConfigVariants(t *testing.T) {
	tests := []struct {
		name  string
		pod   func(*corev1.Pod)
		check func(*testing.T, *runtimeapi.PodSandboxConfig)
		err   string
	}{
		{
			name: "host network: no host name, node namespaces",
			pod: func(p *corev1.Pod) {
				p.Spec.HostNetwork, p.Spec.HostPID, p.Spec.HostIPC = true, true, true
				p.Spec.Hostname = "Invalid_Ignored"
			},
			check: func(t *testing.T, c *runtimeapi.PodSandboxConfig) {
				ns := c.Linux.SecurityContext.NamespaceOptions
				if c.Hostname != "" || ns.Network != runtimeapi.NamespaceMode_NODE || ns.Pid != runtimeapi.NamespaceMode_NODE || ns.Ipc != runtimeapi.NamespaceMode_NODE {
					t.Errorf("hostname %q, namespaces %v", c.Hostname, ns)
				}
			},
		},
		{
			name: "FQDN host name and shared PID namespace",
			pod: func(p *corev1.Pod) {
				p.Spec.SetHostnameAsFQDN = ptr.To(true)
				p.Spec.ShareProcessNamespace = ptr.To(true)
			},
			check: func(t *testing.T, c *runtimeapi.PodSandboxConfig) {
				if c.Hostname != "web.www.shop.svc.cluster.local" {
					t.Errorf("hostname %q", c.Hostname)
				}
				if c.Linux.SecurityContext.NamespaceOptions.Pid != runtimeapi.NamespaceMode_POD {
					t.Errorf("pid namespace %v", c.Linux.SecurityContext.NamespaceOptions.Pid)
				}
			},
		},
		{
			name: "no ports, no security context",
			pod: func(p *corev1.Pod) {
				p.Spec.Containers = []corev1.Container{{Name: "app"}}
				p.Spec.SecurityContext = nil
			},
			check: func(t *testing.T, c *runtimeapi.PodSandboxConfig) {
				if c.PortMappings != nil || len(c.Linux.Sysctls) != 0 || c.Linux.SecurityContext.NamespaceOptions == nil {
					t.Errorf("ports %v, sysctls %v, namespaces %v", c.PortMappings, c.Linux.Sysctls, c.Linux.SecurityContext.NamespaceOptions)
				}
			},
		},
		{
			name: "too long FQDN",
			pod: func(p *corev1.Pod) {
				p.Spec.SetHostnameAsFQDN = ptr.To(true)
				p.Spec.Hostname = strings.Repeat("h", 50)
			},
			err: "FQDN",
		},
		{
			name: "invalid subdomain",
			pod:  func(p *corev1.Pod) { p.Spec.Subdomain = "a_b" },
			err:  "spec.subdomain",
		},
		{
			name: "user namespace unavailable",
			pod:  func(p *corev1.Pod) { p.Spec.HostUsers = ptr.To(false) },
			err:  "spec.hostUsers",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := sandboxTestPod()
			tt.pod(pod)
			node := testNode()
			node.DNS.ClusterDomain = "cluster.local"
			got, err := sandboxConfig(pod, node, sandboxParams{})
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

func TestPodLogDir(t *testing.T) {
	if got := podLogDir("/var/log/pods", "ns", "name", "uid"); got != "/var/log/pods/ns_name_uid" {
		t.Errorf("podLogDir = %q", got)
	}
}
