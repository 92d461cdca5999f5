package cri

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

func labelsTestPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "web", Namespace: "shop", UID: "uid-1",
			Labels:                     map[string]string{"app": "web", labelPodName: "spoofed"},
			Annotations:                map[string]string{"note": "x"},
			DeletionGracePeriodSeconds: ptr.To[int64](5),
		},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](30),
			InitContainers: []corev1.Container{
				{Name: "setup", Image: "busybox"},
				{Name: "proxy", Image: "envoy", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)},
			},
			Containers: []corev1.Container{{
				Name: "app", Image: "nginx:1.27",
				TerminationMessagePath:   "/dev/termination-log",
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
				Ports:                    []corev1.ContainerPort{{Name: "http", ContainerPort: 80, Protocol: corev1.ProtocolTCP}},
				Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
					HTTPGet: &corev1.HTTPGetAction{Path: "/quit", Port: intstr.FromInt32(80)},
				}},
			}},
			EphemeralContainers: []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug"}}},
		},
	}
}

func TestSandboxLabels(t *testing.T) {
	pod := labelsTestPod()
	got := sandboxLabels(pod, "node-a")
	want := map[string]string{
		"app":             "web",
		labelPodName:      "web",
		labelPodNamespace: "shop",
		labelPodUID:       "uid-1",
		labelNode:         "node-a",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("sandboxLabels (-want +got):\n%s", diff)
	}
	if pod.Labels[labelPodName] != "spoofed" {
		t.Error("sandboxLabels changed the pod's labels")
	}
	ref, err := podRefFromLabels(got)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(podRef{Namespace: "shop", Name: "web", UID: "uid-1", Node: "node-a"}, ref); diff != "" {
		t.Errorf("podRefFromLabels (-want +got):\n%s", diff)
	}
	a := sandboxAnnotations(pod)
	a["more"] = "y"
	if _, ok := pod.Annotations["more"]; ok {
		t.Error("sandboxAnnotations shares the pod's map")
	}
}

func TestPodRefFromLabelsMissing(t *testing.T) {
	tests := []struct {
		name   string
		labels map[string]string
		want   []string // substrings of the error
	}{
		{"nil", nil, []string{labelPodName, labelPodNamespace, labelPodUID, labelNode}},
		{"no node", map[string]string{labelPodName: "a", labelPodNamespace: "b", labelPodUID: "c"}, []string{labelNode}},
		{"empty uid", map[string]string{labelPodName: "a", labelPodNamespace: "b", labelPodUID: "", labelNode: "n"}, []string{labelPodUID}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := podRefFromLabels(tt.labels)
			if err == nil {
				t.Fatal("no error")
			}
			for _, s := range tt.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not name %s", err, s)
				}
			}
		})
	}
}

func TestContainerLabelsRoundTrip(t *testing.T) {
	pod := labelsTestPod()
	labels := containerLabels(pod, &pod.Spec.Containers[0], "node-a")
	if _, ok := labels["app"]; ok {
		t.Error("pod labels copied onto the container")
	}
	ref, err := containerRefFromLabels(labels)
	if err != nil {
		t.Fatal(err)
	}
	want := containerRef{Pod: podRef{Namespace: "shop", Name: "web", UID: "uid-1", Node: "node-a"}, Name: "app"}
	if diff := cmp.Diff(want, ref); diff != "" {
		t.Errorf("containerRefFromLabels (-want +got):\n%s", diff)
	}
	delete(labels, labelContainerName)
	delete(labels, labelNode)
	_, err = containerRefFromLabels(labels)
	if err == nil || !strings.Contains(err.Error(), labelContainerName) || !strings.Contains(err.Error(), labelNode) {
		t.Errorf("error %v does not name both missing labels", err)
	}
}

