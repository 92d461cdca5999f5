// Package virtualkubelet runs a provider written for virtual-kubelet on
// nodelet unchanged. New wraps virtual-kubelet's own interface types
// (node.PodLifecycleHandler, node.PodNotifier, nodeutil.Provider and
// node.NodeProvider of github.com/virtual-kubelet/virtual-kubelet, pinned)
// into nodelet's provider contract (package
// github.com/nodelet/nodelet/pkg/provider).
//
// This package owns the translation between the two contracts and nothing
// else: it runs no loop, never talks to the API server, and starts no
// goroutine beyond the terminal-size relay of an exec or attach session,
// which ends with the session.
//
// # Why a module of its own, and why virtual-kubelet v1.13.0
//
// nodeutil.Provider lives in virtual-kubelet's nodeutil package, which
// imports k8s.io/apiserver, opencensus, logrus, gorilla/mux and more; nodelet's
// own module must not carry them, so this package is the nested module
// github.com/nodelet/nodelet/adapter/virtualkubelet. virtual-kubelet is
// pinned at v1.13.0, which requires k8s.io/* v0.35.4, so the module graph
// keeps nodelet's v0.36.3 (Kubernetes 1.36, the control plane's minor);
// v1.14.1, the newest, requires k8s.io/* v0.37.
//
// # Capabilities
//
// nodelet finds a provider's optional capabilities by type assertion, and
// never polls a provider.PodNotifier. So the value New returns implements
// exactly what the wrapped provider offers, through one small type per
// combination:
//
//   - always: provider.PodLifecycleHandler, provider.NodeProvider and
//     provider.NodeNotifier (every virtual-kubelet NodeProvider has
//     NotifyNodeStatus; without one, as virtual-kubelet's NaiveNodeProvider,
//     nothing is ever notified);
//   - provider.PodNotifier when the pod handler is a node.PodNotifier;
//   - provider.LogsProvider, ExecProvider, AttachProvider,
//     PortForwardProvider, StatsProvider and NodeStatsProvider when it is a
//     nodeutil.Provider;
//   - never provider.PodRestorer, which virtual-kubelet has no counterpart
//     of: a lost pod is recreated or failed by its restart policy.
//
// # Where the contracts differ, and what the adapter does
//
// Pods:
//   - GetPod: nodelet's returns the pod with its current status;
//     virtual-kubelet's may be cached, and its GetPodStatus is what its own
//     poll reads. The adapter calls both and returns virtual-kubelet's pod
//     (metadata and spec shared, as nodelet allows) with a copy of the
//     status GetPodStatus gave (the pod's own when that is nil). A GetPod
//     therefore costs the provider two calls.
//   - Not found: errdefs.IsNotFound errors (also when wrapped with %w),
//     Kubernetes NotFound status errors, provider.ErrNotFound itself, and
//     from GetPod a nil pod with a nil error (which virtual-kubelet also
//     takes for not found) reach nodelet wrapping provider.ErrNotFound, from
//     GetPod, GetPodStatus, UpdatePod, logs, exec, attach and port-forward.
//   - DeletePod: virtual-kubelet's may be called again for the same pod and
//     treats a NotFound answer as done; the adapter returns nil for it, since
//     nodelet retries a failing DeletePod. Both contracts then want one
//     final notification with the terminated pod from a notifier. They
//     differ in how the deletion ends: virtual-kubelet deletes the pod from
//     the API once its grace period has passed (or at once when nothing
//     runs), whatever the provider still reports; nodelet does so only once
//     GetPod reports provider.ErrNotFound. For a provider that keeps a
//     deleted pod once it has terminated (phase Succeeded or Failed, or
//     every container terminated), the adapter reports that pod as not
//     found from GetPod and leaves it out of GetPods, until the provider
//     drops the pod or a pod of another UID takes its name. A provider that
//     keeps reporting a deleted pod as running leaves it Terminating in the
//     API, where virtual-kubelet would delete it after the grace period.
//   - CreatePod, UpdatePod and DeletePod hand the provider a copy of the
//     pod, as virtual-kubelet does: its providers may change the pods they
//     get (its mock writes the final status into DeletePod's), where nodelet
//     reads its own again after the call.
//   - Polled providers (no node.PodNotifier): virtual-kubelet polls
//     GetPodStatus every 5 s and, after a DeletePod, writes a Succeeded
//     status of its own making; nodelet polls GetPod at its status poll
//     interval and writes no such status: the pod keeps the last status
//     polled until it is deleted from the API.
//   - GetPods returns the pods as virtual-kubelet's GetPods gives them (as
//     virtual-kubelet serves them on /pods), without a GetPodStatus each.
//   - CreatePod errors: virtual-kubelet writes a ProviderFailed status
//     (Failed under restartPolicy Never) and retries; nodelet retries with
//     back-off and Events. Errors pass through unchanged; a provider that
//     wants a pod failed for good can return a *provider.Rejection.
//   - virtual-kubelet resolves environment variables from ConfigMaps,
//     Secrets and the downward API before CreatePod; nodelet passes the pod
//     as the API holds it. nodelet calls UpdatePod when the provider's pod
//     differs from the API's in spec, labels or annotations, where
//     virtual-kubelet compares only the fields the API lets change.
//
// Node:
//   - ConfigureNode: when the pod handler, or else the NodeProvider, has a
//     method ConfigureNode(context.Context, *corev1.Node) (the convention of
//     virtual-kubelet's mock and of many out-of-tree providers, which
//     virtual-kubelet's command calls once before registering), the adapter
//     calls it first, on every status report, with a non-nil Labels map.
//     Then the last node the NodeProvider pushed through NotifyNodeStatus,
//     if any, gives the whole status and adds its labels, as
//     virtual-kubelet's node controller takes them (it also takes the
//     pushed annotations; nodelet's contract has no place for them).
//   - Without a NodeProvider, virtual-kubelet's nodeutil marks the node
//     Ready once it runs; the adapter drops the provider's Ready condition,
//     so that nodelet's own (True while pings succeed) stands. With one, the
//     provider's Ready stands, as nodelet's contract says.
//   - NotifyNodeStatus keeps a copy of each pushed node and asks nodelet to
//     report the status; Ping calls the NodeProvider's (without one,
//     NaiveNodeProvider's: an error only when ctx has ended).
//
// Streaming and stats (nodeutil.Provider):
//   - Logs: nodelet's provider.ContainerLogOpts becomes virtual-kubelet's
//     api.ContainerLogOpts field for field (Tail 0 means every line in
//     both).
//   - Exec and attach: nodelet's provider.AttachIO is handed over as an
//     api.AttachIO whose streams are nodelet's; terminal size changes are
//     relayed to a channel of api.TermSize by one goroutine, which closes it
//     and ends when nodelet's channel closes or the call returns.
//   - Stats: one GetStatsSummary call answers PodStats (its Pods) and another
//     NodeStats (its Node), so nodelet takes a virtual node's figures from
//     the provider, not from the host; a summary costs the provider two
//     calls.
//   - GetMetricsResource has no nodelet counterpart yet and is left unused:
//     nodelet builds /metrics/resource from the stats.
package virtualkubelet
