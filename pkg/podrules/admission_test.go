package podrules

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestPodRequests(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	c := func(name, cpu string) corev1.Container {
		return corev1.Container{Name: name, Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}}
	}
	sidecar := func(name, cpu string) corev1.Container {
		s := c(name, cpu)
		s.RestartPolicy = &always
		return s
	}
	tests := []struct {
		name string
		spec corev1.PodSpec
		want int64
	}{
		{"containers sum", corev1.PodSpec{Containers: []corev1.Container{c("a", "1"), c("b", "500m")}}, 1500},
		{"init smaller", corev1.PodSpec{InitContainers: []corev1.Container{c("i", "1")}, Containers: []corev1.Container{c("a", "2")}}, 2000},
		{"init larger", corev1.PodSpec{InitContainers: []corev1.Container{c("i", "3")}, Containers: []corev1.Container{c("a", "2")}}, 3000},
		{"sidecar adds", corev1.PodSpec{InitContainers: []corev1.Container{sidecar("s", "1")}, Containers: []corev1.Container{c("a", "2")}}, 3000},
		{"init after sidecar", corev1.PodSpec{InitContainers: []corev1.Container{sidecar("s", "1"), c("i", "4")}, Containers: []corev1.Container{c("a", "2")}}, 5000},
		{"overhead", corev1.PodSpec{Containers: []corev1.Container{c("a", "1")}, Overhead: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")}}, 1250},
		{"pod level", corev1.PodSpec{Containers: []corev1.Container{c("a", "1")}, Resources: &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")}}}, 3000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := PodRequests(&corev1.Pod{Spec: tt.spec}).MilliCPU; got != tt.want {
				t.Errorf("cpu request = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestAdmitOS(t *testing.T) {
	for _, tt := range []struct {
		os   *corev1.PodOS
		want string
	}{
		{nil, ""},
		{&corev1.PodOS{Name: corev1.Linux}, ""},
		{&corev1.PodOS{Name: corev1.Windows}, "PodOSNotSupported"},
	} {
		r := AdmitOS(&corev1.Pod{Spec: corev1.PodSpec{OS: tt.os}})
		switch {
		case tt.want == "" && r != nil:
			t.Errorf("os %v: %+v, want admitted", tt.os, r)
		case tt.want != "" && (r == nil || r.Reason != tt.want):
			t.Errorf("os %v: %+v, want a %s refusal", tt.os, r, tt.want)
		}
	}
}

// A pod asking for an AppArmor profile is refused where the node cannot
// enforce one, with the kubelet's reason and message (the node e2e suite's
// "when running without AppArmor should reject a pod"); unconfined is no
// profile.
func TestAdmitAppArmor(t *testing.T) {
	runtimeDefault := &corev1.SecurityContext{AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeRuntimeDefault}}
	unconfined := &corev1.SecurityContext{AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}}
	for _, tc := range []struct {
		name     string
		pod      *corev1.Pod
		enforced bool
		refused  bool
	}{
		{"no profile", &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}, false, false},
		{"field, not enforced", &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", SecurityContext: runtimeDefault}}}}, false, true},
		{"field, enforced", &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", SecurityContext: runtimeDefault}}}}, true, false},
		{"unconfined", &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", SecurityContext: unconfined}}}}, false, false},
		{"pod level", &corev1.Pod{Spec: corev1.PodSpec{SecurityContext: &corev1.PodSecurityContext{AppArmorProfile: runtimeDefault.AppArmorProfile}}}, false, true},
		{"annotation", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
			corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix + "c": corev1.DeprecatedAppArmorBetaProfileRuntimeDefault}}}, false, true},
		{"ephemeral container", &corev1.Pod{Spec: corev1.PodSpec{EphemeralContainers: []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
			Name: "debug", SecurityContext: runtimeDefault}}}}}, false, true},
		{"annotation unconfined", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
			corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix + "c": corev1.DeprecatedAppArmorBetaProfileNameUnconfined}}}, false, false},
	} {
		r := AdmitAppArmor(tc.pod, tc.enforced)
		if (r != nil) != tc.refused {
			t.Errorf("%s: refusal %v, want refused %v", tc.name, r, tc.refused)
		}
		if r != nil && (r.Reason != "AppArmor" || !strings.Contains(r.Message, "AppArmor is not enabled on the host")) {
			t.Errorf("%s: %+v", tc.name, r)
		}
	}
}
