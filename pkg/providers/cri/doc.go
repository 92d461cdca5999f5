// Package cri is the CRI provider: it runs pods through any CRI v1 container
// runtime (containerd in the tests).
//
// It translates Kubernetes pod objects into CRI requests the way the kubelet
// does: the labels and annotations that let a restarted agent find its
// sandboxes and containers again (labels.go), the pod's DNS configuration
// (dns.go), its hostname (hostname.go) and /etc/hosts file (hosts.go), the
// sandbox and container configurations (sandboxconfig.go, container.go,
// with their resources in resources.go and security contexts in
// security.go), image references and pull policy (imageref.go), pulls with
// their back-off (imagepull.go), image volumes (imagevolume.go), registry
// credentials from image pull secrets (pullsecrets.go) and the garbage
// collection of unused images (imagegc.go). Over the runtime (runtime.go, through connection.go), a
// pod's sandbox as the pod lifecycle sees it — its containers' states, and
// starting and stopping them — is sandbox.go; the provider itself, the
// node's description and its loops are provider.go.
//
// The package owns the sandboxes and containers labelled with its node's
// name (nodelet.io/node) in the runtime it is given, their log directories
// and the per-pod files it writes (the managed /etc/hosts). It never touches
// runtime objects that carry another node's label or none, and never writes
// to the Kubernetes API.
package cri
