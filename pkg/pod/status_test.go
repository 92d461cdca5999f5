package pod

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	testingclock "k8s.io/utils/clock/testing"
)

func condition(pod *corev1.PodStatus, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range pod.Conditions {
		if pod.Conditions[i].Type == t {
			return &pod.Conditions[i]
		}
	}
	return nil
}

func TestMergeStatus(t *testing.T) {
	past := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	api := testPod("a", "n", runningStatus)
	api.Status.QOSClass = corev1.PodQOSBestEffort
	api.Status.Conditions = []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: past},
		{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: past},
		{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "Other", LastTransitionTime: past},
	}

	t.Run("an eviction's DisruptionTarget is reported", func(t *testing.T) {
		reported := api.Status.DeepCopy()
		reported.Conditions = []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "TerminationByKubelet"}}
		got := mergeStatus(api, reported)
		if c := condition(got, corev1.DisruptionTarget); c == nil || c.Reason != "TerminationByKubelet" {
			t.Errorf("DisruptionTarget = %+v, want the provider's", c)
		}
	})

	t.Run("others' conditions and fields survive, unchanged times are kept", func(t *testing.T) {
		reported := api.Status.DeepCopy()
		reported.QOSClass = ""
		reported.Conditions = []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()},
			{Type: corev1.DisruptionTarget, Status: corev1.ConditionFalse},
		}
		got := mergeStatus(api, reported)
		if got.QOSClass != corev1.PodQOSBestEffort {
			t.Errorf("QOSClass = %q, want the API's", got.QOSClass)
		}
		if c := condition(got, corev1.DisruptionTarget); c == nil || c.Status != corev1.ConditionTrue || c.Reason != "Other" {
			t.Errorf("DisruptionTarget = %+v, want the API's (not the provider's)", c)
		}
		if c := condition(got, corev1.PodScheduled); c == nil || c.Status != corev1.ConditionTrue {
			t.Errorf("PodScheduled = %+v, want kept", c)
		}
		if c := condition(got, corev1.PodReady); c == nil || !c.LastTransitionTime.Equal(&past) {
			t.Errorf("Ready = %+v, want transition time %v kept", c, past)
		}
	})

	t.Run("Ready follows the containers", func(t *testing.T) {
		reported := api.Status.DeepCopy()
		reported.ContainerStatuses[0].Ready = false
		reported.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		got := mergeStatus(api, reported)
		if c := condition(got, corev1.PodReady); c == nil || c.Status != corev1.ConditionFalse || c.LastTransitionTime.Equal(&past) {
			t.Errorf("Ready = %+v, want False with a new transition time", c)
		}
		if c := condition(got, corev1.ContainersReady); c == nil || c.Status != corev1.ConditionFalse {
			t.Errorf("ContainersReady = %+v, want False", c)
		}
	})

	t.Run("Ready waits for an unready sidecar", func(t *testing.T) {
		withSidecar := api.DeepCopy()
		always := corev1.ContainerRestartPolicyAlways
		withSidecar.Spec.InitContainers = []corev1.Container{{Name: "side", RestartPolicy: &always}}
		reported := api.Status.DeepCopy()
		reported.InitContainerStatuses = []corev1.ContainerStatus{{Name: "side", Ready: false,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
		reported.Conditions = []corev1.PodCondition{{Type: corev1.ContainersReady, Status: corev1.ConditionFalse},
			{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
		got := mergeStatus(withSidecar, reported)
		for _, typ := range []corev1.PodConditionType{corev1.ContainersReady, corev1.PodReady} {
			if c := condition(got, typ); c == nil || c.Status != corev1.ConditionFalse {
				t.Errorf("%s = %+v, want False while the sidecar is not ready", typ, c)
			}
		}
	})

	t.Run("a pod that finished is not ready because it completed", func(t *testing.T) {
		// kwok's pod-complete stage reports a Succeeded pod Ready, its
		// terminated container ready.
		reported := api.Status.DeepCopy()
		reported.Phase = corev1.PodSucceeded
		for i := range reported.ContainerStatuses {
			reported.ContainerStatuses[i].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Completed"}}
		}
		reported.Conditions = []corev1.PodCondition{{Type: corev1.ContainersReady, Status: corev1.ConditionTrue},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, Message: "stale"}}
		got := mergeStatus(api, reported)
		for _, typ := range []corev1.PodConditionType{corev1.ContainersReady, corev1.PodReady} {
			if c := condition(got, typ); c == nil || c.Status != corev1.ConditionFalse || c.Reason != "PodCompleted" || c.Message != "" {
				t.Errorf("%s = %+v, want False, PodCompleted, as the kubelet says it", typ, c)
			}
		}
	})

	t.Run("Ready waits for readiness gates", func(t *testing.T) {
		gated := api.DeepCopy()
		gated.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: "example.com/gate"}}
		got := mergeStatus(gated, api.Status.DeepCopy())
		if c := condition(got, corev1.PodReady); c == nil || c.Status != corev1.ConditionFalse {
			t.Errorf("Ready = %+v, want False until the gate is True", c)
		}
		if c := condition(got, corev1.ContainersReady); c == nil || c.Status != corev1.ConditionTrue {
			t.Errorf("ContainersReady = %+v, want True", c)
		}
	})
}

