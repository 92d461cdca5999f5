package csi_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/attachdetach"
	"github.com/nodelet/nodelet/pkg/csi"
)

const (
	driver = "dir.csi.nodelet.io"
	handle = "vol-1"
	node   = types.NodeName("node-a")
)

var vaResource = storagev1.SchemeGroupVersion.WithResource("volumeattachments")

func csiVolume(drv, h string) attachdetach.Volume {
	spec := attachdetach.SpecFromPersistentVolume(&corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv-" + h},
		Spec: corev1.PersistentVolumeSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				CSI: &corev1.CSIPersistentVolumeSource{Driver: drv, VolumeHandle: h},
			},
		},
	}, false)
	return attachdetach.Volume{Name: attachdetach.CSIVolumeName(drv, h), Spec: spec}
}

func newPlugin(t *testing.T, client *fake.Clientset, opts csi.Options) *csi.Plugin {
	t.Helper()
	p, err := csi.New(client, opts)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func testContext(t *testing.T) context.Context {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// attachment is a VolumeAttachment of the test volume on node as the plugin
// names it.
func attachment(attached bool) *storagev1.VolumeAttachment {
	pv := "pv-" + handle
	return &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: csi.AttachmentName(driver, handle, node)},
		Spec: storagev1.VolumeAttachmentSpec{
			Attacher: driver,
			NodeName: string(node),
			Source:   storagev1.VolumeAttachmentSource{PersistentVolumeName: &pv},
		},
		Status: storagev1.VolumeAttachmentStatus{Attached: attached},
	}
}

// watchAttachments opens a watch on VolumeAttachments before the code under
// test runs, so the test sees every change it makes.
func watchAttachments(ctx context.Context, t *testing.T, client *fake.Clientset) watch.Interface {
	t.Helper()
	w, err := client.StorageV1().VolumeAttachments().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return w
}

// nextEvent returns the next event of type typ on w.
func nextEvent(ctx context.Context, t *testing.T, w watch.Interface, typ watch.EventType) *storagev1.VolumeAttachment {
	t.Helper()
	for {
		select {
		case <-ctx.Done():
			t.Fatalf("no %s event: %v", typ, ctx.Err())
		case ev := <-w.ResultChan():
			if ev.Type == typ {
				return ev.Object.(*storagev1.VolumeAttachment)
			}
		}
	}
}

// setStatus writes status onto the VolumeAttachment name, as an
// external-attacher would.
func setStatus(ctx context.Context, t *testing.T, client *fake.Clientset, name string, mutate func(*storagev1.VolumeAttachmentStatus)) {
	t.Helper()
	va, err := client.StorageV1().VolumeAttachments().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Error(err)
		return
	}
	mutate(&va.Status)
	if _, err := client.StorageV1().VolumeAttachments().UpdateStatus(ctx, va, metav1.UpdateOptions{}); err != nil {
		t.Error(err)
	}
}

func assertRunning(t *testing.T, done <-chan error, what string) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("%s returned (%v) before the VolumeAttachment said so", what, err)
	default:
	}
}

func TestAttachmentName(t *testing.T) {
	sum := sha256.Sum256([]byte(handle + driver + string(node)))
	want := "csi-" + hex.EncodeToString(sum[:])
	if got := csi.AttachmentName(driver, handle, node); got != want {
		t.Errorf("AttachmentName = %q, want %q", got, want)
	}
	if csi.AttachmentName(driver, handle, "node-b") == want {
		t.Error("AttachmentName does not depend on the node")
	}
}

func TestNewValidates(t *testing.T) {
	lister := storagelisters.NewCSIDriverLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, nil))
	for _, o := range []csi.Options{
		{Timeout: -time.Second},
		{CSIDrivers: lister, AttachRequired: attachdetach.AlwaysAttach},
	} {
		if _, err := csi.New(fake.NewClientset(), o); err == nil {
			t.Errorf("New(%+v) accepted", o)
		}
	}
	if _, err := csi.New(nil, csi.Options{}); err == nil {
		t.Error("New without a client accepted")
	}
}

func TestSupportAndNames(t *testing.T) {
	p := newPlugin(t, fake.NewClientset(), csi.Options{})
	v := csiVolume(driver, handle)
	if !p.CanSupport(v.Spec) {
		t.Error("CSI PersistentVolume not supported")
	}
	if p.CanSupport(attachdetach.SpecFromVolume(&corev1.Volume{Name: "x"})) {
		t.Error("inline volume supported")
	}
	if p.CanSupport(attachdetach.SpecFromPersistentVolume(&corev1.PersistentVolume{}, false)) {
		t.Error("PersistentVolume without spec.csi supported")
	}
	if name, err := p.VolumeName(v.Spec); err != nil || name != attachdetach.CSIVolumeName(driver, handle) {
		t.Errorf("VolumeName = %q, %v", name, err)
	}
	if _, err := p.VolumeName(attachdetach.SpecFromVolume(&corev1.Volume{Name: "x"})); !errors.Is(err, csi.ErrNotCSI) {
		t.Errorf("VolumeName(inline) error = %v, want ErrNotCSI", err)
	}
}

