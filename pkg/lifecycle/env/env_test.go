package env

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
)

func ptr[T any](v T) *T { return &v }

func objects() []runtime.Object {
	return []runtime.Object{
		&corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "kubernetes"},
			Spec: corev1.ServiceSpec{ClusterIP: "10.0.0.1", Ports: []corev1.ServicePort{
				{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP},
			}},
		},
		&corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "other"},
			Spec:       corev1.ServiceSpec{ClusterIP: "10.0.0.9", Ports: []corev1.ServicePort{{Port: 1}}},
		},
		&corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "my-db"},
			Spec: corev1.ServiceSpec{ClusterIP: "10.0.0.5", Ports: []corev1.ServicePort{
				{Port: 5432},
				{Name: "metrics-port", Port: 9187, Protocol: corev1.ProtocolUDP},
			}},
		},
		&corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "headless"},
			Spec:       corev1.ServiceSpec{ClusterIP: "None", Ports: []corev1.ServicePort{{Port: 80}}},
		},
		&corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "v6"},
			Spec:       corev1.ServiceSpec{ClusterIP: "fd00::7", Ports: []corev1.ServicePort{{Port: 80}}},
		},
		&corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "cfg"},
			Data:       map[string]string{"B": "2", "A": "1", "bad=key": "x", "log.level": "debug"},
		},
		&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "sec"},
			Data:       map[string][]byte{"PASSWORD": []byte("hunter2")},
		},
	}
}

func testPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "app", Name: "web", UID: "uid-1",
			Labels:      map[string]string{"tier": "front"},
			Annotations: map[string]string{"note": "hi"},
		},
		Spec: corev1.PodSpec{
			NodeName:           "node-a",
			ServiceAccountName: "sa",
			EnableServiceLinks: ptr(false),
			Containers: []corev1.Container{
				{Name: "main"},
				{Name: "side", Resources: corev1.ResourceRequirements{
					Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
				}},
			},
		},
	}
}

var node = NodeInfo{
	NodeName: "node-a",
	HostIP:   "192.168.1.10",
	Allocatable: corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("2"),
		corev1.ResourceMemory: resource.MustParse("1Gi"),
	},
}

const kubernetesVars = "KUBERNETES_SERVICE_HOST=10.0.0.1 KUBERNETES_SERVICE_PORT=443 KUBERNETES_SERVICE_PORT_HTTPS=443 " +
	"KUBERNETES_PORT=tcp://10.0.0.1:443 KUBERNETES_PORT_443_TCP=tcp://10.0.0.1:443 KUBERNETES_PORT_443_TCP_PROTO=tcp " +
	"KUBERNETES_PORT_443_TCP_PORT=443 KUBERNETES_PORT_443_TCP_ADDR=10.0.0.1"

