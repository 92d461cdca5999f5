package podservice

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestPodStatus(t *testing.T) {
	created := time.Date(2026, 11, 26, 22, 0, 0, 0, time.UTC)
	started := created.Add(2 * time.Second)
	finished := created.Add(time.Minute)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "app", Image: "app:1"}, {Name: "side", Image: "side:1"},
		}},
	}
	const id = "podservice://ns/web/"
	yes, no := true, false
	mt := metav1.NewTime
	waiting := func(name, image, reason string) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, Image: image, Started: &no,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}}}
	}
	running := func(name, image string) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, Image: image, Ready: true, Started: &yes, ContainerID: id + name,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: mt(started)}}}
	}
	terminated := func(name, image string, code int32, reason string) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, Image: image, Started: &no, ContainerID: id + name,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason,
				ContainerID: id + name, StartedAt: mt(started), FinishedAt: mt(finished)}}}
	}
	conds := func(status corev1.ConditionStatus, reason, message string) []corev1.PodCondition {
		return []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue},
			{Type: corev1.ContainersReady, Status: status, Reason: reason, Message: message},
			{Type: corev1.PodReady, Status: status, Reason: reason, Message: message},
		}
	}
	start := mt(created)
	hostIPs, podIPs := []corev1.HostIP{{IP: "192.0.2.1"}}, []corev1.PodIP{{IP: "10.88.0.3"}}

	for _, tc := range []struct {
		name string
		in   Status
		want corev1.PodStatus
	}{{
		name: "accepted, nothing reported yet",
		in:   Status{Phase: PhasePending, CreatedAt: &created},
		want: corev1.PodStatus{Phase: corev1.PodPending, HostIP: "192.0.2.1", HostIPs: hostIPs, StartTime: &start,
			ContainerStatuses: []corev1.ContainerStatus{waiting("app", "app:1", "ContainerCreating"), waiting("side", "side:1", "ContainerCreating")},
			Conditions:        conds(corev1.ConditionFalse, "ContainersNotReady", "containers with unready status: [app side]")},
	}, {
		name: "running, in the spec's order whatever the service's",
		in: Status{Phase: PhaseRunning, IP: "10.88.0.3", CreatedAt: &created, Containers: []ContainerStatus{
			{Name: "side", State: StateRunning, StartedAt: &started},
			{Name: "app", State: StateRunning, StartedAt: &started},
			{Name: "unknown", State: StateRunning},
		}},
		want: corev1.PodStatus{Phase: corev1.PodRunning, HostIP: "192.0.2.1", HostIPs: hostIPs, PodIP: "10.88.0.3", PodIPs: podIPs,
			StartTime:         &start,
			ContainerStatuses: []corev1.ContainerStatus{running("app", "app:1"), running("side", "side:1")},
			Conditions:        conds(corev1.ConditionTrue, "", "")},
	}, {
		name: "running with one container exited and restarting",
		in: Status{Phase: PhaseRunning, IP: "10.88.0.3", CreatedAt: &created, Containers: []ContainerStatus{
			{Name: "app", State: StateRunning, StartedAt: &started},
			{Name: "side", State: StateWaiting, Reason: "CrashLoopBackOff", Message: "back-off", Restarts: 3},
		}},
		want: corev1.PodStatus{Phase: corev1.PodRunning, HostIP: "192.0.2.1", HostIPs: hostIPs, PodIP: "10.88.0.3", PodIPs: podIPs,
			StartTime: &start,
			ContainerStatuses: []corev1.ContainerStatus{running("app", "app:1"), {Name: "side", Image: "side:1", Started: &no, RestartCount: 3,
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off"}}}},
			Conditions: conds(corev1.ConditionFalse, "ContainersNotReady", "containers with unready status: [side]")},
	}, {
		name: "succeeded",
		in: Status{Phase: PhaseSucceeded, IP: "10.88.0.3", CreatedAt: &created, Containers: []ContainerStatus{
			{Name: "app", State: StateTerminated, StartedAt: &started, FinishedAt: &finished},
			{Name: "side", State: StateTerminated, StartedAt: &started, FinishedAt: &finished},
		}},
		want: corev1.PodStatus{Phase: corev1.PodSucceeded, HostIP: "192.0.2.1", HostIPs: hostIPs, PodIP: "10.88.0.3", PodIPs: podIPs,
			StartTime:         &start,
			ContainerStatuses: []corev1.ContainerStatus{terminated("app", "app:1", 0, "Completed"), terminated("side", "side:1", 0, "Completed")},
			Conditions:        conds(corev1.ConditionFalse, "PodCompleted", "")},
	}, {
		name: "failed, with the service's message and reasons",
		in: Status{Phase: PhaseFailed, Message: "out of memory", IP: "10.88.0.3", CreatedAt: &created, Containers: []ContainerStatus{
			{Name: "app", State: StateTerminated, ExitCode: 137, Reason: "OOMKilled", StartedAt: &started, FinishedAt: &finished},
			{Name: "side", State: StateTerminated, ExitCode: 1, StartedAt: &started, FinishedAt: &finished},
		}},
		want: corev1.PodStatus{Phase: corev1.PodFailed, Message: "out of memory", HostIP: "192.0.2.1", HostIPs: hostIPs,
			PodIP: "10.88.0.3", PodIPs: podIPs, StartTime: &start,
			ContainerStatuses: []corev1.ContainerStatus{terminated("app", "app:1", 137, "OOMKilled"), terminated("side", "side:1", 1, "Error")},
			Conditions:        conds(corev1.ConditionFalse, "PodCompleted", "")},
	}, {
		name: "a phase the provider does not know",
		in:   Status{Phase: "Hibernating"},
		want: corev1.PodStatus{Phase: corev1.PodPending, Reason: "UnknownServicePhase", Message: `the pod service reports phase "Hibernating"`,
			HostIP: "192.0.2.1", HostIPs: hostIPs,
			ContainerStatuses: []corev1.ContainerStatus{waiting("app", "app:1", "ContainerCreating"), waiting("side", "side:1", "ContainerCreating")},
			Conditions:        conds(corev1.ConditionFalse, "ContainersNotReady", "containers with unready status: [app side]")},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := podStatus(pod, tc.in, "192.0.2.1")
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("podStatus (-want +got):\n%s", diff)
			}
		})
	}
}

func TestToService(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "u1"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "app", Image: "app:1", Command: []string{"serve"}, Args: []string{"--port", "80"},
			Env: []corev1.EnvVar{
				{Name: "A", Value: "1"},
				{Name: "FROM_SECRET", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{Key: "k"}}},
				{Name: "B", Value: "2"},
			},
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")},
				Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"),
					corev1.ResourceMemory: resource.MustParse("128Mi")},
			},
		}}},
	}
	want := Pod{Node: "n1", Namespace: "ns", Name: "web", UID: "u1", Containers: []Container{{
		Name: "app", Image: "app:1", Command: []string{"serve"}, Args: []string{"--port", "80"},
		Env: []EnvVar{{Name: "A", Value: "1"}, {Name: "B", Value: "2"}},
		CPU: "250m", Memory: "128Mi",
	}}}
	if diff := cmp.Diff(want, toService(pod, "n1")); diff != "" {
		t.Errorf("toService (-want +got):\n%s", diff)
	}
}
