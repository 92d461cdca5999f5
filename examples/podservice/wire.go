// Package podservice is a nodelet provider for a remote pod service: a
// cloud container service, reached over HTTP and JSON, that runs pods on
// machines of its own (the shape of Azure Container Instances or AWS
// Fargate behind virtual-kubelet's providers). It is the example of
// docs/providers.md: an out-of-tree provider that needs nodelet's
// pkg/provider and pkg/agent and nothing else.
//
// # The service's API
//
// Every body is JSON; an error answers its status code with
// {"error": "…"}.
//
//	POST   /pods                          Pod → 201 Pod; 409 if the name is taken
//	GET    /pods?node=NAME                → 200 [Pod], the pods created for node NAME
//	GET    /pods/{namespace}/{name}       → 200 Pod; 404
//	DELETE /pods/{namespace}/{name}?gracePeriodSeconds=N
//	                                      → 200 Pod, stopping: gone (404) after N seconds
//	GET    /pods/{namespace}/{name}/containers/{container}/logs?tail=N
//	                                      → 200 text/plain, the last N lines (all without tail); 404
//	GET    /capacity                      → 200 Capacity
//
// A Pod is what the provider sends (node, namespace, name, uid and the
// containers) and what the service adds (status):
//
//	{"node": "n1", "namespace": "default", "name": "web", "uid": "…",
//	 "containers": [{"name": "app", "image": "nginx:1.27", "command": ["nginx"],
//	                 "args": ["-g", "daemon off;"], "env": [{"name": "A", "value": "1"}],
//	                 "cpu": "500m", "memory": "128Mi"}],
//	 "status": {"phase": "Running", "ip": "10.88.0.4", "createdAt": "2026-11-26T22:00:00Z",
//	            "containers": [{"name": "app", "state": "Running",
//	                            "startedAt": "2026-11-26T22:00:01Z"}]}}
//
// phase is Pending, Running, Succeeded or Failed, with a message; a
// container's state is Waiting, Running or Terminated, with a reason, a
// message, an exitCode, its restarts, startedAt and finishedAt. Empty
// fields are left out. Capacity is {"cpu": "8", "memory": "32Gi", "pods":
// 110}, quantities as Kubernetes writes them.
//
// # What the provider does with it
//
// The provider implements provider.PodLifecycleHandler and
// provider.NodeProvider, provider.LogsProvider (kubectl logs, with the
// agent's kubelet API server) and provider.NodeNotifier (the node's status
// is reported as soon as Ping learns a new capacity). It does not push pod
// status: the service has no watch, so the agent polls GetPod (every 5 s by
// default). Pods are mapped as follows:
//
//   - CreatePod sends the containers' name, image, command, args, literal
//     environment variables and CPU and memory requests (limits where no
//     request is given). The service mounts no volumes and sees no cluster
//     objects: environment variables from references (valueFrom) are left
//     out, volumes are not sent. A pod with init containers is rejected
//     (the service runs no init containers).
//   - UpdatePod keeps the new spec, which GetPod reports; the service
//     cannot change a running pod, so nothing is sent.
//   - DeletePod sends the pod's grace period; the service stops the pod
//     within it, and GetPod then reports provider.ErrNotFound.
//   - GetPod and GetPods map the service's status to the pod's (podStatus):
//     phase, message, podIP, startTime (createdAt), container statuses
//     (ready while running), and the conditions PodScheduled, Initialized,
//     ContainersReady and Ready.
//   - GetContainerLogs honours tail (limit-bytes is the agent's); the
//     service keeps no previous logs and no timestamps, and cannot filter
//     by time (since) nor follow: a follow returns the log as it is now
//     and ends.
//   - Ping asks the service's capacity, which ConfigureNode reports unless
//     Options.Capacity is set; a failing Ping makes the node NotReady.
//
// A pod created by an earlier agent, which this one does not keep, is
// rebuilt from the service's answer (name, UID and containers) until the
// agent hands it the pod's spec again.
package podservice

import "time"

// Pod is a pod as the service knows it.
type Pod struct {
	// Node is the node the pod was created for.
	Node       string      `json:"node"`
	Namespace  string      `json:"namespace"`
	Name       string      `json:"name"`
	UID        string      `json:"uid"`
	Containers []Container `json:"containers"`
	// Status is the service's; one sent with POST is ignored.
	Status Status `json:"status"`
}

// Container is one container of a pod as the service runs it.
type Container struct {
	Name    string   `json:"name"`
	Image   string   `json:"image"`
	Command []string `json:"command,omitempty"`
	Args    []string `json:"args,omitempty"`
	Env     []EnvVar `json:"env,omitempty"`
	// CPU and Memory are the resources asked for, as Kubernetes
	// quantities; empty for none.
	CPU    string `json:"cpu,omitempty"`
	Memory string `json:"memory,omitempty"`
}

// EnvVar is one environment variable of a container.
type EnvVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Phases of a pod in the service.
const (
	PhasePending   = "Pending"
	PhaseRunning   = "Running"
	PhaseSucceeded = "Succeeded"
	PhaseFailed    = "Failed"
)

// States of a container in the service.
const (
	StateWaiting    = "Waiting"
	StateRunning    = "Running"
	StateTerminated = "Terminated"
)

// Status is how a pod fares in the service.
type Status struct {
	Phase   string `json:"phase"`
	Message string `json:"message,omitempty"`
	// IP is the pod's address, once it has one.
	IP string `json:"ip,omitempty"`
	// CreatedAt is when the service accepted the pod.
	CreatedAt  *time.Time        `json:"createdAt,omitempty"`
	Containers []ContainerStatus `json:"containers,omitempty"`
}

// ContainerStatus is how one container fares in the service.
type ContainerStatus struct {
	Name       string     `json:"name"`
	State      string     `json:"state"`
	Reason     string     `json:"reason,omitempty"`
	Message    string     `json:"message,omitempty"`
	ExitCode   int32      `json:"exitCode,omitempty"`
	Restarts   int32      `json:"restarts,omitempty"`
	StartedAt  *time.Time `json:"startedAt,omitempty"`
	FinishedAt *time.Time `json:"finishedAt,omitempty"`
}

// Capacity is what the service can run for a node.
type Capacity struct {
	CPU    string `json:"cpu"`
	Memory string `json:"memory"`
	Pods   int    `json:"pods"`
}
