package eviction

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// Reason is the status reason of an evicted pod, and the reason of a pod
// refused under node pressure.
const Reason = "Evicted"

// The keys of the annotations of the kubelet's Evicted event.
const (
	AnnotationOffendingContainers      = "offending_containers"
	AnnotationOffendingContainersUsage = "offending_containers_usage"
	AnnotationOffendingPod             = "offending_pod"
	AnnotationOffendingPodUsage        = "offending_pod_usage"
	AnnotationStarvedResource          = "starved_resource"
)

// EvictionStatus is what an eviction leaves on the pod.
type EvictionStatus struct {
	// Signal is the signal whose threshold was met, Resource what it
	// starved (memory, ephemeral-storage, inodes or pids).
	Signal   Signal
	Resource corev1.ResourceName
	// Message is the pod's status message, the kubelet's with the signal
	// named: "The node was low on resource: memory. Threshold quantity:
	// 100Mi, available: 50Mi (signal memory.available). …".
	Message string
	// Condition is the DisruptionTarget condition (reason
	// TerminationByKubelet) the kubelet adds to the pod.
	Condition corev1.PodCondition
	// Annotations are those of the kubelet's Evicted event on the pod.
	Annotations map[string]string
}

// Apply fails status as the kubelet fails an evicted pod: phase Failed,
// reason Evicted, the message, and the DisruptionTarget condition (whose
// transition time is kept if the pod already had it with that status).
func (s *EvictionStatus) Apply(status *corev1.PodStatus) {
	status.Phase = corev1.PodFailed
	status.Reason = Reason
	status.Message = s.Message
	for i := range status.Conditions {
		c := &status.Conditions[i]
		if c.Type != s.Condition.Type {
			continue
		}
		t := c.LastTransitionTime
		*c = s.Condition
		if c.Status == s.Condition.Status && !t.IsZero() {
			c.LastTransitionTime = t
		}
		return
	}
	status.Conditions = append(status.Conditions, s.Condition)
}

// evictionStatus builds the status of evicting pod for threshold t, in the
// shape of the kubelet's message: the starved resource, the threshold and
// what was available, then each container (and the pod, with pod-level
// requests) using more than it requests.
func evictionStatus(t Threshold, pod *corev1.Pod, ps *statsv1alpha1.PodStats, obs observation, now metav1.Time) EvictionStatus {
	res := signalInfo[t.Signal].resource
	var b strings.Builder
	fmt.Fprintf(&b, "The node was low on resource: %s. ", res)
	threshold := t.Value.Quantity
	if threshold == nil {
		threshold = resource.NewQuantity(t.Value.of(obs.capacity), resource.BinarySI)
	}
	// The kubelet's message stops at the resource; the signal is named too,
	// as the resource alone does not tell nodefs from imagefs.
	fmt.Fprintf(&b, "Threshold quantity: %s, available: %s (signal %s). ", threshold, quantity(t.Signal, obs.available), t.Signal)
	ann := map[string]string{}
	var names, usages []string
	if ps != nil {
		if pr := pod.Spec.Resources; res == corev1.ResourceMemory && pr != nil && ps.Memory != nil && ps.Memory.WorkingSetBytes != nil {
			if req, ok := pr.Requests[corev1.ResourceMemory]; ok {
				used := resource.NewQuantity(int64(*ps.Memory.WorkingSetBytes), resource.BinarySI)
				fmt.Fprintf(&b, "Pod %s was using %s, request is %s, has larger consumption of %s. ", pod.Name, used, &req, res)
				ann[AnnotationOffendingPod] = pod.Name
				ann[AnnotationOffendingPodUsage] = used.String()
			}
		}
		// Ephemeral containers request nothing; the kubelet leaves them out
		// rather than blame them every time.
		specs := map[string]*corev1.Container{}
		for _, list := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
			for i := range list {
				if _, dup := specs[list[i].Name]; !dup {
					specs[list[i].Name] = &list[i]
				}
			}
		}
		for _, cs := range ps.Containers {
			spec, ok := specs[cs.Name]
			if !ok {
				continue
			}
			used := containerUsage(res, &cs)
			req := spec.Resources.Requests[res]
			if used != nil && used.Cmp(req) > 0 {
				fmt.Fprintf(&b, "Container %s was using %s, request is %s, has larger consumption of %s. ", cs.Name, used, &req, res)
				names = append(names, cs.Name)
				usages = append(usages, used.String())
			}
		}
	}
	ann[AnnotationOffendingContainers] = strings.Join(names, ",")
	ann[AnnotationOffendingContainersUsage] = strings.Join(usages, ",")
	ann[AnnotationStarvedResource] = string(res)
	return EvictionStatus{
		Signal:   t.Signal,
		Resource: res,
		Message:  b.String(),
		Condition: corev1.PodCondition{
			Type:               corev1.DisruptionTarget,
			ObservedGeneration: pod.Generation,
			Status:             corev1.ConditionTrue,
			Reason:             corev1.PodReasonTerminationByKubelet,
			Message:            b.String(),
			LastTransitionTime: now,
		},
		Annotations: ann,
	}
}

// containerUsage is what a container uses of res, or nil when the stats do
// not say (or, for inodes and PIDs, the kubelet names no container).
func containerUsage(res corev1.ResourceName, cs *statsv1alpha1.ContainerStats) *resource.Quantity {
	switch res {
	case corev1.ResourceMemory:
		if cs.Memory != nil && cs.Memory.WorkingSetBytes != nil {
			return resource.NewQuantity(int64(*cs.Memory.WorkingSetBytes), resource.BinarySI)
		}
	case corev1.ResourceEphemeralStorage:
		if cs.Rootfs != nil && cs.Rootfs.UsedBytes != nil && cs.Logs != nil && cs.Logs.UsedBytes != nil {
			return resource.NewQuantity(int64(*cs.Rootfs.UsedBytes+*cs.Logs.UsedBytes), resource.BinarySI)
		}
	}
	return nil
}
