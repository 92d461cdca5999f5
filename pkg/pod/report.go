package pod

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/pkg/podrules"
)

// A report is the status a pod should have, as last told: pushed by its
// provider (provider.PodNotifier), read from its provider by the spec
// worker (GetPod), or decided by the spec worker (a rejection, a lost pod).
// It keeps of the reported pod only what writing it needs: a whole Pod
// (1.2 KB before its status) per pod was a tenth of the agent's heap at
// 5,000 pods.
type report struct {
	uid types.UID
	// static tells that the reported pod is a static pod, whose status
	// goes to the mirror pod carrying hash, its config hash.
	static bool
	hash   string
	status corev1.PodStatus
	// seq numbers the report: it grows with every report of every pod.
	seq uint64
}

// reports keeps the newest report of each pod, by key, until the pod
// leaves the API, as virtual-kubelet keeps the last status received from
// the provider: the status worker writes it without asking the provider
// again. It is safe for concurrent use, and its lock is never held across
// a call, so a provider's push never waits for the API.
type reports struct {
	mu   sync.Mutex
	seq  uint64
	last map[string]report
}

func newReports() *reports {
	return &reports{last: map[string]report{}}
}

// put keeps pod's status as the newest report of the pod under key: the
// last one told wins.
func (r *reports) put(key string, pod *corev1.Pod) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	r.last[key] = newReport(pod, r.seq)
}

// seed keeps pod's status as the report of the pod under key unless one
// is kept already. It is for a status read from a provider that pushes:
// what it pushed is as new, for it pushes every change.
func (r *reports) seed(key string, pod *corev1.Pod) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.last[key]; ok {
		return
	}
	r.seq++
	r.last[key] = newReport(pod, r.seq)
}

// newest returns the newest report of the pod under key.
func (r *reports) newest(key string) (report, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rep, ok := r.last[key]
	return rep, ok
}

// drop forgets the report of the pod under key if it is still the one
// numbered seq: a newer one is kept.
func (r *reports) drop(key string, seq uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rep, ok := r.last[key]; ok && rep.seq == seq {
		delete(r.last, key)
	}
}

// forget drops the report of the pod under key, whatever it is.
func (r *reports) forget(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.last, key)
}

// newReport is the report numbered seq of pod. The status is the
// reporter's to give away, as the provider contract says: it is kept as
// it is, not copied.
func newReport(pod *corev1.Pod, seq uint64) report {
	rep := report{uid: pod.UID, static: podrules.IsStaticPod(pod), status: pod.Status, seq: seq}
	if rep.static {
		rep.hash = pod.Annotations[podrules.ConfigHashAnnotation]
	}
	return rep
}

// fits tells whether the report is about the API's pod: a mirror pod
// takes the status of the static pod it mirrors, any other pod that of a
// pod with its UID (a report without one is taken as the pod's).
func (rep *report) fits(pod *corev1.Pod) bool {
	if podrules.IsMirrorPod(pod) {
		return mirrorWanted(pod, rep.static, rep.hash)
	}
	return !rep.static && (rep.uid == "" || rep.uid == pod.UID)
}
