package pod

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/podrules"
)

// ownedConditions are the pod conditions the node agent is responsible for.
// Conditions of other types (readiness gates, DisruptionTarget, …) belong to
// other writers and are kept as the API has them.
var ownedConditions = map[corev1.PodConditionType]bool{
	corev1.PodReadyToStartContainers: true,
	corev1.PodInitialized:            true,
	corev1.ContainersReady:           true,
	corev1.PodReady:                  true,
}

// reportedConditions are conditions others own that the provider may
// report all the same: PodScheduled, and the DisruptionTarget (True only)
// of a pod the node evicts. When it does not, the API's are kept.
var reportedConditions = map[corev1.PodConditionType]bool{
	corev1.PodScheduled:     true,
	corev1.DisruptionTarget: true,
}

// updateStatus patches the pod's status to what was reported, merged with
// what others own, when it differs from what the API has. A conflict (the
// pod was replaced, or the API would not take the patch now) is returned,
// wrapped, for the caller to retry.
func (c *Controller) updateStatus(ctx context.Context, rec *podRecord, pod *corev1.Pod, reported *corev1.PodStatus) error {
	want, data, err := asStored(mergeStatus(pod, reported))
	if err != nil {
		return err
	}
	if equality.Semantic.DeepEqual(&pod.Status, want) {
		return nil
	}
	// The fingerprint leaves out the times of new transitions, which
	// differ on every call: a stale cache must not repeat a write only
	// because a second has passed.
	h := fnv.New64a()
	h.Write(data)
	sum := h.Sum64()
	if rec.written == sum && !changedSince(pod, rec.writtenRV) {
		// Written already; the cache has not caught up yet.
		return nil
	}
	now := metav1.NewTime(c.opts.Clock.Now()).Rfc3339Copy()
	for i := range want.Conditions {
		if want.Conditions[i].LastTransitionTime.IsZero() {
			want.Conditions[i].LastTransitionTime = now
		}
	}
	patch, err := statusPatch(pod, want)
	if err != nil {
		return err
	}
	patched, err := c.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if apierrors.IsNotFound(err) {
		// Deleted: the informer brings the next state.
		return nil
	}
	if err != nil {
		return fmt.Errorf("patch pod status: %w", err)
	}
	rec.written = sum
	rec.writtenRV = patched.ResourceVersion
	c.metrics.observeStart(pod, want, now.Time)
	klog.FromContext(ctx).V(3).Info("Patched pod status", "phase", want.Phase)
	return nil
}

// changedSince tells whether pod, as the cache holds it, was written after
// the write at resource version rv: then someone else changed its status
// since (the node lifecycle controller marks the pods of a node it takes
// for NotReady not Ready), and what was written must be written again. A
// cache that holds the write itself or an older pod has not; nor, for
// want of an order, does a resource version that is not an integer.
func changedSince(pod *corev1.Pod, rv string) bool {
	cmp, err := resourceversion.CompareResourceVersion(pod.ResourceVersion, rv)
	return err == nil && cmp > 0
}

// mergeStatus returns the status to write: the provider's, with the
// conditions and fields it does not own taken from the API, condition times
// kept where nothing changed, and Ready kept consistent with the containers.
// A condition that changed is left without a transition time, for the
// caller to stamp.
func mergeStatus(pod *corev1.Pod, reported *corev1.PodStatus) *corev1.PodStatus {
	want := reported.DeepCopy()
	pairIPs(want)
	cur := &pod.Status
	if want.QOSClass == "" {
		want.QOSClass = cur.QOSClass
	}
	if want.NominatedNodeName == "" {
		want.NominatedNodeName = cur.NominatedNodeName
	}

	byType := map[corev1.PodConditionType]corev1.PodCondition{}
	for _, cond := range cur.Conditions {
		byType[cond.Type] = cond
	}
	var conds []corev1.PodCondition
	seen := map[corev1.PodConditionType]bool{}
	for _, cond := range want.Conditions {
		if seen[cond.Type] || (!ownedConditions[cond.Type] && !reportedConditions[cond.Type]) ||
			(cond.Type == corev1.DisruptionTarget && cond.Status != corev1.ConditionTrue) {
			continue // a duplicate, or not the provider's to report
		}
		seen[cond.Type] = true
		conds = append(conds, cond)
	}
	// Keep others' conditions, and PodScheduled if the provider left it out.
	for _, cond := range cur.Conditions {
		if !seen[cond.Type] && !ownedConditions[cond.Type] {
			conds = append(conds, cond)
			seen[cond.Type] = true
		}
	}
	conds = consistentReady(pod, want, conds)
	for i := range conds {
		old, ok := byType[conds[i].Type]
		if ok && old.Status == conds[i].Status {
			conds[i].LastTransitionTime = old.LastTransitionTime
			if conds[i].Reason == old.Reason && conds[i].Message == old.Message {
				conds[i].LastProbeTime = old.LastProbeTime
			}
		} else {
			conds[i].LastTransitionTime = metav1.Time{}
		}
	}
	want.Conditions = conds
	return want
}

