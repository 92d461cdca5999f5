// Package sandbox runs pod sandboxes and their containers as supervised host
// processes that outlive the agent.
//
// A pod sandbox is a long-lived nodelet subcommand that is PID 1 of the pod's
// own PID, UTS, IPC and mount namespaces (the host network is shared), and
// the pod's one supervising process (the shim): each container is its child,
// in a mount namespace of its own where the container's volumes are bound at
// their destinations, started through an init stage (runtime-init) that
// gives it the user, groups, capabilities, no_new_privs and seccomp filter
// of its spec before it execs the command. The sandbox writes each container's output to
// CRI-format log files, records its exit on disk and serves exec, attach and
// stop over a unix socket per attempt. A sandbox that dies takes every
// container with it (they are in its PID namespace); the agent records their
// exits and sets the pod up again. Sandboxes of earlier versions started one
// shim process per attempt, which is still understood. The agent-side
// Manager only reads and writes files under Options.RootDir and talks to
// those sockets, so a restarted agent adopts every running container
// without restarting it.
//
// The package owns RootDir/pods/<uid>/, the cgroups named
// <hierarchy>/<CgroupName>/pod<uid>/... and the processes it started. It
// never touches pods' API objects, other cgroups, or mounts outside the
// private mount namespaces it creates.
package sandbox