func TestEnvironment(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(p *corev1.Pod, c *corev1.Container)
		want    string // space separated; empty means: check wantErr
		wantErr string
	}{
		{
			name: "service links disabled still give kubernetes",
			want: kubernetesVars,
		},
		{
			name: "service links enabled",
			mutate: func(p *corev1.Pod, c *corev1.Container) {
				p.Spec.EnableServiceLinks = nil
			},
			want: kubernetesVars + " MY_DB_SERVICE_HOST=10.0.0.5 MY_DB_SERVICE_PORT=5432 MY_DB_SERVICE_PORT_METRICS_PORT=9187" +
				" MY_DB_PORT=tcp://10.0.0.5:5432 MY_DB_PORT_5432_TCP=tcp://10.0.0.5:5432 MY_DB_PORT_5432_TCP_PROTO=tcp" +
				" MY_DB_PORT_5432_TCP_PORT=5432 MY_DB_PORT_5432_TCP_ADDR=10.0.0.5" +
				" MY_DB_PORT_9187_UDP=udp://10.0.0.5:9187 MY_DB_PORT_9187_UDP_PROTO=udp MY_DB_PORT_9187_UDP_PORT=9187 MY_DB_PORT_9187_UDP_ADDR=10.0.0.5" +
				" V6_SERVICE_HOST=fd00::7 V6_SERVICE_PORT=80 V6_PORT=tcp://[fd00::7]:80 V6_PORT_80_TCP=tcp://[fd00::7]:80" +
				" V6_PORT_80_TCP_PROTO=tcp V6_PORT_80_TCP_PORT=80 V6_PORT_80_TCP_ADDR=fd00::7",
		},
		{
			name: "envFrom with prefix, invalid keys skipped, env overrides and expands",
			mutate: func(p *corev1.Pod, c *corev1.Container) {
				c.EnvFrom = []corev1.EnvFromSource{
					{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}, Prefix: "CFG_"},
					{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "sec"}}},
					{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "gone"}, Optional: ptr(true)}},
				}
				c.Env = []corev1.EnvVar{
					{Name: "CFG_A", Value: "one"},
					{Name: "URL", Value: "https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)/$(CFG_B)/$(NOPE)/$$(CFG_B)/$(CFG_A)"},
					{Name: "EMPTY"},
				}
			},
			want: kubernetesVars + " CFG_B=2 CFG_log.level=debug PASSWORD=hunter2 CFG_A=one" +
				" URL=https://10.0.0.1:443/2/$(NOPE)/$(CFG_B)/one EMPTY=",
		},
		{
			name: "valueFrom sources",
			mutate: func(p *corev1.Pod, c *corev1.Container) {
				c.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")}
				c.Env = []corev1.EnvVar{
					{Name: "NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
					{Name: "NS", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
					{Name: "UID", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.uid"}}},
					{Name: "TIER", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['tier']"}}},
					{Name: "NOTE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['note']"}}},
					{Name: "NODE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
					{Name: "SA", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.serviceAccountName"}}},
					{Name: "HOST_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.hostIP"}}},
					{Name: "POD_IPS", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIPs"}}},
					{Name: "CPU_REQ_M", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "requests.cpu", Divisor: resource.MustParse("1m")}}},
					{Name: "CPU_REQ", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "requests.cpu"}}},
					{Name: "CPU_LIM", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.cpu"}}},
					{Name: "MEM_LIM_MI", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.memory", Divisor: resource.MustParse("1Mi")}}},
					{Name: "SIDE_MEM", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{ContainerName: "side", Resource: "limits.memory", Divisor: resource.MustParse("1Mi")}}},
					{Name: "MEM_REQ", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "requests.memory"}}},
					{Name: "B", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Key: "B"}}},
					{Name: "PW", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "sec"}, Key: "PASSWORD"}}},
					{Name: "OPT1", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Key: "nope", Optional: ptr(true)}}},
					{Name: "OPT2", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "gone"}, Key: "k", Optional: ptr(true)}}},
					{Name: "REF", Value: "$(NAME).$(NS)=$(B)"},
				}
			},
			want: kubernetesVars + " NAME=web NS=app UID=uid-1 TIER=front NOTE=hi NODE=node-a SA=sa HOST_IP=192.168.1.10" +
				" POD_IPS=192.168.1.10 CPU_REQ_M=250 CPU_REQ=1 CPU_LIM=2 MEM_LIM_MI=1024 SIDE_MEM=64 MEM_REQ=0 B=2 PW=hunter2 REF=web.app=2",
		},
		{
			name: "missing configmap key",
			mutate: func(p *corev1.Pod, c *corev1.Container) {
				c.Env = []corev1.EnvVar{{Name: "FOO", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Key: "bar"}}}}
			},
			wantErr: `env FOO: configmap app/cfg has no key "bar"`,
		},
		{
			name: "missing secret",
			mutate: func(p *corev1.Pod, c *corev1.Container) {
				c.Env = []corev1.EnvVar{{Name: "FOO", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "gone"}, Key: "bar"}}}}
			},
			wantErr: `env FOO: secret app/gone: secrets "gone" not found`,
		},
		{
			name: "missing envFrom configmap",
			mutate: func(p *corev1.Pod, c *corev1.Container) {
				c.EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "gone"}}}}
			},
			wantErr: `envFrom: configmap app/gone: configmaps "gone" not found`,
		},
		{
			name: "unsupported field",
			mutate: func(p *corev1.Pod, c *corev1.Container) {
				c.Env = []corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.schedulerName"}}}}
			},
			wantErr: `env X: fieldRef: unsupported field path "spec.schedulerName"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewGetter(fake.NewClientset(objects()...))
			pod := testPod()
			c := &pod.Spec.Containers[0]
			if tt.mutate != nil {
				tt.mutate(pod, c)
			}
			got, err := Environment(context.Background(), g, pod, c, node)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(got, " ") != tt.want {
				t.Errorf("environment\n got: %s\nwant: %s", strings.Join(got, " "), tt.want)
			}
		})
	}
}

func TestExpand(t *testing.T) {
	vars := map[string]string{"A": "a", "B": "b$(A)", "": "empty"}
	for in, want := range map[string]string{
		"plain":       "plain",
		"$(A)":        "a",
		"x$(A)y$(B)z": "xayb$(A)z",
		"$$(A)":       "$(A)",
		"$$$(A)":      "$a",
		"$(C)":        "$(C)",
		"$()":         "$()",
		"$(A":         "$(A",
		"$A":          "$A",
		"end$":        "end$",
		"$$":          "$",
	} {
		if got, err := Expand(in, MapLookup(vars)); err != nil || got != want {
			t.Errorf("Expand(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

func TestMetadataFieldMaps(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"b": "2", "a": `say "hi"`}}}
	got, err := MetadataField(pod, "metadata.labels")
	if err != nil {
		t.Fatal(err)
	}
	if want := "a=\"say \\\"hi\\\"\"\nb=\"2\""; got != want {
		t.Errorf("labels = %q, want %q", got, want)
	}
}

// A pod with IPs of its own (its sandbox's network) reports them as
// status.podIP(s); status.hostIP stays the node's.
func TestPodIPsOfTheSandbox(t *testing.T) {
	pod := testPod()
	c := &pod.Spec.Containers[0]
	c.Env = []corev1.EnvVar{
		{Name: "HOST_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.hostIP"}}},
		{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
		{Name: "POD_IPS", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIPs"}}},
	}
	withIPs := node
	withIPs.PodIPs = []string{"10.213.0.7", "fd00::7"}
	got, err := Environment(context.Background(), NewGetter(fake.NewClientset(objects()...)), pod, c, withIPs)
	if err != nil {
		t.Fatal(err)
	}
	want := kubernetesVars + " HOST_IP=192.168.1.10 POD_IP=10.213.0.7 POD_IPS=10.213.0.7,fd00::7"
	if strings.Join(got, " ") != want {
		t.Errorf("environment\n got: %s\nwant: %s", strings.Join(got, " "), want)
	}
}

// The service cache keeps no managedFields.
func TestServiceCacheTrimsManagedFields(t *testing.T) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "s",
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}}}}
	services, err := NewGetter(fake.NewClientset(svc)).Services(context.Background(), "app")
	if err != nil {
		t.Fatal(err)
	}
	if len(services) != 1 || services[0].ManagedFields != nil {
		t.Errorf("services %+v, want s without managedFields", services)
	}
}
