package csimount

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/pkg/attachdetach"
	"github.com/nodelet/nodelet/pkg/csi"
)

// wait is the error of a volume that waits for the API: without an Event
// reason until it has waited AttachTimeout, then FailedAttachVolume. msg
// starts with "waiting for".
func (m *Manager) wait(uid types.UID, name, msg string) *VolumeError {
	key := string(uid) + "/" + name
	now := m.opts.Clock.Now()
	m.mu.Lock()
	since, ok := m.waitSince[key]
	if !ok {
		since = now
		m.waitSince[key] = now
	}
	m.mu.Unlock()
	if waited := now.Sub(since); waited >= m.opts.AttachTimeout {
		return &VolumeError{Volume: name, Reason: ReasonFailedAttachVolume, Waiting: true,
			Err: fmt.Errorf("timed out after %v %s", waited.Round(time.Second), msg)}
	}
	return &VolumeError{Volume: name, Waiting: true, Err: errors.New(msg)}
}

// stopWaiting forgets when a volume began to wait.
func (m *Manager) stopWaiting(uid types.UID, name string) {
	m.mu.Lock()
	delete(m.waitSince, string(uid)+"/"+name)
	m.mu.Unlock()
}

// want records that the pod needs the volume, which puts it in use.
func (m *Manager) want(uid types.UID, name string, unique corev1.UniqueVolumeName) {
	m.mu.Lock()
	m.podLocked(uid).wanted[name] = unique
	m.mu.Unlock()
	m.changed()
}

// resolve finds the CSI PersistentVolume of a pod's claim. The errors are
// FailedMount, and waiting ones when the claim may yet be bound.
func (m *Manager) resolve(ctx context.Context, pod *corev1.Pod, v *corev1.Volume) (*volumeSpec, *VolumeError) {
	fail := func(waiting bool, format string, args ...any) *VolumeError {
		return &VolumeError{Volume: v.Name, Reason: ReasonFailedMount, Waiting: waiting, Err: fmt.Errorf(format, args...)}
	}
	var claimName string
	readOnly := false
	switch {
	case v.PersistentVolumeClaim != nil:
		claimName, readOnly = v.PersistentVolumeClaim.ClaimName, v.PersistentVolumeClaim.ReadOnly
	case v.Ephemeral != nil:
		claimName = pod.Name + "-" + v.Name
	}
	pvc, err := m.claim(ctx, pod.Namespace, claimName)
	switch {
	case apierrors.IsNotFound(err):
		return nil, fail(true, "persistentvolumeclaim %q not found", claimName)
	case err != nil:
		return nil, fail(true, "get persistentvolumeclaim %q: %w", claimName, err)
	case v.Ephemeral != nil && !metav1.IsControlledBy(pvc, pod):
		return nil, fail(true, "persistentvolumeclaim %q was not created for this pod's ephemeral volume", claimName)
	case pvc.DeletionTimestamp != nil:
		return nil, fail(true, "persistentvolumeclaim %q is being deleted", claimName)
	case pvc.Spec.VolumeName == "" || pvc.Status.Phase != corev1.ClaimBound:
		return nil, fail(true, "persistentvolumeclaim %q is not bound (phase %q)", claimName, pvc.Status.Phase)
	}
	pv, err := m.persistentVolume(ctx, pvc)
	switch {
	case apierrors.IsNotFound(err):
		return nil, fail(true, "persistentvolume %q of persistentvolumeclaim %q not found", pvc.Spec.VolumeName, claimName)
	case err != nil:
		return nil, fail(true, "get persistentvolume %q of persistentvolumeclaim %q: %w", pvc.Spec.VolumeName, claimName, err)
	case pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.UID != pvc.UID:
		return nil, fail(true, "persistentvolume %q is not bound to persistentvolumeclaim %q", pv.Name, claimName)
	}
	src := pv.Spec.CSI
	switch {
	case src == nil:
		return nil, fail(false, "persistentvolume %q of persistentvolumeclaim %q is not a CSI volume: the process provider mounts CSI persistent volumes only", pv.Name, claimName)
	case src.Driver == "" || src.VolumeHandle == "":
		return nil, fail(false, "persistentvolume %q has no CSI driver or volume handle", pv.Name)
	case !csi.ValidDriverName(src.Driver):
		return nil, fail(false, "persistentvolume %q: CSI driver name %q is not usable", pv.Name, src.Driver)
	case pv.Spec.VolumeMode != nil && *pv.Spec.VolumeMode == corev1.PersistentVolumeBlock:
		return nil, fail(false, "persistentvolume %q is a block volume: the process provider mounts file system volumes only", pv.Name)
	}
	return &volumeSpec{
		name: v.Name, pv: pv, source: src,
		unique:   attachdetach.CSIVolumeName(src.Driver, src.VolumeHandle),
		readOnly: readOnly || src.ReadOnly,
	}, nil
}

