// Package cachetrim trims the objects nodelet's informers keep: before a
// cache stores an object it drops what nodelet never reads and never writes
// back, so that thousands of cached pods and nodes cost only what they say.
//
// What it drops is metadata.managedFields, the server-side apply
// bookkeeping, often the largest part of a small object. nodelet never
// reads it, and never sends a cached object back whole: pod and node status
// go out as patches of status, a Node is written from a fresh GET and a
// Lease from the answer to its last write (neither from a cache), and an
// update that leaves managedFields out keeps the API's anyway. A factory can
// also drop named annotations (Dropping): records nodelet writes and reads
// back only from a fresh GET, such as a node's last-applied status.
// The package owns no informer; it must never drop a field a provider, the
// downward API or a write reads (labels, annotations, spec, status).
package cachetrim

import (
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Transform drops from obj, in place, what nodelet never reads. It is a
// cache.TransformFunc: install it with informers.WithTransform (NewFactory
// does) or SharedIndexInformer.SetTransform before the informer starts. It
// is idempotent, and leaves alone what is not an API object.
func Transform(obj any) (any, error) {
	if _, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		// Its object came from the cache: trimmed already.
		return obj, nil
	}
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// Dropping is Transform that also drops the annotations named, which no
// reader of the cache may need.
func Dropping(annotations ...string) cache.TransformFunc {
	return func(obj any) (any, error) {
		obj, _ = Transform(obj)
		// A tombstone, or what is not an API object, has no accessor.
		if m, err := meta.Accessor(obj); err == nil {
			if a := m.GetAnnotations(); a != nil {
				for _, k := range annotations {
					delete(a, k)
				}
			}
		}
		return obj, nil
	}
}

// NewFactory is informers.NewSharedInformerFactoryWithOptions with no
// resync whose informers all trim what they cache with transform
// (Transform, or Dropping's).
func NewFactory(client kubernetes.Interface, transform cache.TransformFunc, opts ...informers.SharedInformerOption) informers.SharedInformerFactory {
	opts = append(opts[:len(opts):len(opts)], informers.WithTransform(transform))
	return informers.NewSharedInformerFactoryWithOptions(client, 0, opts...)
}
