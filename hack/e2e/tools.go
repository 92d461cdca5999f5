//go:build tools

// Package tools pins what make conformance and make node-conformance build
// from k8s.io/kubernetes: the e2e test binaries (test/e2e, and test/e2e_node
// for the node conformance test), the ginkgo runner they are built
// against, and kube-proxy.
package tools

import (
	_ "github.com/onsi/ginkgo/v2/ginkgo"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/test/e2e"
	_ "k8s.io/kubernetes/test/e2e_node"
)
