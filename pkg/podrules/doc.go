// Package podrules holds the kubelet's rules about a pod's spec that every
// loop and every provider applies alike, each in one place: admission (OS,
// sysctls, resources) and a pod's effective requests, its QoS class, which
// init containers are sidecars, the crash-loop back-off before a restart,
// the grace period of a deleted pod or a killed container, static and
// mirror pod identity, container field paths for messages, whether a
// pod's reported status shows it ever started, and a pod's phase and its
// five standard conditions from its containers' states.
//
// Its functions are pure: they decide and never act. It imports only the
// k8s.io API packages and never another nodelet package, the provider
// contract included: an admission refusal is a Refusal, which a provider
// turns into the contract's error (provider.Reject).
package podrules
