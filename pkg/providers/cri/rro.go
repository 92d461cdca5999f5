package cri

import (
	corev1 "k8s.io/api/core/v1"
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

// RecursiveReadOnlyHandler names the handler that runs pod and tells
// whether it makes mounts read-only recursively (lifecycle's
// RecursiveReadOnlyMounts, which the containers' statuses report).
func (r *criRuntime) RecursiveReadOnlyHandler(pod *corev1.Pod) (string, bool) {
	h := r.handlerOf(pod)
	return h.name, h.recursiveReadOnlyMounts
}
