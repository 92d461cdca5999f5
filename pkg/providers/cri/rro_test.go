package cri

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/lifecycle"
)

func TestRecursiveReadOnly(t *testing.T) {
	supports := handlerFeatures{name: "", recursiveReadOnlyMounts: true}
	lacks := handlerFeatures{name: "old"}
	ro := func(mode corev1.RecursiveReadOnlyMode) lifecycle.Mount {
		return lifecycle.Mount{Destination: "/mnt", ReadOnly: true, RecursiveReadOnly: mode}
	}
	tests := []struct {
		name    string
		mount   lifecycle.Mount
		handler handlerFeatures
		want    bool
		wantErr string
	}{
		{"unset", ro(""), supports, false, ""},
		{"disabled", ro(corev1.RecursiveReadOnlyDisabled), supports, false, ""},
		{"if possible, supported", ro(corev1.RecursiveReadOnlyIfPossible), supports, true, ""},
		{"if possible, not supported", ro(corev1.RecursiveReadOnlyIfPossible), lacks, false, ""},
		{"enabled, supported", ro(corev1.RecursiveReadOnlyEnabled), supports, true, ""},
		{"enabled, explicitly no propagation", lifecycle.Mount{Destination: "/mnt", ReadOnly: true, RecursiveReadOnly: corev1.RecursiveReadOnlyEnabled,
			Propagation: corev1.MountPropagationNone}, supports, true, ""},
		{"enabled, not supported", ro(corev1.RecursiveReadOnlyEnabled), lacks, false, `runtime handler "old" does not support`},
		{"enabled, not read-only", lifecycle.Mount{Destination: "/mnt", RecursiveReadOnly: corev1.RecursiveReadOnlyEnabled}, supports, false, "needs readOnly"},
		{"enabled, propagating", lifecycle.Mount{Destination: "/mnt", ReadOnly: true, RecursiveReadOnly: corev1.RecursiveReadOnlyEnabled,
			Propagation: corev1.MountPropagationHostToContainer}, supports, false, "needs mountPropagation None"},
		{"unknown", ro("Sometimes"), supports, false, `unknown recursiveReadOnly "Sometimes"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := recursiveReadOnly(tt.mount, tt.handler)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "/mnt") {
					t.Fatalf("err = %v, want one naming the mount and saying %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("recursiveReadOnly = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

// The handler a pod runs on is its RuntimeClass's, else the runtime's
// default; its features are the runtime status's.
func TestHandlerOf(t *testing.T) {
	r := &criRuntime{handler: func(name string) (string, error) {
		if name == "gvisor" {
			return "runsc", nil
		}
		return "", errors.New("no such RuntimeClass")
	}}
	r.setHandlers([]corev1.NodeRuntimeHandler{
		{Name: "", Features: &corev1.NodeRuntimeHandlerFeatures{RecursiveReadOnlyMounts: ptr.To(true)}},
		{Name: "runsc", Features: &corev1.NodeRuntimeHandlerFeatures{RecursiveReadOnlyMounts: ptr.To(false)}},
	})
	pod := func(rc *string) *corev1.Pod { return &corev1.Pod{Spec: corev1.PodSpec{RuntimeClassName: rc}} }
	if h := r.handlerOf(pod(nil)); !h.recursiveReadOnlyMounts || h.name != "" {
		t.Errorf("default handler: %+v", h)
	}
	if h := r.handlerOf(pod(ptr.To("gvisor"))); h.recursiveReadOnlyMounts || h.name != "runsc" {
		t.Errorf("the RuntimeClass's handler: %+v", h)
	}
	if h := r.handlerOf(pod(ptr.To("missing"))); h.recursiveReadOnlyMounts {
		t.Errorf("an unknown RuntimeClass's handler supports recursive read-only mounts: %+v", h)
	}
}
