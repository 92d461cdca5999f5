package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// sidecarPod is a pod with a native sidecar (an init container with
// restartPolicy Always) that must be running before the app starts, and a
// plain init container after it; the app finishes, so the pod completes
// once the sidecar is stopped after it.
func sidecarPod(node, image string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: sidecar
spec:
  nodeName: %[1]s
  restartPolicy: Never
  terminationGracePeriodSeconds: 5
  volumes:
  - name: shared
    emptyDir: {}
  initContainers:
  - name: side
    image: %[2]s
    restartPolicy: Always
    command: ["sh", "-c", "touch /shared/side-started; trap 'exit 0' TERM; while true; do sleep 1; done"]
    volumeMounts: [{name: shared, mountPath: /shared}]
    startupProbe:
      exec: {command: ["test", "-f", "/shared/side-started"]}
      periodSeconds: 1
  - name: after
    image: %[2]s
    command: ["sh", "-c", "test -f /shared/side-started && echo side-was-running > /shared/order"]
    volumeMounts: [{name: shared, mountPath: /shared}]
  containers:
  - name: app
    image: %[2]s
    command: ["sh", "-c", "cat /shared/order; sleep 5"]
    volumeMounts: [{name: shared, mountPath: /shared}]
`, node, image)
}

// checkSidecarPod runs sidecarPod: the sidecar starts first and keeps
// running beside the app (Initialized, not waited on), then the app exits
// 0, the sidecar is stopped after it, and the pod Succeeds.
func checkSidecarPod(t *testing.T, ns string) {
	t.Helper()
	eventually(t, 3*time.Minute, "app running beside the sidecar", func() (bool, string) {
		pod := getPod(t, ns, "sidecar")
		var side, app *corev1.ContainerStatus
		for i := range pod.Status.InitContainerStatuses {
			if pod.Status.InitContainerStatuses[i].Name == "side" {
				side = &pod.Status.InitContainerStatuses[i]
			}
		}
		if len(pod.Status.ContainerStatuses) > 0 {
			app = &pod.Status.ContainerStatuses[0]
		}
		ok := side != nil && side.State.Running != nil && app != nil && (app.State.Running != nil || app.State.Terminated != nil)
		return ok, fmt.Sprintf("phase %s init %+v app %+v", pod.Status.Phase, pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses)
	})
	if out := kubectl(t, "logs", "-n", ns, "sidecar", "-c", "app"); !strings.Contains(out, "side-was-running") {
		t.Errorf("the init container after the sidecar did not see it running: app log %q", out)
	}
	waitPodPhase(t, ns, "sidecar", "Succeeded", 2*time.Minute)
	pod := getPod(t, ns, "sidecar")
	for _, cs := range pod.Status.InitContainerStatuses {
		if cs.Name == "side" && (cs.State.Terminated == nil || cs.RestartCount != 0) {
			t.Errorf("sidecar after the app finished: %+v, want terminated without restarts", cs)
		}
	}
}

func TestProcessNativeSidecar(t *testing.T) {
	checkSidecarPod(t, onProcessNode(t, sidecarPod))
}

func TestCRINativeSidecar(t *testing.T) {
	checkSidecarPod(t, onCRINode(t, sidecarPod))
}
