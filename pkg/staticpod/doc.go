// Package staticpod runs the static pods of a node that runs pods on its
// host (the process and cri providers): pods read from a directory of
// manifests (the kubelet's staticPodPath) and from a URL (staticPodURL),
// not from the API server, and their mirror pods in the API.
//
// Each manifest is one pod (YAML or JSON; the URL may also serve a list).
// It is defaulted, validated and made the node's own as the kubelet does:
// named <name>-<nodeName>, bound to the node, tolerating NoExecute taints,
// annotated with its source (kubernetes.io/config.source), hash
// (config.hash) and the time it was first seen (config.seen), and given a
// UID that is its hash, derived from the content, the file or URL and the
// node. The same manifest is therefore the same pod on every run of the
// agent: a restarted agent finds it running and leaves it alone, while an
// edited manifest is a new pod that replaces the old one. A manifest that
// cannot be run is reported (logged and a Warning Event on the Node, naming
// the file) once for as long as it lasts, and never hides the others; a
// manifest that goes bad (caught half written, or edited into an invalid
// pod) leaves the pod it gave before running until it is fixed or removed.
//
// The Controller feeds the static pods straight into the node's pod
// lifecycle (a Runner: the provider's create, delete and get) from the
// moment it runs, whether or not the API server answers. Once the pod and
// node caches have synced it also keeps one mirror pod per static pod: the
// same pod with kubernetes.io/config.mirror set to the hash and the Node
// as its controlling owner, as NodeRestriction lets a node create it. A
// mirror pod deleted from the API, of an older version or of an earlier
// Node is deleted (grace 0) and created again; one whose static pod is gone
// is deleted. Deleting a mirror pod never stops its static pod.
//
// The status of a static pod reaches its mirror pod through the pod
// controller (package pod), which already writes every pod status: it
// recognises mirror pods and static pods by their annotations (helpers in
// package podrules), writes the static pod's status to the mirror pod of
// the same hash, and never runs a mirror pod or stops a static pod.
//
// This package writes only mirror pods and Events; it never touches other
// pods, the Node or the manifests.
package staticpod
