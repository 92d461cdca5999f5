// Package csiattacher holds nothing but this comment: the module around it
// exists to build the CSI external-attacher sidecar
// (github.com/kubernetes-csi/external-attacher/v4/cmd/csi-attacher) from the
// Go module proxy for the end-to-end tests.
//
// The attacher's go.mod replaces the Kubernetes staging modules, so
// "go install ...@version" refuses it. This module requires it through a
// tool directive and repeats those replace directives; build it with
//
//	cd hack/csi-attacher && go build -o ../../bin/csi-attacher github.com/kubernetes-csi/external-attacher/v4/cmd/csi-attacher
//
// or "make bin/csi-attacher" at the top of the tree. To move to another
// release, run "go get -tool github.com/kubernetes-csi/external-attacher/v4/cmd/csi-attacher@vX.Y.Z"
// here and copy the replace directives of that release's go.mod.
package csiattacher
