package podrules

import corev1 "k8s.io/api/core/v1"

// The annotations by which pods that do not come from the API server
// (static pods, read from manifests on the node) and their mirror pods in
// the API are told apart, as the kubelet's.
const (
	// ConfigSourceAnnotation names where a pod came from: "file", "http",
	// or "api" (the default when absent).
	ConfigSourceAnnotation = "kubernetes.io/config.source"
	// ConfigHashAnnotation is a static pod's hash, derived from its
	// manifest and source; it is also the pod's UID.
	ConfigHashAnnotation = "kubernetes.io/config.hash"
	// ConfigSeenAnnotation is when the agent first saw the static pod
	// (RFC 3339 with nanoseconds).
	ConfigSeenAnnotation = "kubernetes.io/config.seen"
	// ConfigMirrorAnnotation marks a mirror pod, the API's read-only view
	// of a static pod; its value is the static pod's hash.
	ConfigMirrorAnnotation = "kubernetes.io/config.mirror"

	// APISource is the ConfigSourceAnnotation value of pods from the API.
	APISource = "api"
)

// IsStaticPod tells whether a pod a provider runs came from a static pod
// source rather than the API: the agent's pod controller never stops it.
func IsStaticPod(pod *corev1.Pod) bool {
	source, ok := pod.Annotations[ConfigSourceAnnotation]
	return ok && source != APISource
}

// IsMirrorPod tells whether an API pod mirrors a static pod: the agent
// writes its status but never runs it.
func IsMirrorPod(pod *corev1.Pod) bool {
	_, ok := pod.Annotations[ConfigMirrorAnnotation]
	return ok
}

// IsMirrorOf tells whether mirror is the mirror pod of the static pod
// static: it carries static's hash.
func IsMirrorOf(mirror, static *corev1.Pod) bool {
	return MirrorsHash(mirror, static.Annotations[ConfigHashAnnotation])
}

// MirrorsHash tells whether mirror is the mirror pod of the static pod
// whose config hash is hash.
func MirrorsHash(mirror *corev1.Pod, hash string) bool {
	h, ok := mirror.Annotations[ConfigMirrorAnnotation]
	return ok && h != "" && h == hash
}
