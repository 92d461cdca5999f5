package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// stagedPods is a namespace's two pods on node as a kwok user writes them:
// one with an init container, and a Job whose pod runs there.
func stagedPods(ns, node string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: web, namespace: %[1]s}
spec:
  nodeName: %[2]s
  tolerations: [{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}]
  initContainers: [{name: setup, image: fake-image}]
  containers: [{name: web, image: fake-image}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: once, namespace: %[1]s}
spec:
  backoffLimit: 0
  template:
    spec:
      nodeName: %[2]s
      restartPolicy: Never
      tolerations: [{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}]
      containers: [{name: once, image: fake-image}]
`, ns, node)
}

// TestKwokStagesPlayPods is issue 28's "lifecycle as data" on the real
// control plane: an agent that takes over a Node applied with kwok's
// annotation plays its pods with kwok's own general pod stages, read from
// files: a pod's init container runs and completes before the pod is
// Ready, a Job's pod succeeds so that the Job completes, and a deleted pod
// is gone. It plays the Node with kwok's node-initialize and chaos stages.
func TestKwokStagesPlayPods(t *testing.T) {
	dir, err := filepath.Abs("../../pkg/stage/testdata/kwok/pod/general")
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, f := range []string{"pod-create", "pod-init-container-running", "pod-init-container-completed", "pod-ready", "pod-complete", "pod-delete"} {
		files = append(files, filepath.Join(dir, f+".yaml"))
	}
	files = append(files, filepath.Join(dir, "../../node/fast/node-initialize.yaml"), filepath.Join(dir, "../../node/chaos/node-not-ready.yaml"))
	fleet := uniqueName(t)
	cleanupFleet(t, fleet, 1)
	kubectl(t, "apply", "-f", writeFile(t, "nodes.yaml", kwokNodes(fleet, 0, 1)))
	startTakeover(t, fleet, "--sim-stages", strings.Join(files, ","))
	node := fleet + "-0"
	eventually(t, 60*time.Second, "the Node Ready", func() (bool, string) {
		_, ready := fleetNodes(t, fleet)
		return ready == 1, fmt.Sprintf("%d Ready", ready)
	})
	ns := newNamespace(t)
	kubectl(t, "apply", "-f", writeFile(t, "pods.yaml", stagedPods(ns, node)))
	ctx := context.Background()

	eventually(t, 60*time.Second, "the pod Ready after its init container completed", func() (bool, string) {
		pod, err := client.CoreV1().Pods(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		initDone := len(pod.Status.InitContainerStatuses) == 1 && pod.Status.InitContainerStatuses[0].State.Terminated != nil &&
			pod.Status.InitContainerStatuses[0].State.Terminated.Reason == "Completed"
		ready := false
		for _, c := range pod.Status.Conditions {
			ready = ready || c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
		}
		return pod.Status.Phase == corev1.PodRunning && ready && initDone && pod.Status.PodIP != "",
			fmt.Sprintf("phase %s, Ready %v, init containers %+v, IP %q", pod.Status.Phase, ready, pod.Status.InitContainerStatuses, pod.Status.PodIP)
	})
	kubectl(t, "wait", "-n", ns, "job/once", "--for=condition=Complete", "--timeout=90s")

	kubectl(t, "delete", "-n", ns, "pod", "web", "--wait=false")
	eventually(t, 60*time.Second, "the deleted pod gone", func() (bool, string) {
		pod, err := client.CoreV1().Pods(ns).Get(ctx, "web", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		if err != nil {
			return false, err.Error()
		}
		return false, fmt.Sprintf("phase %s, deletion at %v", pod.Status.Phase, pod.DeletionTimestamp)
	})

	// kwok's chaos stage for Nodes, as its users trigger it: a label makes
	// the node NotReady with the reason an annotation gives, and taking the
	// label off has kwok's node-initialize make it Ready again.
	kubectl(t, "annotate", "node", node, "node-not-ready.stage.kwok.x-k8s.io/reason=Maintenance")
	kubectl(t, "label", "node", node, "node-not-ready.stage.kwok.x-k8s.io=true")
	kubectl(t, "wait", "node/"+node, "--for=condition=Ready=false", "--timeout=60s")
	if reason := kubectl(t, "get", "node", node, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].reason}`); reason != "Maintenance" {
		t.Errorf("NotReady node's reason %q, want the annotation's Maintenance", reason)
	}
	kubectl(t, "label", "node", node, "node-not-ready.stage.kwok.x-k8s.io-")
	kubectl(t, "wait", "node/"+node, "--for=condition=Ready=true", "--timeout=60s")
}