func TestAttachRequired(t *testing.T) {
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, nil)
	for _, d := range []*storagev1.CSIDriver{
		{ObjectMeta: metav1.ObjectMeta{Name: "noattach"}, Spec: storagev1.CSIDriverSpec{AttachRequired: ptr.To(false)}},
		{ObjectMeta: metav1.ObjectMeta{Name: "attach"}, Spec: storagev1.CSIDriverSpec{AttachRequired: ptr.To(true)}},
		{ObjectMeta: metav1.ObjectMeta{Name: "unset"}},
	} {
		if err := indexer.Add(d); err != nil {
			t.Fatal(err)
		}
	}
	p := newPlugin(t, fake.NewClientset(), csi.Options{CSIDrivers: storagelisters.NewCSIDriverLister(indexer)})
	plugins := attachdetach.Plugins{p}
	for drv, want := range map[string]bool{"noattach": false, "attach": true, "unset": true, "no-object": true} {
		spec := csiVolume(drv, handle).Spec
		if got, err := p.AttachRequired(spec); err != nil || got != want {
			t.Errorf("AttachRequired(%s) = %v, %v; want %v", drv, got, err, want)
		}
		found, err := plugins.FindAttachable(spec)
		if err != nil || (found != nil) != want {
			t.Errorf("FindAttachable(%s) = %v, %v; want plugin: %v", drv, found, err, want)
		}
	}

	def := newPlugin(t, fake.NewClientset(), csi.Options{})
	if got, err := def.AttachRequired(csiVolume("noattach", handle).Spec); err != nil || !got {
		t.Errorf("default AttachRequired = %v, %v; want true", got, err)
	}
	if _, err := def.AttachRequired(attachdetach.SpecFromVolume(&corev1.Volume{Name: "x"})); !errors.Is(err, csi.ErrNotCSI) {
		t.Errorf("AttachRequired(inline) error = %v, want ErrNotCSI", err)
	}
}

func TestAttachCreatesAndWaits(t *testing.T) {
	ctx := testContext(t)
	client := fake.NewClientset()
	p := newPlugin(t, client, csi.Options{})
	w := watchAttachments(ctx, t, client)

	done := make(chan error, 1)
	go func() { done <- p.Attach(ctx, csiVolume(driver, handle), node) }()

	va := nextEvent(ctx, t, w, watch.Added)
	if want := csi.AttachmentName(driver, handle, node); va.Name != want {
		t.Errorf("name = %q, want %q", va.Name, want)
	}
	if va.Spec.Attacher != driver || va.Spec.NodeName != string(node) ||
		va.Spec.Source.PersistentVolumeName == nil || *va.Spec.Source.PersistentVolumeName != "pv-"+handle {
		t.Errorf("spec = %+v, want attacher %s, node %s, PV pv-%s", va.Spec, driver, node, handle)
	}
	assertRunning(t, done, "Attach")

	setStatus(ctx, t, client, va.Name, func(s *storagev1.VolumeAttachmentStatus) { s.Attached = true })
	if err := <-done; err != nil {
		t.Fatalf("Attach: %v", err)
	}
}

func TestAttachError(t *testing.T) {
	ctx := testContext(t)
	client := fake.NewClientset()
	p := newPlugin(t, client, csi.Options{})
	w := watchAttachments(ctx, t, client)

	done := make(chan error, 1)
	go func() { done <- p.Attach(ctx, csiVolume(driver, handle), node) }()
	va := nextEvent(ctx, t, w, watch.Added)
	setStatus(ctx, t, client, va.Name, func(s *storagev1.VolumeAttachmentStatus) {
		s.AttachError = &storagev1.VolumeError{Message: "disk is on fire"}
	})
	err := <-done
	if !errors.Is(err, csi.ErrAttach) {
		t.Fatalf("Attach error = %v, want ErrAttach", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "disk is on fire") || !strings.Contains(msg, va.Name) {
		t.Errorf("error %q does not carry the attachError and the VolumeAttachment's name", msg)
	}
}

func TestAttachTimeout(t *testing.T) {
	t.Run("option", func(t *testing.T) {
		client := fake.NewClientset()
		p := newPlugin(t, client, csi.Options{Timeout: 50 * time.Millisecond})
		err := p.Attach(testContext(t), csiVolume(driver, handle), node)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Attach error = %v, want DeadlineExceeded", err)
		}
	})
	t.Run("context", func(t *testing.T) {
		client := fake.NewClientset()
		p := newPlugin(t, client, csi.Options{})
		ctx, cancel := context.WithTimeout(testContext(t), 50*time.Millisecond)
		defer cancel()
		if err := p.Attach(ctx, csiVolume(driver, handle), node); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Attach error = %v, want DeadlineExceeded", err)
		}
	})
}

