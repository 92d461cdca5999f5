package attachdetach

import (
	corev1 "k8s.io/api/core/v1"
)

// csiPluginName prefixes the unique names of CSI volumes, as the kubelet and
// the attach/detach controller name them in node status.
const csiPluginName = "kubernetes.io/csi"

// Spec is a volume that a pod uses, in the form attachers need it: a
// PersistentVolume (with the read-only flag of the pod's claim) or a volume
// inline in the pod spec. Exactly one of PersistentVolume and Volume is set.
// A Spec is never modified once built; it may be shared between goroutines.
type Spec struct {
	PersistentVolume *corev1.PersistentVolume
	Volume           *corev1.Volume
	ReadOnly         bool
}

// SpecFromPersistentVolume returns the spec of pv, copied so that later
// changes to an informer's object cannot reach it.
func SpecFromPersistentVolume(pv *corev1.PersistentVolume, readOnly bool) *Spec {
	return &Spec{PersistentVolume: pv.DeepCopy(), ReadOnly: readOnly}
}

// SpecFromVolume returns the spec of a pod's inline volume, copied.
func SpecFromVolume(v *corev1.Volume) *Spec {
	return &Spec{Volume: v.DeepCopy()}
}

// Name is the name users know the volume by: the PersistentVolume's name, or
// the inline volume's name in its pod. Events use it.
func (s *Spec) Name() string {
	switch {
	case s == nil:
		return ""
	case s.PersistentVolume != nil:
		return s.PersistentVolume.Name
	case s.Volume != nil:
		return s.Volume.Name
	}
	return ""
}

// CSI returns the CSI source of a CSI PersistentVolume, nil for any other.
func (s *Spec) CSI() *corev1.CSIPersistentVolumeSource {
	if s == nil || s.PersistentVolume == nil {
		return nil
	}
	return s.PersistentVolume.Spec.CSI
}

// MultiAttachAllowed reports whether the volume may be attached to several
// nodes at once. For a PersistentVolume its access modes say so:
// ReadWriteMany or ReadOnlyMany allow it; ReadWriteOnce, ReadWriteOncePod or
// no access mode at all do not. An inline volume has no such information
// and is allowed, except the disk types known to fail slowly when attached
// twice; its attacher must refuse a second node itself.
func (s *Spec) MultiAttachAllowed() bool {
	if s == nil {
		return false
	}
	if v := s.Volume; v != nil && (v.AzureDisk != nil || v.Cinder != nil) {
		return false
	}
	if pv := s.PersistentVolume; pv != nil {
		for _, m := range pv.Spec.AccessModes {
			if m == corev1.ReadWriteMany || m == corev1.ReadOnlyMany {
				return true
			}
		}
		return false
	}
	return true
}

// CSIVolumeName is the unique name of the CSI volume handle of driver, the
// name node status lists in volumesAttached and volumesInUse.
func CSIVolumeName(driver, handle string) corev1.UniqueVolumeName {
	return corev1.UniqueVolumeName(csiPluginName + "/" + driver + "^" + handle)
}
