package cri

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/lifecycle"
)

// handlerFeatures is what a runtime handler supports, as the runtime's
// status says (the node status's runtimeHandlers).
type handlerFeatures struct {
	// name is the handler's name, "" for the runtime's default.
	name                    string
	recursiveReadOnlyMounts bool
}

// setHandlers keeps the runtime's handlers, whose features decide how the
// containers' mounts are made.
func (r *criRuntime) setHandlers(handlers []corev1.NodeRuntimeHandler) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.handlers = handlers
}

// handlerOf returns the features of the handler that runs pod: its
// RuntimeClass's, else the runtime's default.
func (r *criRuntime) handlerOf(pod *corev1.Pod) handlerFeatures {
	name := ""
	if rc := pod.Spec.RuntimeClassName; rc != nil && *rc != "" {
		h, err := r.handler(*rc)
		if err != nil {
			return handlerFeatures{name: *rc}
		}
		name = h
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, h := range r.handlers {
		if h.Name == name {
			f := handlerFeatures{name: name}
			if h.Features != nil && h.Features.RecursiveReadOnlyMounts != nil {
				f.recursiveReadOnlyMounts = *h.Features.RecursiveReadOnlyMounts
			}
			return f
		}
	}
	return handlerFeatures{name: name}
}

// recursiveReadOnly decides, as the kubelet does, whether a mount is made
// read-only recursively (the mounts below its source too): never unless
// its recursiveReadOnly asks; IfPossible where the handler supports it;
// Enabled where it does, and otherwise the container cannot be created,
// nor when the mount is not read-only or propagates mounts.
func recursiveReadOnly(m lifecycle.Mount, h handlerFeatures) (bool, error) {
	switch m.RecursiveReadOnly {
	case "", corev1.RecursiveReadOnlyDisabled:
		return false, nil
	case corev1.RecursiveReadOnlyIfPossible:
		return h.recursiveReadOnlyMounts && m.ReadOnly && noPropagation(m), nil
	case corev1.RecursiveReadOnlyEnabled:
		switch {
		case !m.ReadOnly:
			return false, fmt.Errorf("volume mount at %s: recursiveReadOnly Enabled needs readOnly", m.Destination)
		case !noPropagation(m):
			return false, fmt.Errorf("volume mount at %s: recursiveReadOnly Enabled needs mountPropagation None, not %s", m.Destination, m.Propagation)
		case !h.recursiveReadOnlyMounts:
			return false, fmt.Errorf("volume mount at %s: recursiveReadOnly Enabled, but the runtime handler %q does not support recursive read-only mounts", m.Destination, h.name)
		}
		return true, nil
	}
	return false, fmt.Errorf("volume mount at %s: unknown recursiveReadOnly %q", m.Destination, m.RecursiveReadOnly)
}

func noPropagation(m lifecycle.Mount) bool {
	return m.Propagation == "" || m.Propagation == corev1.MountPropagationNone
}
