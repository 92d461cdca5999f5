package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestCRIImageVolume mounts the busybox image as image volumes
// (spec.volumes[].image) on a cri node: whole (pull policy Always) in an
// init container and a container, and its etc directory by subPath; each
// read-only, in the runtime by the image's ID. A subPath the image lacks
// keeps the container in CreateContainerError, an image that cannot be
// pulled in ErrImagePull then ImagePullBackOff with the pull's Events, and
// an image volume no container mounts is never pulled.
func TestCRIImageVolume(t *testing.T) {
	node := uniqueName(t)
	c := startCRINodelet(t, node)
	ns := criNamespace(t)
	pod := func(name, volume, subPath string) string {
		sub := ""
		if subPath != "" {
			sub = "\n      subPath: " + subPath
		}
		return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  nodeName: %s
  terminationGracePeriodSeconds: 1
  volumes:
  - name: tools
    image: {reference: %q, pullPolicy: IfNotPresent}
  containers:
  - name: c
    image: %s
    command: ["sleep", "3600"]
    volumeMounts:
    - name: tools
      mountPath: /vol%s
`, name, node, volume, busyboxImage, sub)
	}
	apply(t, ns, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: mounted
spec:
  nodeName: %s
  terminationGracePeriodSeconds: 1
  volumes:
  - name: whole
    image: {reference: %q, pullPolicy: Always}
  - name: etc
    image: {reference: %q}
  - name: unused
    image: {reference: "localhost/no-such-image:1"}
  initContainers:
  - name: init
    image: %s
    command: ["sh", "-c", "test -x /vol/bin/busybox"]
    volumeMounts:
    - {name: whole, mountPath: /vol}
  containers:
  - name: c
    image: %s
    command: ["sleep", "3600"]
    volumeMounts:
    - {name: whole, mountPath: /vol}
    - {name: etc, mountPath: /etc-of-image, subPath: etc}
`, node, busyboxImage, busyboxImage, agnhostImage, agnhostImage))
	apply(t, ns, pod("missing-subpath", busyboxImage, "not-existing"))
	apply(t, ns, pod("missing-image", "busybox:no-such-tag", ""))

	waitPodPhase(t, ns, "mounted", "Running", 3*time.Minute)
	for _, tc := range []struct {
		script string
		want   string
	}{
		{"cat /vol/etc/passwd", "root:x:0:0:"},
		{"/vol/bin/busybox echo run from the image", "run from the image"},
		{"cat /etc-of-image/passwd", "root:x:0:0:"},
		{"ls /etc-of-image", "group"},
		{"test -e /etc-of-image/bin/busybox && echo the whole image || echo its etc alone", "its etc alone"},
		{"touch /vol/new 2>&1; echo status $?", "Read-only file system"},
		{"touch /etc-of-image/new 2>&1; echo status $?", "Read-only file system"},
	} {
		out, err := kubectlErr("exec", "-n", ns, "mounted", "-c", "c", "--", "sh", "-c", tc.script)
		if err != nil || !strings.Contains(out, tc.want) {
			t.Errorf("%s: %q, %v; want %q in it", tc.script, out, err, tc.want)
		}
	}
	// In the runtime, the image by its ID, read-only.
	_, containers := c.runtimePods(t)
	found := 0
	for _, ct := range containers {
		if ct.GetMetadata().GetName() != "c" || ct.Labels["io.kubernetes.pod.name"] != "mounted" {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		st, err := c.env.RuntimeClient().ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: ct.Id})
		cancel()
		if err != nil {
			t.Fatalf("container status: %v", err)
		}
		for _, m := range st.GetStatus().GetMounts() {
			if m.GetImage() == nil {
				continue
			}
			found++
			if !strings.HasPrefix(m.GetImage().GetImage(), "sha256:") || !m.Readonly {
				t.Errorf("mount at %s: image %q, read-only %v; want the image's ID, read-only", m.ContainerPath, m.GetImage().GetImage(), m.Readonly)
			}
		}
	}
	if found != 2 {
		t.Errorf("the runtime shows %d image mounts of the container, want 2", found)
	}
	if events := podEvents(t, ns, "mounted"); strings.Contains(events, "no-such-image") {
		t.Errorf("the image of a volume no container mounts was pulled:\n%s", events)
	}

	waitContainerWaiting(t, ns, "missing-subpath", "CreateContainerError", 2*time.Minute)
	if msg := kubectl(t, "get", "pod", "-n", ns, "missing-subpath", "-o", "jsonpath={.status.containerStatuses[0].state.waiting.message}"); !strings.Contains(msg, "not-existing") {
		t.Errorf("pod missing-subpath: waiting message %q does not name the subPath", msg)
	}

	waitContainerWaiting(t, ns, "missing-image", "ErrImagePull", 2*time.Minute)
	waitContainerWaiting(t, ns, "missing-image", "ImagePullBackOff", time.Minute)
	events := podEvents(t, ns, "missing-image")
	for _, want := range []string{`Pulling: Pulling image "busybox:no-such-tag"`, `Failed: Failed to pull image "busybox:no-such-tag"`, "BackOff:"} {
		if !strings.Contains(events, want) {
			t.Errorf("pod missing-image: no %q Event in:\n%s", want, events)
		}
	}
}
