package pod

import (
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"

	"github.com/nodelet/nodelet/internal/fuzzcheck"
)

// FuzzStatusPatch merges a status the fuzzer makes as a provider would
// report it with a pod's status in the API (others' conditions, readiness
// gates, sidecars), and builds the status patch as updateStatus does.
// Each condition type appears once; Ready and ContainersReady are never
// True while a container is not ready, a gate is not True or the pod does
// not run; others' conditions are kept. Applied to the pod as the API
// server applies it, the patch gives exactly the status wanted, is guarded
// by the pod's UID, touches nothing but the status, and leaves nothing to
// patch again.
func FuzzStatusPatch(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("\x01\x02\x01\x01\x01\x01\x01\x00\x01\x01\x02\x01\x01\x01\x01\x01\x01\x02\x01\x02\x03"))
	f.Add([]byte("\x03\x01\x01\x01\x02\x02\x02\x01\x00\x01\x03\x01\x01\x01\x01\x00\x00\x01\x02\x02\x01\x01\x01\x01\x01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c := fuzzcheck.NewChoices(data)
		pod := &corev1.Pod{}
		pod.Namespace, pod.Name, pod.UID, pod.ResourceVersion = "ns", "p", "uid-1", "5"
		pod.Labels = map[string]string{"app": "x"}
		for i := c.Intn(3) + 1; i > 0; i-- {
			pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: "c" + string(rune('0'+i))})
		}
		if c.Bool() {
			always := corev1.ContainerRestartPolicyAlways
			pod.Spec.InitContainers = []corev1.Container{{Name: "sidecar", RestartPolicy: &always}}
		}
		if c.Bool() {
			pod.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: "example.com/gate"}}
		}
		pod.Status = *genPodStatus(c, pod, true)
		reported := genPodStatus(c, pod, false)

		want, _, err := asStored(mergeStatus(pod, reported))
		if err != nil {
			t.Fatalf("asStored: %v", err)
		}
		now := metav1.NewTime(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
		for i := range want.Conditions {
			if want.Conditions[i].LastTransitionTime.IsZero() {
				want.Conditions[i].LastTransitionTime = now
			}
		}
		checkConditions(t, pod, want)

		patch, err := statusPatch(pod, want)
		if err != nil {
			t.Fatalf("statusPatch: %v", err)
		}
		var guard struct {
			Metadata map[string]any `json:"metadata"`
			Spec     any            `json:"spec"`
		}
		if err := json.Unmarshal(patch, &guard); err != nil || guard.Metadata["uid"] != "uid-1" || len(guard.Metadata) != 1 || guard.Spec != nil {
			t.Fatalf("patch %s is not a status patch guarded by the pod's UID (%v)", patch, err)
		}
		after := applyPodPatch(t, pod, patch)
		if !equality.Semantic.DeepEqual(after.Status, *want) {
			wj, _ := json.Marshal(want)
			aj, _ := json.Marshal(after.Status)
			t.Fatalf("patch %s gives status\n%s\nwant\n%s", patch, aj, wj)
		}
		if !equality.Semantic.DeepEqual(after.ObjectMeta, pod.ObjectMeta) || !equality.Semantic.DeepEqual(after.Spec, pod.Spec) {
			t.Fatalf("patch %s changed more than the status", patch)
		}
		again, err := statusPatch(after, want)
		if err != nil {
			t.Fatal(err)
		}
		if twice := applyPodPatch(t, after, again); !equality.Semantic.DeepEqual(twice.Status, after.Status) {
			t.Fatalf("after patch %s, patch %s still changes the status", patch, again)
		}
	})
}

