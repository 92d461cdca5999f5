package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// A process pod that allocates memory until the node passes a memory
// threshold (set just below what the host has available) is evicted —
// phase Failed, reason Evicted, the kubelet's message — while a Guaranteed
// pod under its requests is not; the node shows MemoryPressure (and the
// control plane its taint) and refuses a BestEffort pod while the pressure
// lasts; both clear once the memory is free again. Not parallel: the
// threshold is relative to the host's memory, which other tests would move.
func TestProcessMemoryEviction(t *testing.T) {
	holdHost(t)
	node := uniqueName(t)
	a := startProcessNodelet(t, node)
	s, err := summaryOf(t, node)
	if err != nil || s.Node.Memory == nil || s.Node.Memory.AvailableBytes == nil {
		t.Fatalf("the node's memory.available: %v %+v", err, s)
	}
	available := int64(*s.Node.Memory.AvailableBytes) >> 20
	// A margin wide enough that the rest of the host (the control plane,
	// the page cache) moving by a few hundred MiB neither trips it early
	// nor keeps it tripped once the hog is gone.
	threshold := available - 1024
	config := writeFile(t, "config.yaml", `apiVersion: nodelet.io/v1alpha1
kind: NodeletConfiguration
evictionPressureTransitionPeriod: 60s
`)
	a.stop()
	a.args = append(a.args, "--config", config, fmt.Sprintf("--eviction-hard=memory.available<%dMi", threshold))
	a.start()
	waitReady(t, node, 30*time.Second)

	ns := newNamespace(t)
	t.Cleanup(func() { deletePods(t, ns) })
	apply(t, ns, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: steady
spec:
  nodeName: %[1]s
  terminationGracePeriodSeconds: 1
  containers:
  - name: steady
    image: nodelet.io/none
    command: ["sleep", "3600"]
    resources:
      requests: {cpu: 100m, memory: 100Mi}
      limits: {cpu: 100m, memory: 100Mi}
`, node))
	waitPodPhase(t, ns, "steady", "Running", 60*time.Second)
	apply(t, ns, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: hog
spec:
  nodeName: %[1]s
  terminationGracePeriodSeconds: 1
  restartPolicy: Never
  containers:
  - name: hog
    image: nodelet.io/none
    command: ["sh", "-c", "x=$(head -c 2048m /dev/zero | tr '\\0' a); sleep 3600"]
`, node))

	eventually(t, 120*time.Second, "the hog evicted", func() (bool, string) {
		out, _ := kubectlErr("get", "pod", "-n", ns, "hog", "-o", "jsonpath={.status.phase} {.status.reason} {.status.message}")
		if s, err := summaryOf(t, node); err == nil && s.Node.Memory != nil && s.Node.Memory.AvailableBytes != nil {
			out += fmt.Sprintf(" (node memory.available %dMi, threshold %dMi)", *s.Node.Memory.AvailableBytes>>20, threshold)
		}
		return strings.HasPrefix(out, "Failed Evicted The node was low on resource: memory.") &&
			strings.Contains(out, "(signal memory.available)"), out
	})
	if got := kubectl(t, "get", "pod", "-n", ns, "hog", "-o", `jsonpath={.status.conditions[?(@.type=="DisruptionTarget")].reason}`); got != "TerminationByKubelet" {
		t.Errorf("hog's DisruptionTarget reason %q, want TerminationByKubelet", got)
	}
	if got := kubectl(t, "get", "node", node, "-o", `jsonpath={.status.conditions[?(@.type=="MemoryPressure")].status}`); got != "True" {
		t.Errorf("MemoryPressure %q right after the eviction, want True for the transition period", got)
	}
	eventually(t, 30*time.Second, "the memory-pressure taint", func() (bool, string) {
		out, _ := kubectlErr("get", "node", node, "-o", "jsonpath={.spec.taints[*].key}")
		return strings.Contains(out, "node.kubernetes.io/memory-pressure"), out
	})
	apply(t, ns, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: besteffort
spec:
  nodeName: %[1]s
  containers:
  - name: be
    image: nodelet.io/none
    command: ["sleep", "3600"]
`, node))
	eventually(t, 30*time.Second, "the BestEffort pod refused", func() (bool, string) {
		out, _ := kubectlErr("get", "pod", "-n", ns, "besteffort", "-o", "jsonpath={.status.phase} {.status.reason} {.status.message}")
		return strings.HasPrefix(out, "Failed Evicted Pod was rejected: The node had condition: [MemoryPressure]"), out
	})

	eventually(t, 150*time.Second, "MemoryPressure and its taint cleared", func() (bool, string) {
		cond, _ := kubectlErr("get", "node", node, "-o", `jsonpath={.status.conditions[?(@.type=="MemoryPressure")].status}`)
		taints, _ := kubectlErr("get", "node", node, "-o", "jsonpath={.spec.taints[*].key}")
		return cond == "False" && !strings.Contains(taints, "memory-pressure"), cond + " " + taints
	})
	if got := kubectl(t, "get", "pod", "-n", ns, "steady", "-o", "jsonpath={.status.phase} {.status.message}"); got != "Running " {
		t.Errorf("the Guaranteed pod under its requests is %q, want Running", got)
	}
	events := kubectl(t, "get", "events", "-A", "--field-selector", "involvedObject.name="+node, "-o", `jsonpath={range .items[*]}{.reason}: {.message}{"\n"}{end}`)
	if !strings.Contains(events, "EvictionThresholdMet") {
		t.Errorf("no EvictionThresholdMet event on the node; events:\n%s", events)
	}
}

// A cri pod that writes to an emptyDir until the node's filesystem passes a
// threshold (set just below what it has free) makes the node reclaim what
// it can first — an image no container uses is removed — and then evicts
// the pod (Evicted, ephemeral-storage); the node shows DiskPressure while
// it lasts. Not parallel: the threshold is relative to the disk's free
// space, which other tests would move.
func TestCRIDiskEviction(t *testing.T) {
	node := uniqueName(t)
	c := startCRINodelet(t, node)
	ns := criNamespace(t)
	const unused = "registry.k8s.io/e2e-test-images/nonewprivs:1.4"
	apply(t, ns, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: once
spec:
  nodeName: %s
  restartPolicy: Never
  containers:
  - name: once
    image: %s
`, node, unused))
	waitPodPhase(t, ns, "once", "Succeeded", 120*time.Second)
	kubectl(t, "delete", "pod", "-n", ns, "once", "--wait=true")
	imagePresent := func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		resp, err := c.env.ImageClient().ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: unused}})
		if err != nil {
			t.Fatalf("image status: %v", err)
		}
		return resp.Image != nil
	}
	if !imagePresent() {
		t.Fatalf("%s not in the runtime after its pod ran", unused)
	}

	s, err := summaryOf(t, node)
	if err != nil || s.Node.Fs == nil || s.Node.Fs.AvailableBytes == nil {
		t.Fatalf("the node's nodefs.available: %v %+v", err, s)
	}
	threshold := int64(*s.Node.Fs.AvailableBytes)>>20 - 300
	config := writeFile(t, "config.yaml", `apiVersion: nodelet.io/v1alpha1
kind: NodeletConfiguration
evictionPressureTransitionPeriod: 30s
imageMinimumGCAge: 1s
`)
	c.agent.stop()
	c.agent.args = append(c.agent.args, "--config", config, fmt.Sprintf("--eviction-hard=nodefs.available<%dMi", threshold))
	c.agent.start()
	waitReady(t, node, time.Minute)

	apply(t, ns, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: filler
spec:
  nodeName: %s
  terminationGracePeriodSeconds: 1
  containers:
  - name: filler
    image: registry.k8s.io/e2e-test-images/busybox:1.37.0-1
    command: ["sh", "-c", "dd if=/dev/zero of=/data/fill bs=1M count=700 && sleep 3600"]
    volumeMounts: [{name: data, mountPath: /data}]
  volumes:
  - name: data
    emptyDir: {}
`, node))
	eventually(t, 180*time.Second, "the filler evicted", func() (bool, string) {
		out, _ := kubectlErr("get", "pod", "-n", ns, "filler", "-o", "jsonpath={.status.phase} {.status.reason} {.status.message}")
		return strings.HasPrefix(out, "Failed Evicted The node was low on resource: ephemeral-storage.") &&
			strings.Contains(out, "(signal nodefs.available)"), out
	})
	if imagePresent() {
		t.Errorf("the unused image %s is still in the runtime: the node evicted without reclaiming it first", unused)
	}
	if got := kubectl(t, "get", "node", node, "-o", `jsonpath={.status.conditions[?(@.type=="DiskPressure")].status}`); got != "True" {
		t.Errorf("DiskPressure %q right after the eviction, want True for the transition period", got)
	}
	kubectl(t, "delete", "pod", "-n", ns, "filler", "--wait=true")
	eventually(t, 120*time.Second, "DiskPressure cleared", func() (bool, string) {
		out, _ := kubectlErr("get", "node", node, "-o", `jsonpath={.status.conditions[?(@.type=="DiskPressure")].status}`)
		return out == "False", out
	})
}

// A sim node evicts from its simulated usage: a pod annotated to use more
// memory than the node can spare is evicted and the node shows
// MemoryPressure.
func TestSimMemoryEviction(t *testing.T) {
	t.Parallel()
	node := uniqueName(t)
	config := writeFile(t, "config.yaml", `apiVersion: nodelet.io/v1alpha1
kind: NodeletConfiguration
sim:
  capacity: {cpu: "4", memory: 4Gi, pods: "110"}
evictionHard:
  memory.available: 500Mi
evictionPressureTransitionPeriod: 10s
`)
	startNodelet(t, node, "--config", config)
	waitReady(t, node, 30*time.Second)
	ns := newNamespace(t)
	apply(t, ns, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: hog
  annotations: {sim.nodelet.io/memory-usage: 3500Mi}
spec:
  nodeName: %s
  containers:
  - name: app
    image: nodelet.io/sample:1
`, node))
	eventually(t, 60*time.Second, "the hog evicted", func() (bool, string) {
		out, _ := kubectlErr("get", "pod", "-n", ns, "hog", "-o", "jsonpath={.status.phase} {.status.reason} {.status.message}")
		return strings.HasPrefix(out, "Failed Evicted The node was low on resource: memory.") &&
			strings.Contains(out, "(signal memory.available)"), out
	})
	eventually(t, 30*time.Second, "MemoryPressure reported", func() (bool, string) {
		out, _ := kubectlErr("get", "node", node, "-o", `jsonpath={.status.conditions[?(@.type=="MemoryPressure")].status}`)
		return out == "True", out
	})
	eventually(t, 60*time.Second, "MemoryPressure cleared", func() (bool, string) {
		out, _ := kubectlErr("get", "node", node, "-o", `jsonpath={.status.conditions[?(@.type=="MemoryPressure")].status}`)
		return out == "False", out
	})
}
