// Package karpenter holds nothing but this comment: the module around it
// exists to build Karpenter's kwok provider (sigs.k8s.io/karpenter/kwok, the
// autoscaler with a cloud provider that "launches" an instance by creating a
// Node annotated kwok.x-k8s.io/node=fake) from the Go module proxy. nodelet's
// sim provider takes those Nodes over; test/e2e's TestKarpenterDrivesNodelet
// runs the two together and docs/kwok.md has the recipe.
//
// The release is pinned by the tool directive in go.mod; build it with
//
//	cd hack/karpenter && CGO_ENABLED=0 go build -o ../../bin/karpenter-kwok sigs.k8s.io/karpenter/kwok
//
// or "make bin/karpenter-kwok" at the top of the tree. Karpenter's CRDs
// (NodePool, NodeClaim in kwok/charts/crds, KWOKNodeClass in
// kwok/apis/crds) are those of the same release, in the directory that
// "go list -m -f '{{.Dir}}' sigs.k8s.io/karpenter" prints here.
// Karpenter's go.mod has no replace directives, so none are repeated here.
// v1.14.1 is the newest release that builds with Go 1.26.8 (v1.14.3 and
// v1.15.0 ask for a newer Go); it is built against its own Kubernetes
// libraries (v0.35), which the control plane's v1.36 API serves. To move
// to another release, run "go get -tool sigs.k8s.io/karpenter/kwok@vX.Y.Z"
// here.
package karpenter
