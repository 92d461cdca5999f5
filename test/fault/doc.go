// Package fault is the fault-injection harness of nodelet's reliability
// tests: the faults a node agent meets in a real cluster, made on demand.
//
//   - Proxy sits between an agent and the API server and can pause, cut,
//     slow down or reset the connections through it;
//   - ControlPlane runs bin/controlplane up and stops, kills and starts its
//     etcd and apiserver one at a time, keeping their data;
//   - Agent runs bin/nodelet and kills it with SIGKILL at a chosen moment;
//   - SmallFS is a tmpfs of a given size for an agent's root directory, that
//     a test fills and frees;
//   - Observer watches pods, nodes and leases through its own connection to
//     the API server (never the agent's) and counts what a user would call
//     a failure: pods deleted that nobody deleted, containers restarted,
//     pod phases going backwards, lease lapses, nodes going NotReady.
//
// It lives in test/, not in the agent: nothing here is built into nodelet.
package fault