func TestAttachReusesExisting(t *testing.T) {
	ctx := testContext(t)
	existing := attachment(true)
	existing.Labels = map[string]string{"made-by": "someone-else"}
	client := fake.NewClientset(existing)
	p := newPlugin(t, client, csi.Options{})
	if err := p.Attach(ctx, csiVolume(driver, handle), node); err != nil {
		t.Fatalf("Attach: %v", err)
	}
	list, err := client.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Labels["made-by"] != "someone-else" {
		t.Errorf("VolumeAttachments = %+v, want the existing one only, untouched", list.Items)
	}
}

func TestAttachNotCSI(t *testing.T) {
	p := newPlugin(t, fake.NewClientset(), csi.Options{})
	v := attachdetach.Volume{Name: "x", Spec: attachdetach.SpecFromVolume(&corev1.Volume{Name: "x"})}
	if err := p.Attach(testContext(t), v, node); !errors.Is(err, csi.ErrNotCSI) {
		t.Errorf("Attach error = %v, want ErrNotCSI", err)
	}
}

// finalizeOnDelete makes deletes of VolumeAttachments set a deletion
// timestamp and leave the object, as the external-attacher's finalizer
// does, and reports each delete on the returned channel.
func finalizeOnDelete(client *fake.Clientset) <-chan string {
	deleted := make(chan string, 10)
	client.PrependReactor("delete", "volumeattachments", func(a clienttesting.Action) (bool, runtime.Object, error) {
		name := a.(clienttesting.DeleteAction).GetName()
		obj, err := client.Tracker().Get(vaResource, "", name)
		if err != nil {
			return true, nil, err
		}
		va := obj.(*storagev1.VolumeAttachment).DeepCopy()
		va.DeletionTimestamp = ptr.To(metav1.Now())
		if err := client.Tracker().Update(vaResource, va, ""); err != nil {
			return true, nil, err
		}
		deleted <- name
		return true, nil, nil
	})
	return deleted
}

func TestDetachDeletesAndWaits(t *testing.T) {
	ctx := testContext(t)
	va := attachment(true)
	client := fake.NewClientset(va)
	deleted := finalizeOnDelete(client)
	p := newPlugin(t, client, csi.Options{})

	done := make(chan error, 1)
	go func() { done <- p.Detach(ctx, csiVolume(driver, handle), node) }()
	if name := <-deleted; name != va.Name {
		t.Fatalf("deleted %q, want %q", name, va.Name)
	}
	assertRunning(t, done, "Detach")

	// The external-attacher detaches and removes its finalizer.
	if err := client.Tracker().Delete(vaResource, "", va.Name); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Detach: %v", err)
	}
}

func TestDetachError(t *testing.T) {
	ctx := testContext(t)
	va := attachment(true)
	client := fake.NewClientset(va)
	deleted := finalizeOnDelete(client)
	p := newPlugin(t, client, csi.Options{})

	done := make(chan error, 1)
	go func() { done <- p.Detach(ctx, csiVolume(driver, handle), node) }()
	<-deleted
	setStatus(ctx, t, client, va.Name, func(s *storagev1.VolumeAttachmentStatus) {
		s.DetachError = &storagev1.VolumeError{Message: "still in use"}
	})
	err := <-done
	if !errors.Is(err, csi.ErrDetach) || !strings.Contains(err.Error(), "still in use") {
		t.Fatalf("Detach error = %v, want ErrDetach with the detachError", err)
	}
}

func TestDetachGone(t *testing.T) {
	ctx := testContext(t)
	client := fake.NewClientset(attachment(true))
	p := newPlugin(t, client, csi.Options{})

	// Without a spec (found in node status), by its unique name.
	v := attachdetach.Volume{Name: attachdetach.CSIVolumeName(driver, handle)}
	if err := p.Detach(ctx, v, node); err != nil {
		t.Fatalf("Detach: %v", err)
	}
	_, err := client.StorageV1().VolumeAttachments().Get(ctx, csi.AttachmentName(driver, handle, node), metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("VolumeAttachment still there: %v", err)
	}
	if err := p.Detach(ctx, v, node); err != nil {
		t.Errorf("Detach of a detached volume: %v", err)
	}
	if err := p.Detach(ctx, attachdetach.Volume{Name: "kubernetes.io/other/x"}, node); !errors.Is(err, csi.ErrNotCSI) {
		t.Errorf("Detach of a non-CSI name = %v, want ErrNotCSI", err)
	}
}

