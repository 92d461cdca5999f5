// Package clusteraddons runs the add-ons that make a local single-node
// cluster serve Services, as a cluster's own would: CoreDNS as a host
// process on the node's address behind the kube-dns Service (DNSServiceIP,
// with a hand-made EndpointSlice), and kube-proxy in iptables mode for the
// node. make run (through hack/addonsup), make conformance
// (hack/conformance) and the end-to-end tests start them here.
//
// It owns the two processes, their files in Options.Dir, the kube-dns
// Service and its EndpointSlice, and kube-proxy's iptables rules, which go
// with kube-proxy --cleanup when the add-ons stop (Cleanup does it for a
// set that was killed). It must never touch the node agent, the control
// plane or the container runtime. kube-proxy's chains are the host's, so
// one set of add-ons runs on a host at a time: Start holds a host-wide
// lock until Stop.
//
// The binaries come from the Makefile: bin/coredns (hack/coredns) and
// bin/kube-proxy (hack/e2e); kube-proxy needs Debian's iptables.
package clusteraddons