// pairIPs fills podIPs from podIP and hostIPs from hostIP, or the other way
// round, as the API server does when it stores a status that has only one
// of a pair (kwok's general stages write podIP alone; so may a provider).
// Left unpaired, the status would differ from the API's at every
// comparison, and be written again at every event of the pod.
func pairIPs(s *corev1.PodStatus) {
	switch {
	case len(s.PodIPs) == 0 && s.PodIP != "":
		s.PodIPs = []corev1.PodIP{{IP: s.PodIP}}
	case s.PodIP == "" && len(s.PodIPs) > 0:
		s.PodIP = s.PodIPs[0].IP
	}
	switch {
	case len(s.HostIPs) == 0 && s.HostIP != "":
		s.HostIPs = []corev1.HostIP{{IP: s.HostIP}}
	case s.HostIP == "" && len(s.HostIPs) > 0:
		s.HostIP = s.HostIPs[0].IP
	}
}

// consistentReady makes ContainersReady and Ready agree with the container
// statuses and the pod's readiness gates: Ready is never True while a
// container is not ready or a gate is not satisfied.
func consistentReady(pod *corev1.Pod, status *corev1.PodStatus, conds []corev1.PodCondition) []corev1.PodCondition {
	if len(status.ContainerStatuses) == 0 {
		return conds
	}
	containersReady := status.Phase == corev1.PodRunning
	for _, cs := range status.ContainerStatuses {
		containersReady = containersReady && cs.Ready
	}
	// Restartable init containers (sidecars) count as the containers do.
	sidecars := map[string]bool{}
	for _, c := range pod.Spec.InitContainers {
		if podrules.IsSidecar(&c) {
			sidecars[c.Name] = true
		}
	}
	for _, cs := range status.InitContainerStatuses {
		if sidecars[cs.Name] {
			containersReady = containersReady && cs.Ready
		}
	}
	ready := containersReady
	gates := map[corev1.PodConditionType]bool{}
	for _, cond := range conds {
		gates[cond.Type] = cond.Status == corev1.ConditionTrue
	}
	for _, g := range pod.Spec.ReadinessGates {
		ready = ready && gates[g.ConditionType]
	}
	// Why not, as the kubelet says it: a pod that finished is not ready
	// because it completed or failed.
	notReady := podrules.ReasonNotReady
	switch status.Phase {
	case corev1.PodSucceeded:
		notReady = podrules.ReasonPodCompleted
	case corev1.PodFailed:
		notReady = podrules.ReasonPodFailed
	}
	set := func(t corev1.PodConditionType, ok bool) {
		s := corev1.ConditionFalse
		if ok {
			s = corev1.ConditionTrue
		}
		for i := range conds {
			if conds[i].Type == t {
				if conds[i].Status != s {
					conds[i].Status = s
					conds[i].Reason, conds[i].Message = notReady, ""
					if ok {
						conds[i].Reason = ""
					}
				}
				return
			}
		}
		cond := corev1.PodCondition{Type: t, Status: s}
		if !ok {
			cond.Reason = notReady
		}
		conds = append(conds, cond)
	}
	set(corev1.ContainersReady, containersReady)
	set(corev1.PodReady, ready)
	return conds
}

// asStored returns status as the API stores it (times to the second), so
// that comparing it with the API's copy finds only real changes.
// It also returns the status's JSON.
func asStored(status *corev1.PodStatus) (*corev1.PodStatus, []byte, error) {
	data, err := json.Marshal(status)
	if err != nil {
		return nil, nil, fmt.Errorf("marshal pod status: %w", err)
	}
	out := &corev1.PodStatus{}
	if err := json.Unmarshal(data, out); err != nil {
		return nil, nil, fmt.Errorf("unmarshal pod status: %w", err)
	}
	return out, data, nil
}

// statusPatch builds a strategic merge patch from the pod's status to want,
// guarded by the pod's UID so that it never lands on a replacement. Only
// the statuses are marshalled, and the guard is put in front of what the
// patch holds rather than decoding and encoding the patch again.
func statusPatch(pod *corev1.Pod, want *corev1.PodStatus) ([]byte, error) {
	type statusOnly struct {
		Status *corev1.PodStatus `json:"status"`
	}
	oldJSON, err := json.Marshal(statusOnly{&pod.Status})
	if err != nil {
		return nil, fmt.Errorf("marshal pod status: %w", err)
	}
	newJSON, err := json.Marshal(statusOnly{want})
	if err != nil {
		return nil, fmt.Errorf("marshal pod status: %w", err)
	}
	patch, err := strategicpatch.CreateTwoWayMergePatch(oldJSON, newJSON, corev1.Pod{})
	if err != nil {
		return nil, fmt.Errorf("create pod status patch: %w", err)
	}
	uid, err := json.Marshal(string(pod.UID))
	if err != nil {
		return nil, fmt.Errorf("marshal pod UID: %w", err)
	}
	out := make([]byte, 0, len(patch)+len(uid)+16)
	out = append(append(append(out, `{"metadata":{"uid":`...), uid...), '}')
	if body := bytes.TrimSpace(patch); len(body) > 2 { // more than {}
		out = append(append(out, ','), body[1:]...)
	} else {
		out = append(out, '}')
	}
	return out, nil
}
