package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/attachdetach"
	"github.com/nodelet/nodelet/pkg/csi"
	"github.com/nodelet/nodelet/test/csidriver"
)

// csiDriver is a CSI driver of the test's own, served from this process on
// a unix socket, with the real external-attacher working for it.
type csiDriver struct {
	*csidriver.Driver
	socket string
}

// startCSIDriver serves a new driver on the socket socketFor gives for its
// name, registers its CSIDriver
// object (attach required) and runs bin/csi-attacher for it. nodeIDs are the
// nodes whose IDs its controller accepts (the first is its node service's).
// Everything is removed when the test ends, after the cleanups registered
// later (the agents, the namespace) have run.
func startCSIDriver(t *testing.T, socketFor func(driver string) string, nodeIDs ...string) *csiDriver {
	t.Helper()
	attacher := filepath.Join(root, "bin/csi-attacher")
	if _, err := os.Stat(attacher); err != nil {
		t.Fatalf("%s missing: run make bin/csi-attacher first", attacher)
	}
	if os.Geteuid() != 0 {
		t.Skip("the test CSI driver mounts: it needs root")
	}
	name := "csi-" + randSuffix() + ".nodelet.test"
	d, err := csidriver.New(csidriver.Options{Name: name, NodeID: nodeIDs[0], OtherNodeIDs: nodeIDs[1:], DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	cleanupVolumeObjects(t, name)
	socket := socketFor(name)

	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- d.Serve(ctx, socket) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("csi driver: %v", err)
		}
	})
	select {
	case <-d.Ready():
	case err := <-served:
		t.Fatalf("csi driver: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("csi driver not serving after 30s")
	}

	_, err = client.StorageV1().CSIDrivers().Create(context.Background(), &storagev1.CSIDriver{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       storagev1.CSIDriverSpec{AttachRequired: ptr.To(true)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	logFile, err := os.Create(filepath.Join(t.TempDir(), "csi-attacher.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(attacher, "--csi-address", socket, "--kubeconfig", kubeconfig,
		"--timeout", "10s", "--retry-interval-start", "500ms", "--retry-interval-max", "5s", "--worker-threads", "4", "-v", "4")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = stopWithParent()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start csi-attacher: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logFile.Close()
		if t.Failed() {
			out, _ := os.ReadFile(logFile.Name())
			t.Logf("csi-attacher log:\n%s", lastLines(string(out), 40))
			for _, c := range d.Calls() {
				t.Logf("csi call: %s volume=%s node=%s err=%v", c.Method, c.VolumeID, c.NodeID, c.Err)
			}
		}
	})
	return &csiDriver{Driver: d, socket: socket}
}

// tempSocket places a driver's socket in a directory of the test's own.
func tempSocket(t *testing.T) func(string) string {
	dir := t.TempDir()
	return func(string) string { return filepath.Join(dir, "csi.sock") }
}

// cleanupVolumeObjects removes, when the test ends, the cluster-wide objects
// of driver: its CSIDriver, its VolumeAttachments and PersistentVolumes
// (finalizers dropped, since its attacher is gone by then) and the CSINode
// entries.
func cleanupVolumeObjects(t *testing.T, driver string) {
	t.Cleanup(func() {
		ctx := context.Background()
		storage := client.StorageV1()
		if vas, err := storage.VolumeAttachments().List(ctx, metav1.ListOptions{}); err == nil {
			for _, va := range vas.Items {
				if va.Spec.Attacher == driver {
					_, _ = storage.VolumeAttachments().Patch(ctx, va.Name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
					_ = storage.VolumeAttachments().Delete(ctx, va.Name, metav1.DeleteOptions{})
				}
			}
		}
		if pvs, err := client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{}); err == nil {
			for _, pv := range pvs.Items {
				if pv.Spec.CSI != nil && pv.Spec.CSI.Driver == driver {
					_, _ = client.CoreV1().PersistentVolumes().Patch(ctx, pv.Name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
					_ = client.CoreV1().PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{})
				}
			}
		}
		if nodes, err := storage.CSINodes().List(ctx, metav1.ListOptions{}); err == nil {
			for _, n := range nodes.Items {
				if slices.ContainsFunc(n.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == driver }) {
					_ = storage.CSINodes().Delete(ctx, n.Name, metav1.DeleteOptions{})
				}
			}
		}
		_ = storage.CSIDrivers().Delete(ctx, driver, metav1.DeleteOptions{})
	})
}

// registerCSINode writes what a kubelet's plugin registration would for a
// simulated node: the node ID of the driver on it, which the
// external-attacher reads.
func registerCSINode(t *testing.T, node, driver string) {
	t.Helper()
	n, err := client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = client.StorageV1().CSINodes().Create(context.Background(), &storagev1.CSINode{
		ObjectMeta: metav1.ObjectMeta{Name: node, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "Node", Name: node, UID: n.UID,
		}}},
		Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: driver, NodeID: node}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// staticVolume creates a directory volume of the driver, a
// PersistentVolume for it with the given access mode and a claim in ns bound
// to it, and waits for the binding. It returns the claim name and the
// volume's unique name, as node status lists it.
func staticVolume(t *testing.T, d *csiDriver, ns, claim string, mode corev1.PersistentVolumeAccessMode) (handle string, unique corev1.UniqueVolumeName) {
	t.Helper()
	handle = "vol-" + randSuffix()
	if err := os.MkdirAll(d.VolumePath(handle), 0o755); err != nil {
		t.Fatal(err)
	}
	size := resource.MustParse("1Gi")
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + claim},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{mode},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              "",
			ClaimRef:                      &corev1.ObjectReference{Namespace: ns, Name: claim},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: d.Name(), VolumeHandle: handle,
			}},
		},
	}
	if _, err := client.CoreV1().PersistentVolumes().Create(context.Background(), pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: claim, Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{mode},
			StorageClassName: ptr.To(""),
			VolumeName:       pv.Name,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
		},
	}
	if _, err := client.CoreV1().PersistentVolumeClaims(ns).Create(context.Background(), pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "claim "+claim+" bound", func() (bool, string) {
		got, err := client.CoreV1().PersistentVolumeClaims(ns).Get(context.Background(), claim, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return got.Status.Phase == corev1.ClaimBound, string(got.Status.Phase)
	})
	return handle, attachdetach.CSIVolumeName(d.Name(), handle)
}

