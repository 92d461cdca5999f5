//go:build tools

// Package tools pins what make conformance builds from k8s.io/kubernetes:
// the e2e test binary, the ginkgo runner it is built against, and
// kube-proxy.
package tools

import (
	_ "github.com/onsi/ginkgo/v2/ginkgo"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/test/e2e"
)