func TestStatusPatchIsGuardedByUID(t *testing.T) {
	api := testPod("a", "n")
	want := api.Status.DeepCopy()
	want.Phase = corev1.PodFailed
	want.Reason = "OutOfcpu"
	patch, err := statusPatch(api, want)
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Metadata struct{ UID string } `json:"metadata"`
		Status   struct{ Phase, Reason string }
	}
	if err := json.Unmarshal(patch, &m); err != nil {
		t.Fatal(err)
	}
	if m.Metadata.UID != string(api.UID) || m.Status.Phase != "Failed" || m.Status.Reason != "OutOfcpu" {
		t.Errorf("patch = %s, want uid precondition, phase and reason", patch)
	}
}

func TestAsStoredDropsSubSecondTimes(t *testing.T) {
	api := testPod("a", "n", runningStatus)
	stored, _, err := asStored(&api.Status)
	if err != nil {
		t.Fatal(err)
	}
	again, _, err := asStored(stored)
	if err != nil {
		t.Fatal(err)
	}
	if stored.StartTime.Nanosecond() != 0 || !again.StartTime.Equal(stored.StartTime) {
		t.Errorf("start time %v not truncated to the second", stored.StartTime)
	}
}

func TestStaleCacheDoesNotRepeatAWrite(t *testing.T) {
	stale := testPod("a", "n")
	client := fake.NewClientset(stale.DeepCopy())
	clk := testingclock.NewFakeClock(time.Now())
	c := &Controller{client: client, opts: Options{Clock: clk}}
	rec := &podRecord{node: "n", uid: stale.UID}
	reported := stale.DeepCopy()
	runningStatus(reported)
	for range 2 {
		// The cache still holds the pod as it was before the first write,
		// and the new conditions' transition times would be a second later.
		if err := c.updateStatus(context.Background(), rec, stale.DeepCopy(), &reported.Status); err != nil {
			t.Fatal(err)
		}
		clk.Step(time.Second)
	}
	patches := 0
	for _, a := range client.Actions() {
		if a.GetVerb() == "patch" {
			patches++
		}
	}
	if patches != 1 {
		t.Errorf("%d status patches, want 1", patches)
	}
}