// claimPod is a pod on node that mounts claim at /data and runs command.
func claimPod(name, node, claim string, command ...string) string {
	if len(command) == 0 {
		command = []string{"sleep", "3600"}
	}
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  nodeName: %s
  terminationGracePeriodSeconds: 2
  automountServiceAccountToken: false
  containers:
  - name: app
    image: nodelet.io/sample:1
    command: %s
    volumeMounts:
    - {name: data, mountPath: /data}
  volumes:
  - name: data
    persistentVolumeClaim: {claimName: %s}
`, name, node, jsonList(command), claim)
}

func jsonList(items []string) string {
	quoted := make([]string, len(items))
	for i, s := range items {
		quoted[i] = fmt.Sprintf("%q", s)
	}
	return "[" + strings.Join(quoted, ", ") + "]"
}

// podState sums up a pod's phase and its containers' waiting reasons.
func podState(p *corev1.Pod) string {
	s := string(p.Status.Phase)
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			s += fmt.Sprintf(" %s: %s %s", cs.Name, w.Reason, w.Message)
		}
	}
	return s
}

// attachment returns the VolumeAttachment of handle on node, nil if none.
func attachment(t *testing.T, driver, handle, node string) *storagev1.VolumeAttachment {
	t.Helper()
	va, err := client.StorageV1().VolumeAttachments().Get(context.Background(), csi.AttachmentName(driver, handle, types.NodeName(node)), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return va
}

// nodeVolumes returns the node's status.volumesAttached names and
// status.volumesInUse.
func nodeVolumes(t *testing.T, node string) (attached, inUse []corev1.UniqueVolumeName) {
	t.Helper()
	n, err := client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, av := range n.Status.VolumesAttached {
		attached = append(attached, av.Name)
	}
	return attached, n.Status.VolumesInUse
}

// waitAttached waits until the volume's VolumeAttachment on node says
// attached and the node lists the volume as attached.
func waitAttached(t *testing.T, d *csiDriver, handle, node string) {
	t.Helper()
	unique := attachdetach.CSIVolumeName(d.Name(), handle)
	eventually(t, 60*time.Second, "volume "+handle+" attached to "+node, func() (bool, string) {
		va := attachment(t, d.Name(), handle, node)
		attached, _ := nodeVolumes(t, node)
		return va != nil && va.Status.Attached && slices.Contains(attached, unique),
			fmt.Sprintf("VolumeAttachment %v; node lists %v", describeAttachment(va), attached)
	})
}

// waitDetached waits until the volume's VolumeAttachment on node is gone and
// the node no longer lists the volume as attached.
func waitDetached(t *testing.T, d *csiDriver, handle, node string, timeout time.Duration) {
	t.Helper()
	unique := attachdetach.CSIVolumeName(d.Name(), handle)
	eventually(t, timeout, "volume "+handle+" detached from "+node, func() (bool, string) {
		va := attachment(t, d.Name(), handle, node)
		attached, _ := nodeVolumes(t, node)
		return va == nil && !slices.Contains(attached, unique),
			fmt.Sprintf("VolumeAttachment %v; node lists %v", describeAttachment(va), attached)
	})
}

func describeAttachment(va *storagev1.VolumeAttachment) string {
	if va == nil {
		return "none"
	}
	s := fmt.Sprintf("attached=%v", va.Status.Attached)
	if va.DeletionTimestamp != nil {
		s += " deleting"
	}
	if e := va.Status.AttachError; e != nil {
		s += " attachError=" + e.Message
	}
	if e := va.Status.DetachError; e != nil {
		s += " detachError=" + e.Message
	}
	return s
}

// lastCall returns the last finished call of method for volumeID, and
// whether there is one.
func lastCall(d *csiDriver, method csidriver.Method, volumeID string) (csidriver.Call, bool) {
	calls := d.Calls()
	for i := len(calls) - 1; i >= 0; i-- {
		if c := calls[i]; c.Method == method && c.VolumeID == volumeID && !c.End.IsZero() {
			return c, true
		}
	}
	return csidriver.Call{}, false
}

func countCalls(d *csiDriver, method csidriver.Method, volumeID string, failed bool) int {
	n := 0
	for _, c := range d.Calls() {
		if c.Method == method && c.VolumeID == volumeID && (c.Err != nil) == failed && !c.End.IsZero() {
			n++
		}
	}
	return n
}

// simVolumeNodes runs one agent with n sim nodes and the given config
// (attachDetach settings), and returns their names and the agent's root dir.
func simVolumeNodes(t *testing.T, n int, config string) (nodes []string, rootDir string) {
	t.Helper()
	fleet := uniqueName(t)
	cleanupFleet(t, fleet, n)
	rootDir = t.TempDir()
	args := []string{"--nodes", fmt.Sprint(n), "--node-labels", "e2e/fleet=" + fleet, "--root-dir", rootDir, "--ping-interval", "1s"}
	if config != "" {
		args = append(args, "--config", writeFile(t, "nodelet.yaml", configHeader+"nodeName: "+fleet+"\n"+config))
	}
	startNodelet(t, fleet, args...)
	for i := range n {
		nodes = append(nodes, fmt.Sprintf("%s-%d", fleet, i))
	}
	for _, node := range nodes {
		waitReady(t, node, 30*time.Second)
	}
	return nodes, rootDir
}

// TestVolumeMultiAttach gives a ReadWriteOnce volume to pods on two nodes
// of one agent: the second waits with a Multi-Attach warning naming the
// first, and runs once the first is deleted.
func TestVolumeMultiAttach(t *testing.T) {
	nodes, _ := simVolumeNodes(t, 2, "")
	d := startCSIDriver(t, tempSocket(t), nodes...)
	for _, n := range nodes {
		registerCSINode(t, n, d.Name())
	}
	ns := newNamespace(t)
	handle, _ := staticVolume(t, d, ns, "data", corev1.ReadWriteOnce)

	apply(t, ns, claimPod("first", nodes[0], "data"))
	waitPodPhase(t, ns, "first", "Running", 60*time.Second)
	waitAttached(t, d, handle, nodes[0])

	apply(t, ns, claimPod("second", nodes[1], "data"))
	eventually(t, 60*time.Second, "a Multi-Attach warning on the second pod naming the first", func() (bool, string) {
		out, _ := kubectlErr("get", "events", "-n", ns, "--field-selector", "involvedObject.name=second,type=Warning", "-o", "jsonpath={.items[*].message}")
		return strings.Contains(out, "Multi-Attach") && strings.Contains(out, "first"), out
	})
	if p, err := client.CoreV1().Pods(ns).Get(context.Background(), "second", metav1.GetOptions{}); err != nil || p.Status.Phase != corev1.PodPending {
		t.Fatalf("second pod while the volume is attached elsewhere: %v, want Pending", podStateOrErr(p, err))
	}
	if va := attachment(t, d.Name(), handle, nodes[1]); va != nil {
		t.Errorf("VolumeAttachment on the second node while the first has the volume: %s", describeAttachment(va))
	}

	kubectl(t, "delete", "pod", "-n", ns, "first", "--timeout=60s")
	waitPodPhase(t, ns, "second", "Running", 90*time.Second)
	waitAttached(t, d, handle, nodes[1])
	waitDetached(t, d, handle, nodes[0], 30*time.Second)
}

func podStateOrErr(p *corev1.Pod, err error) string {
	if err != nil {
		return err.Error()
	}
	return podState(p)
}

// unhealthy makes a sim node fail its ping until the test ends, and waits
// for it to be NotReady.
func unhealthy(t *testing.T, rootDir, node string) {
	t.Helper()
	file := filepath.Join(rootDir, "sim", node, "ping-error")
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte("e2e: node made unhealthy"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Healthy again before the namespace goes, so that its pods can.
	t.Cleanup(func() { _ = os.Remove(file) })
	eventually(t, 30*time.Second, "node "+node+" NotReady", func() (bool, string) {
		c, err := nodeCondition(node, corev1.NodeReady)
		if err != nil || c == nil {
			return false, fmt.Sprint(c, err)
		}
		return c.Status != corev1.ConditionTrue, fmt.Sprintf("Ready=%s %s", c.Status, c.Reason)
	})
}

// mountedPodOnUnhealthyNode runs a pod on the volume, makes the node
// unhealthy (its pods wedged, the volume still in use) and force-deletes the
// pod, so that nothing wants the volume but the node still mounts it.
func mountedPodOnUnhealthyNode(t *testing.T, config string) (d *csiDriver, handle, node string) {
	t.Helper()
	nodes, rootDir := simVolumeNodes(t, 1, config)
	node = nodes[0]
	d = startCSIDriver(t, tempSocket(t), node)
	registerCSINode(t, node, d.Name())
	ns := newNamespace(t)
	handle, unique := staticVolume(t, d, ns, "data", corev1.ReadWriteOnce)
	apply(t, ns, claimPod("user", node, "data"))
	waitPodPhase(t, ns, "user", "Running", 60*time.Second)
	waitAttached(t, d, handle, node)
	eventually(t, 30*time.Second, "the volume in use on the node", func() (bool, string) {
		_, inUse := nodeVolumes(t, node)
		return slices.Contains(inUse, unique), fmt.Sprint(inUse)
	})

	unhealthy(t, rootDir, node)
	kubectl(t, "delete", "pod", "-n", ns, "user", "--force", "--grace-period=0")
	eventually(t, 30*time.Second, "the pod gone from the API", func() (bool, string) {
		_, err := client.CoreV1().Pods(ns).Get(context.Background(), "user", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	if _, inUse := nodeVolumes(t, node); !slices.Contains(inUse, unique) {
		t.Fatalf("volumesInUse = %v on the wedged node, want %s still", inUse, unique)
	}
	return d, handle, node
}

// TestVolumeUnhealthyNodeForcedDetach: a volume still mounted on an
// unhealthy node is not detached before maxWaitForUnmount, and is after it.
func TestVolumeUnhealthyNodeForcedDetach(t *testing.T) {
	const maxWait = 20 * time.Second
	d, handle, node := mountedPodOnUnhealthyNode(t, fmt.Sprintf("attachDetach:\n  maxWaitForUnmount: %s\n", maxWait))
	start := time.Now()
	// Watched for most of the wait: the volume stays attached.
	for time.Since(start) < maxWait*3/4 {
		va := attachment(t, d.Name(), handle, node)
		if va == nil || va.DeletionTimestamp != nil {
			t.Fatalf("detached %s after the pod went, before maxWaitForUnmount (%s): %s", time.Since(start).Round(time.Millisecond), maxWait, describeAttachment(va))
		}
		time.Sleep(500 * time.Millisecond) // the observation window's sampling, not a synchronisation
	}
	waitDetached(t, d, handle, node, 60*time.Second)
}

// TestVolumeOutOfServiceDetachesAtOnce: with the out-of-service taint, the
// volume of an unhealthy node is detached without waiting for
// maxWaitForUnmount.
func TestVolumeOutOfServiceDetachesAtOnce(t *testing.T) {
	d, handle, node := mountedPodOnUnhealthyNode(t, "attachDetach:\n  maxWaitForUnmount: 1h\n")
	kubectl(t, "taint", "node", node, "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute")
	waitDetached(t, d, handle, node, 60*time.Second)
}

// TestVolumeDetachFailureKeepsItAttached: while the driver fails to detach,
// the volume stays in the node's volumesAttached and the detach is
// retried; once the driver recovers it is detached.
func TestVolumeDetachFailureKeepsItAttached(t *testing.T) {
	nodes, _ := simVolumeNodes(t, 1, "")
	node := nodes[0]
	d := startCSIDriver(t, tempSocket(t), node)
	registerCSINode(t, node, d.Name())
	ns := newNamespace(t)
	handle, unique := staticVolume(t, d, ns, "data", corev1.ReadWriteOnce)
	apply(t, ns, claimPod("user", node, "data"))
	waitPodPhase(t, ns, "user", "Running", 60*time.Second)
	waitAttached(t, d, handle, node)

	d.FailControllerUnpublish(handle, errors.New("e2e: detach refused"))
	kubectl(t, "delete", "pod", "-n", ns, "user", "--timeout=60s")
	eventually(t, 60*time.Second, "detach failing, retried, the volume still listed as attached", func() (bool, string) {
		va := attachment(t, d.Name(), handle, node)
		attached, _ := nodeVolumes(t, node)
		failed := countCalls(d, csidriver.ControllerUnpublishVolume, handle, true)
		return va != nil && va.Status.DetachError != nil && failed >= 3 && slices.Contains(attached, unique),
			fmt.Sprintf("VolumeAttachment %s; %d failed detaches; node lists %v", describeAttachment(va), failed, attached)
	})

	d.FailControllerUnpublish(handle, nil)
	waitDetached(t, d, handle, node, 60*time.Second)
}
