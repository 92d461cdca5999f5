// Package probe runs container probes (liveness, readiness, startup) and
// lifecycle hooks (postStart, preStop) for the process provider, with the
// semantics the kubelet gives them: httpGet, tcpSocket, grpc and exec probe
// handlers, success and failure thresholds, initial delay and period, and
// exec, httpGet and sleep hook handlers.
//
// It owns the probe schedule of one container probe (Worker) and single probe
// or hook attempts (Once, RunHandler). It never starts, stops or restarts
// containers, never writes pod status and never records events: it reports
// results to its caller, the provider, which decides what they mean for the
// pod. Commands run in a container only through the Execer it is given.
package probe