func TestVolumesAreAttached(t *testing.T) {
	attached, pending := csiVolume(driver, "a"), csiVolume(driver, "p")
	missing := csiVolume(driver, "m")
	objs := []*storagev1.VolumeAttachment{
		{ObjectMeta: metav1.ObjectMeta{Name: csi.AttachmentName(driver, "a", node)}, Status: storagev1.VolumeAttachmentStatus{Attached: true}},
		{ObjectMeta: metav1.ObjectMeta{Name: csi.AttachmentName(driver, "p", node)}},
		// Attached, but to another node.
		{ObjectMeta: metav1.ObjectMeta{Name: csi.AttachmentName(driver, "m", "node-b")}, Status: storagev1.VolumeAttachmentStatus{Attached: true}},
	}
	want := map[corev1.UniqueVolumeName]bool{attached.Name: true, pending.Name: false, missing.Name: false}
	vs := []attachdetach.Volume{attached, pending, missing}

	t.Run("client", func(t *testing.T) {
		client := fake.NewClientset()
		for _, va := range objs {
			if err := client.Tracker().Add(va); err != nil {
				t.Fatal(err)
			}
		}
		p := newPlugin(t, client, csi.Options{})
		got, err := p.VolumesAreAttached(testContext(t), vs, node)
		if err != nil || !mapsEqual(got, want) {
			t.Errorf("VolumesAreAttached = %v, %v; want %v", got, err, want)
		}
	})
	t.Run("lister", func(t *testing.T) {
		indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, nil)
		for _, va := range objs {
			if err := indexer.Add(va); err != nil {
				t.Fatal(err)
			}
		}
		client := fake.NewClientset()
		p := newPlugin(t, client, csi.Options{VolumeAttachments: storagelisters.NewVolumeAttachmentLister(indexer)})
		got, err := p.VolumesAreAttached(testContext(t), vs, node)
		if err != nil || !mapsEqual(got, want) {
			t.Errorf("VolumesAreAttached = %v, %v; want %v", got, err, want)
		}
		if n := len(client.Actions()); n != 0 {
			t.Errorf("%d API calls with a lister, want none", n)
		}
	})
	t.Run("read error leaves the volume out", func(t *testing.T) {
		client := fake.NewClientset()
		client.PrependReactor("get", "volumeattachments", func(clienttesting.Action) (bool, runtime.Object, error) {
			return true, nil, errors.New("apiserver down")
		})
		p := newPlugin(t, client, csi.Options{})
		got, err := p.VolumesAreAttached(testContext(t), vs, node)
		if err != nil || len(got) != 0 {
			t.Errorf("VolumesAreAttached = %v, %v; want an empty map", got, err)
		}
	})
}

func mapsEqual(a, b map[corev1.UniqueVolumeName]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if bv, ok := b[k]; !ok || bv != v {
			return false
		}
	}
	return true
}

func TestAttachWatchReopened(t *testing.T) {
	ctx := testContext(t)
	client := fake.NewClientset()
	var watches atomic.Int32
	reopened := make(chan struct{})
	client.PrependWatchReactor("volumeattachments", func(clienttesting.Action) (bool, watch.Interface, error) {
		switch watches.Add(1) {
		case 2: // the plugin's first watch: closed by the server at once
			w := watch.NewFake()
			w.Stop()
			return true, w, nil
		case 3:
			close(reopened)
		}
		return false, nil, nil
	})
	p := newPlugin(t, client, csi.Options{})
	w := watchAttachments(ctx, t, client) // the test's own watch is the first

	done := make(chan error, 1)
	go func() { done <- p.Attach(ctx, csiVolume(driver, handle), node) }()
	va := nextEvent(ctx, t, w, watch.Added)
	select {
	case <-reopened:
	case <-ctx.Done():
		t.Fatal("closed watch not opened again")
	}
	setStatus(ctx, t, client, va.Name, func(s *storagev1.VolumeAttachmentStatus) { s.Attached = true })
	if err := <-done; err != nil {
		t.Fatalf("Attach: %v", err)
	}
	if n := watches.Load(); n < 3 {
		t.Errorf("%d watches, want the closed one opened again", n)
	}
}
