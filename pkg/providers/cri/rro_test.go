package cri

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

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
