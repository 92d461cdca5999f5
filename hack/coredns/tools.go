//go:build tools

// Package tools pins the CoreDNS release that make conformance runs as the
// cluster's DNS server.
package tools

import _ "github.com/coredns/coredns"
