package pod

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// podRecord is what the controller remembers of one pod (one UID under a
// key) on one node: the node whose provider was last asked to run it, a
// fingerprint of the status last written, so that a cache that has not
// caught up with that write does not make the same write again, which
// report was last written, and whether the final delete was sent, so that
// it is sent once.
//
// The spec worker and the status worker may handle the same pod at once.
// mu is held across each status write and across the final delete, so
// that they never write the pod at the same time; it guards the fields
// below it. A provider's push never takes it: it only touches the reports.
type podRecord struct {
	node string
	uid  types.UID // guarded by the records' lock

	mu       sync.Mutex
	written  uint64 // fingerprint of the status last written
	reported uint64 // sequence number of the report last written
	// writtenRV is the resourceVersion the API gave the pod for the
	// status last written: the informer's echo of that write carries it.
	writtenRV string
	stale     bool // the last write conflicted: the cache may be behind
	deleted   bool // the final delete was sent
	// zeroGraceSince is when the API's pod was first seen deleted with
	// no grace and still there (finishDeletion).
	zeroGraceSince time.Time
}

// echoes tells whether pod is the informer's echo of the write of the
// report numbered seq: the API's pod at the version that write gave it,
// which needs no comparing again. The caller holds rec.mu.
func (rec *podRecord) echoes(pod *corev1.Pod, seq uint64) bool {
	return !rec.stale && rec.reported == seq && rec.writtenRV != "" && pod.ResourceVersion == rec.writtenRV
}

// records holds the record of each pod key. It is safe for concurrent use.
type records struct {
	mu sync.Mutex
	m  map[string]*podRecord
}

func newRecords() *records {
	return &records{m: map[string]*podRecord{}}
}

// get returns the pod's record, starting a new one when the pod moved or
// was replaced. A record started without a UID (a provider's pod that has
// none) takes the first one it is asked for.
func (r *records) get(key, node string, uid types.UID) *podRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rec, ok := r.m[key]; ok && rec.node == node && (rec.uid == uid || rec.uid == "") {
		rec.uid = uid
		return rec
	}
	rec := &podRecord{node: node, uid: uid}
	r.m[key] = rec
	return rec
}

// matching returns the pod's record if there is one for that node and UID,
// without starting one: only the spec worker starts records.
func (r *records) matching(key, node string, uid types.UID) (*podRecord, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec, ok := r.m[key]
	if !ok || rec.node != node || rec.uid != uid {
		return nil, false
	}
	return rec, true
}

// find returns the pod's record, whatever pod it was started for.
func (r *records) find(key string) (*podRecord, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec, ok := r.m[key]
	return rec, ok
}

// forget drops the pod's record.
func (r *records) forget(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.m, key)
}

// forgetNode forgets the records of every pod on node.
func (r *records) forgetNode(node string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for key, rec := range r.m {
		if rec.node == node {
			delete(r.m, key)
		}
	}
}