// genPodStatus makes a pod status: the API's (with conditions of every
// writer) or a provider's report.
func genPodStatus(c *fuzzcheck.Choices, pod *corev1.Pod, api bool) *corev1.PodStatus {
	s := &corev1.PodStatus{Phase: corev1.PodPhase(c.Pick("Running", "Pending", "Succeeded", "Failed", ""))}
	hour := func() metav1.Time {
		return metav1.NewTime(time.Date(2026, 1, 1, c.Intn(12), 0, 0, 0, time.UTC))
	}
	types := []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady, corev1.PodReadyToStartContainers, corev1.DisruptionTarget, "example.com/gate"}
	for n := c.Intn(6); n > 0; n-- {
		typ := types[c.Intn(len(types))]
		if api && condition(s, typ) != nil {
			continue // the API has each type once
		}
		s.Conditions = append(s.Conditions, corev1.PodCondition{
			Type: typ, Status: corev1.ConditionStatus(c.Pick("True", "False", "Unknown")),
			Reason: c.Word("ab", 3), Message: c.Word("a b", 4), LastTransitionTime: hour(),
		})
	}
	for _, ctr := range pod.Spec.Containers {
		if c.Bool() {
			s.ContainerStatuses = append(s.ContainerStatuses, genContainerStatus(c, ctr.Name, hour))
		}
	}
	for _, ctr := range pod.Spec.InitContainers {
		if c.Bool() {
			s.InitContainerStatuses = append(s.InitContainerStatuses, genContainerStatus(c, ctr.Name, hour))
		}
	}
	for _, ip := range []string{"10.0.0.5", "fd00::5"} {
		if c.Bool() {
			s.PodIPs = append(s.PodIPs, corev1.PodIP{IP: ip})
		}
	}
	if len(s.PodIPs) > 0 {
		s.PodIP = s.PodIPs[0].IP
	}
	if c.Bool() {
		s.HostIP = "192.168.1.10"
		s.HostIPs = []corev1.HostIP{{IP: s.HostIP}}
	}
	if c.Bool() {
		t := hour()
		s.StartTime = &t
	}
	if api {
		s.QOSClass = corev1.PodQOSClass(c.Pick("", "BestEffort", "Burstable"))
		s.NominatedNodeName = c.Pick("", "other")
	}
	s.Reason, s.Message = c.Pick("", "Evicted"), c.Word("ab ", 4)
	return s
}

func genContainerStatus(c *fuzzcheck.Choices, name string, hour func() metav1.Time) corev1.ContainerStatus {
	cs := corev1.ContainerStatus{Name: name, Ready: c.Bool(), RestartCount: int32(c.Intn(3)), Image: "img", ImageID: c.Pick("", "sha256:1")}
	switch c.Intn(3) {
	case 0:
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: c.Pick("ContainerCreating", "CrashLoopBackOff")}
	case 1:
		cs.State.Running = &corev1.ContainerStateRunning{StartedAt: hour()}
	default:
		cs.State.Terminated = &corev1.ContainerStateTerminated{ExitCode: int32(c.Intn(3)), Reason: c.Pick("Completed", "Error"), StartedAt: hour(), FinishedAt: hour()}
	}
	return cs
}

// checkConditions fails t unless want's conditions are each of one type,
// Ready and ContainersReady agree with the containers and gates, and the
// API's conditions of other writers are kept.
func checkConditions(t *testing.T, pod *corev1.Pod, want *corev1.PodStatus) {
	t.Helper()
	seen := map[corev1.PodConditionType]bool{}
	for _, cond := range want.Conditions {
		if seen[cond.Type] {
			t.Fatalf("condition %s twice in %+v", cond.Type, want.Conditions)
		}
		seen[cond.Type] = true
	}
	if len(want.ContainerStatuses) > 0 {
		ready := want.Phase == corev1.PodRunning
		for _, cs := range want.ContainerStatuses {
			ready = ready && cs.Ready
		}
		for _, cs := range want.InitContainerStatuses {
			ready = ready && (cs.Name != "sidecar" || cs.Ready)
		}
		if c := condition(want, corev1.ContainersReady); c == nil || (c.Status == corev1.ConditionTrue) != ready {
			t.Fatalf("ContainersReady %+v with containers ready %v", c, ready)
		}
		for _, g := range pod.Spec.ReadinessGates {
			gate := condition(want, g.ConditionType)
			ready = ready && gate != nil && gate.Status == corev1.ConditionTrue
		}
		if c := condition(want, corev1.PodReady); c == nil || (c.Status == corev1.ConditionTrue) != ready {
			t.Fatalf("Ready %+v with the pod ready %v", c, ready)
		}
	}
	for _, cond := range pod.Status.Conditions {
		if ownedConditions[cond.Type] || reportedConditions[cond.Type] {
			continue
		}
		if got := condition(want, cond.Type); got == nil || !equality.Semantic.DeepEqual(*got, cond) {
			t.Fatalf("condition %s of another writer is %+v, want %+v kept", cond.Type, got, cond)
		}
	}
}

// applyPodPatch applies a status patch to a pod as the API server does.
func applyPodPatch(t *testing.T, pod *corev1.Pod, patch []byte) *corev1.Pod {
	t.Helper()
	data, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	out, err := strategicpatch.StrategicMergePatch(data, patch, corev1.Pod{})
	if err != nil {
		t.Fatalf("apply patch %s: %v", patch, err)
	}
	after := &corev1.Pod{}
	if err := json.Unmarshal(out, after); err != nil {
		t.Fatalf("patched pod %s: %v", out, err)
	}
	return after
}
