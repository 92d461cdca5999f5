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

// TestVolumeSurvivesAgentRestart: kill -9 of the agent leaves a pod's CSI
// volume attached and mounted, the container running; the restarted agent
// still unmounts and detaches it when the pod goes.
func TestVolumeSurvivesAgentRestart(t *testing.T) {
	node := uniqueName(t)
	pa := startProcessNodelet(t, node)
	d := startCSIDriver(t, func(driver string) string { return filepath.Join(pa.rootDir, "plugins", driver, "csi.sock") }, node)
	ns := newNamespace(t)
	handle, _ := staticVolume(t, d, ns, "data", corev1.ReadWriteOnce)
	apply(t, ns, claimPod("survivor", node, "data", "sh", "-c", "echo before > /data/restart; sleep 3600"))
	waitPodPhase(t, ns, "survivor", "Running", 90*time.Second)
	waitAttached(t, d, handle, node)
	started := kubectl(t, "get", "pod", "-n", ns, "survivor", "-o", "jsonpath={.status.containerStatuses[0].state.running.startedAt}")
	detachesBefore := countCalls(d, csidriver.ControllerUnpublishVolume, handle, false)

	pa.kill()
	pa.start()
	waitReady(t, node, 30*time.Second)
	eventually(t, 30*time.Second, "agent reconciled its pods after the restart", func() (bool, string) {
		return strings.Contains(pa.logText(), "Start-up reconcile done"), lastLines(pa.logText(), 3)
	})
	// The container writes through the mount it kept.
	kubectl(t, "exec", "-n", ns, "survivor", "--", "sh", "-c", "echo after > /data/restart")
	if data, err := os.ReadFile(filepath.Join(d.VolumePath(handle), "restart")); err != nil || strings.TrimSpace(string(data)) != "after" {
		t.Errorf("write through the mount after the restart: %q %v, want \"after\" in the volume's directory", data, err)
	}
	out := kubectl(t, "get", "pod", "-n", ns, "survivor", "-o", "jsonpath={.status.phase} {.status.containerStatuses[0].restartCount} {.status.containerStatuses[0].state.running.startedAt}")
	if out != "Running 0 "+started {
		t.Errorf("after the agent restart: %q, want Running, restartCount 0, startedAt %s", out, started)
	}
	if va := attachment(t, d.Name(), handle, node); va == nil || !va.Status.Attached || va.DeletionTimestamp != nil {
		t.Errorf("VolumeAttachment after the agent restart: %s, want attached", describeAttachment(va))
	}
	if n := countCalls(d, csidriver.ControllerUnpublishVolume, handle, false); n != detachesBefore {
		t.Errorf("%d detaches during the agent restart, want none", n-detachesBefore)
	}

	kubectl(t, "delete", "pod", "-n", ns, "survivor", "--timeout=60s")
	waitDetached(t, d, handle, node, 60*time.Second)
	unpublish, ok := lastCall(d, csidriver.NodeUnpublishVolume, handle)
	if detach, _ := lastCall(d, csidriver.ControllerUnpublishVolume, handle); !ok || !unpublish.End.Before(detach.Start) {
		t.Errorf("unpublish %+v, detach %+v: want an unmount that ended before the detach began", unpublish, detach)
	}
}
