// Package attachdetach owns attach/detach for the nodes nodelet manages: the
// desired state of world (which volumes the pods bound to those nodes need,
// and on which node), the actual state of world (which volumes are attached
// where, whether the node still mounts them, and which are reported as
// attached in node status), the reconciler that drives one towards the
// other, the operation executor that runs attach and detach calls with
// exponential backoff, and the attacher plugin interface.
//
// It never mounts anything and never writes a Node or a Pod itself: node
// status goes through a NodeStatusUpdater, mounts are the provider's, and
// attach/detach calls are a Plugin's. Everything here is in memory and safe
// for concurrent use; informers feed it through a Populator.
package attachdetach
