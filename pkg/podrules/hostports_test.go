package podrules

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestAdmitHostPorts(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	withPorts := func(ports ...corev1.ContainerPort) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Ports: ports}}}}
	}
	sidecarWith := func(p corev1.ContainerPort) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{InitContainers: []corev1.Container{{Name: "s", RestartPolicy: &always, Ports: []corev1.ContainerPort{p}}}}}
	}
	initWith := func(p corev1.ContainerPort) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{InitContainers: []corev1.Container{{Name: "i", Ports: []corev1.ContainerPort{p}}}}}
	}
	tcp := func(port int32, ip string) corev1.ContainerPort {
		return corev1.ContainerPort{ContainerPort: 80, HostPort: port, HostIP: ip, Protocol: corev1.ProtocolTCP}
	}
	udp := corev1.ContainerPort{ContainerPort: 80, HostPort: 8080, Protocol: corev1.ProtocolUDP}
	tests := []struct {
		name    string
		pod     *corev1.Pod
		running []*corev1.Pod
		refused bool
	}{
		{"no host port", withPorts(corev1.ContainerPort{ContainerPort: 80}), []*corev1.Pod{withPorts(tcp(8080, ""))}, false},
		{"same port, all addresses", withPorts(tcp(8080, "")), []*corev1.Pod{withPorts(tcp(8080, ""))}, true},
		{"protocol defaults to TCP", withPorts(corev1.ContainerPort{HostPort: 8080}), []*corev1.Pod{withPorts(tcp(8080, ""))}, true},
		{"0.0.0.0 is all addresses", withPorts(tcp(8080, "0.0.0.0")), []*corev1.Pod{withPorts(tcp(8080, "10.0.0.1"))}, true},
		{"one address against all", withPorts(tcp(8080, "10.0.0.1")), []*corev1.Pod{withPorts(tcp(8080, ""))}, true},
		{"two addresses", withPorts(tcp(8080, "10.0.0.1")), []*corev1.Pod{withPorts(tcp(8080, "10.0.0.2"))}, false},
		{"another protocol", withPorts(tcp(8080, "")), []*corev1.Pod{withPorts(udp)}, false},
		{"another port", withPorts(tcp(8080, "")), []*corev1.Pod{withPorts(tcp(8081, ""))}, false},
		{"a running sidecar's port", withPorts(tcp(8080, "")), []*corev1.Pod{sidecarWith(tcp(8080, ""))}, true},
		{"an init container's port is free again", withPorts(tcp(8080, "")), []*corev1.Pod{initWith(tcp(8080, ""))}, false},
		{"the second pod conflicts", withPorts(tcp(9090, ""), tcp(8080, "")), []*corev1.Pod{withPorts(tcp(1, "")), withPorts(tcp(8080, ""))}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := AdmitHostPorts(tt.pod, tt.running)
			if (r != nil) != tt.refused {
				t.Fatalf("AdmitHostPorts = %+v, want refused %v", r, tt.refused)
			}
			if r != nil && (r.Reason != "NodePorts" || r.Message != "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports") {
				t.Errorf("refusal %+v, want the kubelet's NodePorts reason and message", r)
			}
		})
	}
}
