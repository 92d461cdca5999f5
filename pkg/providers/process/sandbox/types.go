package sandbox

import (
	"io"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// SandboxSpec identifies a pod sandbox.
type SandboxSpec struct {
	UID             types.UID
	Namespace, Name string
	// Hostname of the pod; empty means Name. Truncated to 63 characters.
	Hostname string
	// Resources are the pod cgroup's: the CPU share of the pod's requests
	// among the pods, and its limits when every container has one.
	Resources Resources
}

// Mount binds a host file or directory into a container.
type Mount struct {
	// Source is the host file or directory (subPath already resolved).
	Source string
	// Destination is the absolute path the container sees it at.
	Destination string
	ReadOnly    bool
}

// Resources of a container; 0 means unlimited.
type Resources struct {
	MemoryLimitBytes int64
	CPULimitMillis   int64
	CPURequestMillis int64
}

// ContainerSpec is one attempt of a container.
type ContainerSpec struct {
	Name string
	// Attempt is the restart count; each attempt has its own log file.
	Attempt int
	// Args is the argv; argv[0] is looked up in the PATH of Env (default
	// PATH when unset) if it has no slash.
	Args       []string
	Env        []string // "K=V"
	WorkingDir string
	Mounts     []Mount
	Resources  Resources
	Stdin      bool
	StdinOnce  bool
	TTY        bool
	// Security is who the container's processes (its main process and
	// exec sessions) run as and what they may do. Nil, as in the records
	// of agents that predate it, runs them as the shim runs: root with
	// every capability.
	Security *Security `json:",omitempty"`
}

// Security is applied to a container's process between fork and exec,
// by a stage of the shim that then execs the command (runtime-init).
type Security struct {
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
	// Groups are the supplementary groups.
	Groups []uint32 `json:"groups,omitempty"`
	// Capabilities is the bounding, permitted and effective set, bit n
	// for capability n, as containerd sets them (no inheritable or
	// ambient ones): a process of a non-root user keeps none in its
	// permitted and effective sets once it execs. Bits the kernel does not
	// know are ignored.
	Capabilities uint64 `json:"capabilities"`
	// NoNewPrivs sets no_new_privs (allowPrivilegeEscalation: false).
	NoNewPrivs bool `json:"noNewPrivs,omitempty"`
	// Seccomp is SeccompRuntimeDefault for the runtime's default filter;
	// empty for none.
	Seccomp string `json:"seccomp,omitempty"`
}

// SeccompRuntimeDefault names the runtime's default seccomp filter.
const SeccompRuntimeDefault = "RuntimeDefault"

// State of a container attempt.
type State string

const (
	StateRunning State = "Running"
	StateExited  State = "Exited"
)

// Reasons an attempt exited for.
const (
	ReasonCompleted  = "Completed"
	ReasonError      = "Error"
	ReasonOOMKilled  = "OOMKilled"
	ReasonStartError = "StartError"
)

// ContainerStatus is the state of one container attempt.
type ContainerStatus struct {
	Name    string
	Attempt int
	State   State
	// PID is the host PID of the main process while it runs.
	PID        int
	StartedAt  time.Time
	FinishedAt time.Time
	ExitCode   int
	// Reason is "Completed" (code 0), "Error", "OOMKilled" or "StartError".
	Reason  string
	Message string
	Signal  int
}

// StreamIO are the client's ends of an exec or attach session.
type StreamIO struct {
	Stdin          io.Reader // nil: no stdin
	Stdout, Stderr io.Writer // Stderr unused with TTY
	TTY            bool
	Resize         <-chan TermSize
}
