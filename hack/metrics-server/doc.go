// Package metricsserver holds nothing but this comment: the module around it
// exists to build metrics-server (sigs.k8s.io/metrics-server/cmd/metrics-server)
// from the Go module proxy. "bin/controlplane up --metrics-server" runs it
// and registers it as the v1beta1.metrics.k8s.io APIService, so that
// kubectl top works against nodes that serve /metrics/resource.
//
// The release is pinned by the tool directive in go.mod; build it with
//
//	cd hack/metrics-server && CGO_ENABLED=0 go build -o ../../bin/metrics-server sigs.k8s.io/metrics-server/cmd/metrics-server
//
// or "make bin/metrics-server" at the top of the tree. metrics-server's own
// go.mod has no replace directives, so none are repeated here. To move to
// another release, run "go get -tool sigs.k8s.io/metrics-server/cmd/metrics-server@vX.Y.Z"
// here; keep its k8s.io modules on the control plane's minor version.
package metricsserver