// claim reads a claim from the cache, or from the API server when the cache
// does not have it bound (it may lag behind).
func (m *Manager) claim(ctx context.Context, namespace, name string) (*corev1.PersistentVolumeClaim, error) {
	pvc, err := m.src.Claims.PersistentVolumeClaims(namespace).Get(name)
	if err == nil && pvc.Spec.VolumeName != "" && pvc.Status.Phase == corev1.ClaimBound {
		return pvc, nil
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, err
	}
	return m.client.CoreV1().PersistentVolumeClaims(namespace).Get(ctx, name, metav1.GetOptions{})
}

// persistentVolume reads a claim's volume from the cache, or from the API
// server when the cache does not have it bound to the claim.
func (m *Manager) persistentVolume(ctx context.Context, pvc *corev1.PersistentVolumeClaim) (*corev1.PersistentVolume, error) {
	pv, err := m.src.Volumes.Get(pvc.Spec.VolumeName)
	if err == nil && pv.Spec.ClaimRef != nil && pv.Spec.ClaimRef.UID == pvc.UID {
		return pv, nil
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, err
	}
	return m.client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
}

// driver returns the CSIDriver object of a driver, nil when it has none.
func (m *Manager) driver(name string) (*storagev1.CSIDriver, error) {
	d, err := m.src.Drivers.Get(name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return d, err
}

// attachment waits, as the kubelet does, until the node reports the volume
// in use (so the controller will not detach it under the mount) and lists it
// as attached, and returns the publish context of its VolumeAttachment.
func (m *Manager) attachment(ctx context.Context, uid types.UID, spec *volumeSpec) (map[string]string, *VolumeError) {
	node, err := m.src.Nodes.Get(m.opts.NodeName)
	if err != nil {
		return nil, m.wait(uid, spec.name, fmt.Sprintf("waiting for node %q to be registered: %v", m.opts.NodeName, err))
	}
	if !slices.Contains(node.Status.VolumesInUse, spec.unique) {
		return nil, m.wait(uid, spec.name, fmt.Sprintf("waiting for %s to be reported in use by node %q", spec, m.opts.NodeName))
	}
	if !slices.ContainsFunc(node.Status.VolumesAttached, func(av corev1.AttachedVolume) bool { return av.Name == spec.unique }) {
		return nil, m.wait(uid, spec.name, fmt.Sprintf("waiting for %s to be attached to node %q", spec, m.opts.NodeName))
	}
	name := csi.AttachmentName(spec.source.Driver, spec.source.VolumeHandle, types.NodeName(m.opts.NodeName))
	va, err := m.src.Attachments.Get(name)
	if apierrors.IsNotFound(err) {
		va, err = m.client.StorageV1().VolumeAttachments().Get(ctx, name, metav1.GetOptions{})
	}
	if err != nil {
		return nil, m.wait(uid, spec.name, fmt.Sprintf("waiting for VolumeAttachment %s of %s: %v", name, spec, err))
	}
	if !va.Status.Attached {
		return nil, m.wait(uid, spec.name, fmt.Sprintf("waiting for VolumeAttachment %s of %s to be attached", name, spec))
	}
	return maps.Clone(va.Status.AttachmentMetadata), nil
}

// secrets reads the Secret a volume names for its driver.
func (m *Manager) secrets(ctx context.Context, ref *corev1.SecretReference) (map[string]string, error) {
	if ref == nil {
		return nil, nil
	}
	s, err := m.client.CoreV1().Secrets(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get secret %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	out := make(map[string]string, len(s.Data))
	for k, v := range s.Data {
		out[k] = string(v)
	}
	return out, nil
}

// volumeContext is the PersistentVolume's volume attributes, with the pod's
// identity when the CSIDriver asks for it (podInfoOnMount).
func volumeContext(pod *corev1.Pod, src *corev1.CSIPersistentVolumeSource, driver *storagev1.CSIDriver) map[string]string {
	out := maps.Clone(src.VolumeAttributes)
	if driver != nil && driver.Spec.PodInfoOnMount != nil && *driver.Spec.PodInfoOnMount {
		if out == nil {
			out = map[string]string{}
		}
		out["csi.storage.k8s.io/pod.name"] = pod.Name
		out["csi.storage.k8s.io/pod.namespace"] = pod.Namespace
		out["csi.storage.k8s.io/pod.uid"] = string(pod.UID)
		out["csi.storage.k8s.io/serviceAccount.name"] = pod.Spec.ServiceAccountName
		out["csi.storage.k8s.io/ephemeral"] = "false"
	}
	return out
}

// keyedLocks are mutexes by volume, made on demand and dropped when unused.
type keyedLocks struct {
	mu    sync.Mutex
	locks map[corev1.UniqueVolumeName]*keyedLock
}

type keyedLock struct {
	mu   sync.Mutex
	refs int
}

// lock locks name and returns its unlock.
func (k *keyedLocks) lock(name corev1.UniqueVolumeName) func() {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[corev1.UniqueVolumeName]*keyedLock{}
	}
	l, ok := k.locks[name]
	if !ok {
		l = &keyedLock{}
		k.locks[name] = l
	}
	l.refs++
	k.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		k.mu.Lock()
		l.refs--
		if l.refs == 0 {
			delete(k.locks, name)
		}
		k.mu.Unlock()
	}
}
