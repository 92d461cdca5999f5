package csi_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/csi"
)

// runRegistrar runs a registrar of node under root with a short scan
// interval until the test ends.
func runRegistrar(t *testing.T, client *fake.Clientset, root string) {
	t.Helper()
	r, err := csi.NewRegistrar(client, string(node), root, csi.RegistrarOptions{ScanInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// waitForCSINode polls the CSINode until check accepts it.
func waitForCSINode(t *testing.T, client *fake.Clientset, what string, check func(*storagev1.CSINode) bool) *storagev1.CSINode {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var last *storagev1.CSINode
	for time.Now().Before(deadline) {
		got, err := client.StorageV1().CSINodes().Get(context.Background(), string(node), metav1.GetOptions{})
		if err == nil {
			last = got
			if check(got) {
				return got
			}
		}
		time.Sleep(5 * time.Millisecond) // polling interval, not synchronisation
	}
	t.Fatalf("CSINode never %s; last seen %+v", what, last)
	return nil
}

// nodeGets counts the reads of the Node.
func nodeGets(client *fake.Clientset) int {
	n := 0
	for _, a := range client.Actions() {
		if a.GetVerb() == "get" && a.GetResource().Resource == "nodes" {
			n++
		}
	}
	return n
}

func nodeObject() *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: string(node), UID: "node-uid"}}
}

func TestRegistrarWritesCSINode(t *testing.T) {
	root := t.TempDir()
	client := fake.NewClientset(nodeObject())
	_, stopDriver := serve(t, root, &fakeDriver{name: driver, nodeID: "id-a", maxVolumes: 7, topology: map[string]string{"zone": "z1", "rack": "r1"}})
	_, stopOther := serve(t, root, &fakeDriver{name: "other.csi.io", nodeID: "id-b"})
	runRegistrar(t, client, root)

	want := []storagev1.CSINodeDriver{
		{Name: driver, NodeID: "id-a", TopologyKeys: []string{"rack", "zone"}, Allocatable: &storagev1.VolumeNodeResources{Count: ptr.To[int32](7)}},
		{Name: "other.csi.io", NodeID: "id-b"},
	}
	got := waitForCSINode(t, client, "listed both drivers", func(n *storagev1.CSINode) bool {
		return equality.Semantic.DeepEqual(n.Spec.Drivers, want)
	})
	if refs := got.OwnerReferences; len(refs) != 1 || refs[0].Kind != "Node" || refs[0].Name != string(node) || refs[0].UID != "node-uid" {
		t.Errorf("owner references = %+v, want the Node", refs)
	}

	stopOther()
	waitForCSINode(t, client, "dropped the driver whose socket went", func(n *storagev1.CSINode) bool {
		return equality.Semantic.DeepEqual(n.Spec.Drivers, want[:1])
	})

	// The driver restarts with another node ID: its new socket is asked again.
	stopDriver()
	serve(t, root, &fakeDriver{name: driver, nodeID: "id-a2"})
	waitForCSINode(t, client, "took the restarted driver's node ID", func(n *storagev1.CSINode) bool {
		return len(n.Spec.Drivers) == 1 && n.Spec.Drivers[0].NodeID == "id-a2" && n.Spec.Drivers[0].Allocatable == nil
	})
}

func TestRegistrarWaitsForTheNodeAndKeepsOthersOwners(t *testing.T) {
	root := t.TempDir()
	other := metav1.OwnerReference{APIVersion: "example.io/v1", Kind: "Thing", Name: "x", UID: "thing-uid"}
	stale := metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: string(node), UID: "old-node-uid"}
	client := fake.NewClientset(&storagev1.CSINode{
		ObjectMeta: metav1.ObjectMeta{Name: string(node), OwnerReferences: []metav1.OwnerReference{other, stale}},
		Spec:       storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: "gone.csi.io", NodeID: "old"}}},
	})
	serve(t, root, &fakeDriver{name: driver, nodeID: "id-a"})
	runRegistrar(t, client, root)

	// Without the Node the CSINode is left alone: its owner needs the UID.
	deadline := time.Now().Add(10 * time.Second)
	for nodeGets(client) < 3 {
		if time.Now().After(deadline) {
			t.Fatal("the registrar never looked for the Node")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got, _ := client.StorageV1().CSINodes().Get(context.Background(), string(node), metav1.GetOptions{}); got.Spec.Drivers[0].Name != "gone.csi.io" {
		t.Fatalf("CSINode written before the Node exists: %+v", got.Spec.Drivers)
	}
	if _, err := client.CoreV1().Nodes().Create(context.Background(), nodeObject(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := waitForCSINode(t, client, "took over the driver list", func(n *storagev1.CSINode) bool {
		return len(n.Spec.Drivers) == 1 && n.Spec.Drivers[0].Name == driver && n.Spec.Drivers[0].NodeID == "id-a"
	})
	if refs := got.OwnerReferences; len(refs) != 2 || refs[0] != other || refs[1].UID != "node-uid" {
		t.Errorf("owner references = %+v, want the other owner kept and the stale Node replaced", refs)
	}
}

func TestRegistrarRefusesADriverInTheWrongDirectory(t *testing.T) {
	root := t.TempDir()
	client := fake.NewClientset(nodeObject())
	d := &fakeDriver{name: "real.csi.io", nodeID: "id-a"}
	socket, _ := serve(t, root, d)
	// The socket is found under the wrong name.
	wrong := csi.SocketPath(root, "fake.csi.io")
	if err := os.MkdirAll(filepath.Dir(wrong), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(socket, wrong); err != nil {
		t.Fatal(err)
	}
	runRegistrar(t, client, root)
	got := waitForCSINode(t, client, "created", func(*storagev1.CSINode) bool { return true })
	if len(got.Spec.Drivers) != 0 {
		t.Errorf("drivers = %+v, want none: the driver's name is not its directory's", got.Spec.Drivers)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(d.called()) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if calls := d.called(); !slices.Contains(calls, "GetPluginInfo") || slices.Contains(calls, "NodeGetInfo") {
		t.Errorf("calls = %v, want GetPluginInfo and no NodeGetInfo", calls)
	}
}

func TestNewRegistrarValidates(t *testing.T) {
	if _, err := csi.NewRegistrar(nil, "", "relative", csi.RegistrarOptions{ScanInterval: -1}); err == nil {
		t.Error("NewRegistrar accepted no client, no node name, a relative root and a negative interval")
	}
}
