package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/test/csidriver"
)

// TestVolumeCSIAttachMountDetach runs a process-provider pod on a static CSI
// volume: attached through a VolumeAttachment by the real external-attacher,
// staged and published by the driver's node service, written through by
// the pod; and on deletion unmounted first, then detached.
func TestVolumeCSIAttachMountDetach(t *testing.T) {
	node := uniqueName(t)
	pa := startProcessNodelet(t, node)
	// The driver's socket where nodelet looks for it; its node ID is the
	// node's name.
	d := startCSIDriver(t, func(driver string) string { return filepath.Join(pa.rootDir, "plugins", driver, "csi.sock") }, node)
	ns := newNamespace(t)
	handle, unique := staticVolume(t, d, ns, "data", corev1.ReadWriteOnce)

	apply(t, ns, claimPod("writer", node, "data", "sh", "-c", "echo written-through-the-mount > /data/hello; sleep 3600"))
	waitPodPhase(t, ns, "writer", "Running", 90*time.Second)
	waitAttached(t, d, handle, node)
	eventually(t, 30*time.Second, "the pod's file in the volume's directory", func() (bool, string) {
		data, err := os.ReadFile(filepath.Join(d.VolumePath(handle), "hello"))
		return err == nil && strings.TrimSpace(string(data)) == "written-through-the-mount", fmt.Sprintf("%q %v", data, err)
	})
	if _, inUse := nodeVolumes(t, node); !slices.Contains(inUse, unique) {
		t.Errorf("volumesInUse = %v, want %s while the pod runs", inUse, unique)
	}

	kubectl(t, "delete", "pod", "-n", ns, "writer", "--timeout=60s")
	waitDetached(t, d, handle, node, 60*time.Second)
	unpublish, ok := lastCall(d, csidriver.NodeUnpublishVolume, handle)
	if !ok || unpublish.Err != nil {
		t.Fatalf("no successful NodeUnpublishVolume of %s: %+v", handle, unpublish)
	}
	detach, ok := lastCall(d, csidriver.ControllerUnpublishVolume, handle)
	if !ok || detach.Err != nil {
		t.Fatalf("no successful ControllerUnpublishVolume of %s: %+v", handle, detach)
	}
	if !unpublish.End.Before(detach.Start) {
		t.Errorf("detached at %s before the unmount ended at %s", detach.Start, unpublish.End)
	}
	if unstage, ok := lastCall(d, csidriver.NodeUnstageVolume, handle); ok && !unstage.End.Before(detach.Start) {
		t.Errorf("detached at %s before the unstage ended at %s", detach.Start, unstage.End)
	}
	if _, inUse := nodeVolumes(t, node); slices.Contains(inUse, unique) {
		t.Errorf("volumesInUse = %v after the pod is gone", inUse)
	}
}

// TestVolumeAttachFailureKeepsPodWaiting: while the driver refuses to
// attach, the pod's container waits in ContainerCreating saying why and the
// pod gets FailedAttachVolume warnings; once the driver recovers, the pod
// runs.
func TestVolumeAttachFailureKeepsPodWaiting(t *testing.T) {
	node := uniqueName(t)
	pa := startProcessNodelet(t, node)
	d := startCSIDriver(t, func(driver string) string { return filepath.Join(pa.rootDir, "plugins", driver, "csi.sock") }, node)
	ns := newNamespace(t)
	handle, _ := staticVolume(t, d, ns, "data", corev1.ReadWriteOnce)
	d.FailControllerPublish(handle, errors.New("e2e: attach refused"))

	apply(t, ns, claimPod("waiter", node, "data"))
	eventually(t, 60*time.Second, "a FailedAttachVolume warning naming the driver's error", func() (bool, string) {
		out, _ := kubectlErr("get", "events", "-n", ns, "--field-selector", "involvedObject.name=waiter,reason=FailedAttachVolume", "-o", "jsonpath={.items[*].message}")
		return strings.Contains(out, "attach refused"), out
	})
	p, err := client.CoreV1().Pods(ns).Get(context.Background(), "waiter", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].State.Waiting == nil ||
		p.Status.ContainerStatuses[0].State.Waiting.Reason != "ContainerCreating" || p.Status.ContainerStatuses[0].State.Waiting.Message == "" {
		t.Errorf("pod while its volume cannot attach: %s, want its container waiting in ContainerCreating with a message", podState(p))
	}
	t.Logf("pod while its volume cannot attach: %s", podState(p))

	d.FailControllerPublish(handle, nil)
	waitPodPhase(t, ns, "waiter", "Running", 90*time.Second)
	waitAttached(t, d, handle, node)
}