func TestContainerAnnotationsRoundTrip(t *testing.T) {
	pod := labelsTestPod()
	c := &pod.Spec.Containers[0]
	a, err := containerAnnotations(pod, c, 3, "/var/lib/nodelet/pods/uid-1/containers/app/abc")
	if err != nil {
		t.Fatal(err)
	}
	info, err := containerInfoFromAnnotations(a)
	if err != nil {
		t.Fatal(err)
	}
	want := containerInfo{
		Type:                     containerTypeRegular,
		Hash:                     containerHash(c),
		RestartCount:             3,
		SpecImage:                "nginx:1.27",
		TerminationMessagePath:   "/dev/termination-log",
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		TerminationMessageFile:   "/var/lib/nodelet/pods/uid-1/containers/app/abc",
		TerminationGracePeriod:   ptr.To[int64](30),
		DeletionGracePeriod:      ptr.To[int64](5),
		PreStop:                  c.Lifecycle.PreStop,
		Ports:                    c.Ports,
	}
	if diff := cmp.Diff(want, info); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}

	// A minimal container records no optional annotations.
	init := &pod.Spec.InitContainers[0]
	pod.Spec.TerminationGracePeriodSeconds, pod.DeletionGracePeriodSeconds = nil, nil
	a, err = containerAnnotations(pod, init, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{annotationTerminationMessageFile, annotationTerminationGracePeriod, annotationDeletionGracePeriod, annotationPreStopHandler, annotationContainerPorts} {
		if _, ok := a[key]; ok {
			t.Errorf("annotation %s set for a minimal container", key)
		}
	}
	if a[annotationContainerType] != string(containerTypeInit) {
		t.Errorf("type = %q, want init", a[annotationContainerType])
	}
}

func TestContainerInfoFromAnnotationsMalformed(t *testing.T) {
	tests := []struct {
		name  string
		a     map[string]string
		bad   []string
		check func(t *testing.T, info containerInfo)
	}{
		{
			name: "empty", a: nil,
			check: func(t *testing.T, info containerInfo) {
				if diff := cmp.Diff(containerInfo{}, info); diff != "" {
					t.Errorf("(-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "bad numbers",
			a: map[string]string{
				annotationRestartCount: "-1", annotationTerminationGracePeriod: "x", annotationDeletionGracePeriod: "7",
				annotationContainerHash: "abc",
			},
			bad: []string{annotationRestartCount, annotationTerminationGracePeriod},
			check: func(t *testing.T, info containerInfo) {
				if info.RestartCount != 0 || info.TerminationGracePeriod != nil {
					t.Errorf("malformed fields not left zero: %+v", info)
				}
				if info.Hash != "abc" || info.DeletionGracePeriod == nil || *info.DeletionGracePeriod != 7 {
					t.Errorf("good fields not read: %+v", info)
				}
			},
		},
		{
			name: "bad json",
			a:    map[string]string{annotationPreStopHandler: "{", annotationContainerPorts: "[1]"},
			bad:  []string{annotationPreStopHandler, annotationContainerPorts},
			check: func(t *testing.T, info containerInfo) {
				if info.PreStop != nil || info.Ports != nil {
					t.Errorf("malformed fields not left zero: %+v", info)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			info, err := containerInfoFromAnnotations(tt.a)
			if (err != nil) != (len(tt.bad) > 0) {
				t.Fatalf("err = %v, want error naming %v", err, tt.bad)
			}
			for _, key := range tt.bad {
				if !strings.Contains(err.Error(), key) {
					t.Errorf("error %q does not name %s", err, key)
				}
			}
			tt.check(t, info)
		})
	}
}

func TestContainerTypeOf(t *testing.T) {
	pod := labelsTestPod()
	tests := []struct {
		name string
		want containerType
		ok   bool
	}{
		{"setup", containerTypeInit, true},
		{"proxy", containerTypeSidecar, true},
		{"app", containerTypeRegular, true},
		{"debug", containerTypeEphemeral, true},
		{"nope", "", false},
	}
	for _, tt := range tests {
		got, ok := containerTypeOf(pod, tt.name)
		if got != tt.want || ok != tt.ok {
			t.Errorf("containerTypeOf(%q) = %q, %v; want %q, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}

func TestContainerHash(t *testing.T) {
	base := corev1.Container{Name: "app", Image: "nginx:1"}
	same := base
	same.Args = []string{"changed"}
	same.Resources.Limits = corev1.ResourceList{}
	if containerHash(&base) != containerHash(&same) {
		t.Error("hash depends on fields that do not need a restart")
	}
	for _, other := range []corev1.Container{{Name: "app", Image: "nginx:2"}, {Name: "app2", Image: "nginx:1"}, {Name: "ap", Image: "pnginx:1"}} {
		if containerHash(&base) == containerHash(&other) {
			t.Errorf("hash of %+v equals hash of %+v", other, base)
		}
	}
}

func TestSelectors(t *testing.T) {
	if diff := cmp.Diff(map[string]string{labelNode: "n"}, nodeSelector("n")); diff != "" {
		t.Error(diff)
	}
	if diff := cmp.Diff(map[string]string{labelNode: "n", labelPodUID: "u"}, podSelector("n", "u")); diff != "" {
		t.Error(diff)
	}
}
