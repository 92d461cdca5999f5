// Package crienv starts and stops a private containerd for the tests of the
// cri provider: one per test binary (or per test), with its own root, state
// directory, sockets, CNI configuration, bridge and pod subnet, registry
// mirror configuration and log, so that two test binaries can run at once
// and neither touches a containerd the host runs.
//
// It owns everything under the directory it creates, the bridge it names
// (nlbr<slot>), the pod subnet and the CNI network (nodelet-crienv-<slot>)
// of its slot, and the processes of its containerd: the daemon, the shims
// it starts and their containers. It must never touch anything else: no
// host containerd, no other slot's bridge, no process it did not start.
//
// The binaries come from the Makefile: bin/containerd and
// bin/containerd-shim-runc-v2 (make bin/containerd bin/containerd-shim-runc-v2),
// runc and the CNI plugins from Debian's packages (make cri-deps). Without
// them, or without root, Start returns an error wrapping ErrUnavailable,
// which tests turn into t.Skip.
package crienv