// A status written is written again whenever someone else changed it after
// the write: the node lifecycle controller marks the pods of a node it
// takes for NotReady not Ready, each time one is made Ready again, and the
// kubelet makes them Ready again until its node is back. From the second
// marking on, the status to write was the one last written, and nodelet
// took the changed pod for a cache not yet caught up with its write: the
// pods stayed not Ready for good (CI's TestEtcdKilledDuringRollout stopped
// at 195 of 200 available). A cache older than the write still writes
// nothing.
func TestStatusChangedByOthersIsWrittenAgain(t *testing.T) {
	pod := testPod("a", "n")
	pod.ResourceVersion = "10"
	client := fake.NewClientset(pod.DeepCopy())
	c := &Controller{client: client, opts: Options{Clock: testingclock.NewFakeClock(time.Now())}}
	rec := &podRecord{node: "n", uid: pod.UID}
	reported := pod.DeepCopy()
	runningStatus(reported)
	patches := func() int {
		n := 0
		for _, a := range client.Actions() {
			if a.GetVerb() == "patch" {
				n++
			}
		}
		return n
	}
	if err := c.updateStatus(context.Background(), rec, pod.DeepCopy(), &reported.Status); err != nil {
		t.Fatal(err)
	}
	if rec.writtenRV != "10" || patches() != 1 {
		t.Fatalf("written at %q with %d patches, want at 10 with 1", rec.writtenRV, patches())
	}
	stale := pod.DeepCopy()
	stale.ResourceVersion = "9"
	if err := c.updateStatus(context.Background(), rec, stale, &reported.Status); err != nil {
		t.Fatal(err)
	}
	if patches() != 1 {
		t.Fatalf("%d patches after the cache showed the pod from before the write, want 1", patches())
	}
	// The node lifecycle controller marks the pod not Ready, and again
	// when the pod is made Ready while it still takes the node for
	// NotReady: from the second time on, the status to write is the one
	// last written.
	for i, rv := range []string{"12", "14", "16"} {
		marked, err := client.CoreV1().Pods(pod.Namespace).Get(context.Background(), pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ready := condition(&marked.Status, corev1.PodReady)
		if ready == nil || ready.Status != corev1.ConditionTrue {
			t.Fatalf("written Ready condition %+v, want True", ready)
		}
		ready.Status, ready.Reason = corev1.ConditionFalse, "NodeNotReady"
		marked.ResourceVersion = rv
		if err := c.updateStatus(context.Background(), rec, marked, &reported.Status); err != nil {
			t.Fatal(err)
		}
		if patches() != 2+i {
			t.Fatalf("%d patches after the node lifecycle controller marked the pod not Ready %d times, want %d", patches(), i+1, 2+i)
		}
	}
}

// A reported status with podIP or hostIP alone (kwok's general stages
// write them so) is the API's once the API has stored it with both of each
// pair: nothing is written again. In a 5,000-node run it was, once more
// per pod at its deletion.
func TestReportedIPsPairedAsTheAPIStoresThem(t *testing.T) {
	api := testPod("a", "n", runningStatus)
	api.Status.PodIP, api.Status.PodIPs = "10.0.0.5", []corev1.PodIP{{IP: "10.0.0.5"}}
	api.Status.HostIP, api.Status.HostIPs = "192.168.0.1", []corev1.HostIP{{IP: "192.168.0.1"}}
	for name, unpair := range map[string]func(*corev1.PodStatus){
		"podIP and hostIP alone":   func(s *corev1.PodStatus) { s.PodIPs, s.HostIPs = nil, nil },
		"podIPs and hostIPs alone": func(s *corev1.PodStatus) { s.PodIP, s.HostIP = "", "" },
	} {
		t.Run(name, func(t *testing.T) {
			reported := api.Status.DeepCopy()
			unpair(reported)
			got, _, err := asStored(mergeStatus(api, reported))
			if err != nil {
				t.Fatal(err)
			}
			if got.PodIP != "10.0.0.5" || len(got.PodIPs) != 1 || got.HostIP != "192.168.0.1" || len(got.HostIPs) != 1 {
				t.Errorf("merged status has podIP %q podIPs %v hostIP %q hostIPs %v, want both of each pair", got.PodIP, got.PodIPs, got.HostIP, got.HostIPs)
			}
		})
	}
}
