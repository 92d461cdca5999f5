package virtualkubelet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	vknode "github.com/virtual-kubelet/virtual-kubelet/node"
	vkapi "github.com/virtual-kubelet/virtual-kubelet/node/api"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodelet/nodelet/pkg/provider"
)

func is[T any](v any) bool {
	_, ok := v.(T)
	return ok
}

func mustNew(t *testing.T, pods vknode.PodLifecycleHandler, nodes vknode.NodeProvider) Adapter {
	t.Helper()
	a, err := New(pods, nodes)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return a
}

// TestCapabilities checks that the adapter offers exactly the optional
// interfaces the wrapped provider has: nodelet never polls a PodNotifier.
func TestCapabilities(t *testing.T) {
	for _, v := range []struct {
		name           string
		pods           vknode.PodLifecycleHandler
		notifies, full bool
	}{
		{"PodLifecycleHandler", newFakePods(), false, false},
		{"PodNotifier", struct {
			*fakePods
			*notifier
		}{newFakePods(), &notifier{}}, true, false},
		{"nodeutil.Provider", newFullPods(), false, true},
		{"nodeutil.Provider and PodNotifier", struct {
			*fullPods
			*notifier
		}{newFullPods(), &notifier{}}, true, true},
	} {
		t.Run(v.name, func(t *testing.T) {
			a := mustNew(t, v.pods, nil)
			for _, c := range []struct {
				iface     string
				has, want bool
			}{
				{"PodLifecycleHandler", is[provider.PodLifecycleHandler](a), true},
				{"NodeProvider", is[provider.NodeProvider](a), true},
				{"NodeNotifier", is[provider.NodeNotifier](a), true},
				{"PodNotifier", is[provider.PodNotifier](a), v.notifies},
				{"PodRestorer", is[provider.PodRestorer](a), false},
				{"LogsProvider", is[provider.LogsProvider](a), v.full},
				{"ExecProvider", is[provider.ExecProvider](a), v.full},
				{"AttachProvider", is[provider.AttachProvider](a), v.full},
				{"PortForwardProvider", is[provider.PortForwardProvider](a), v.full},
				{"StatsProvider", is[provider.StatsProvider](a), v.full},
				{"NodeStatsProvider", is[provider.NodeStatsProvider](a), v.full},
			} {
				if c.has != c.want {
					t.Errorf("implements provider.%s: %t, want %t", c.iface, c.has, c.want)
				}
			}
		})
	}
}

func TestNewRefusesNilPods(t *testing.T) {
	if _, err := New(nil, nil); err == nil {
		t.Fatal("New(nil, nil) returned no error")
	}
}

func TestPodNotifierPassesPods(t *testing.T) {
	n := &notifier{}
	a := mustNew(t, struct {
		*fakePods
		*notifier
	}{newFakePods(), n}, nil)
	var got []*corev1.Pod
	a.(provider.PodNotifier).NotifyPods(t.Context(), func(pod *corev1.Pod) { got = append(got, pod) })
	pod := testPod("web", "uid-1", corev1.PodSucceeded)
	n.push(pod)
	if len(got) != 1 || got[0] != pod {
		t.Fatalf("nodelet's callback got %v, want the pushed pod once", got)
	}
}

// TestGetPodHasCurrentStatus checks that GetPod answers with what
// GetPodStatus reports, in a status of the caller's own.
func TestGetPodHasCurrentStatus(t *testing.T) {
	ctx := t.Context()
	f := newFakePods(testPod("web", "uid-1", corev1.PodPending))
	running := corev1.PodStatus{
		Phase:             corev1.PodRunning,
		ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Ready: true}},
	}
	f.statuses["default/web"] = running
	a := mustNew(t, f, nil)

	pod, err := a.GetPod(ctx, "default", "web")
	if err != nil {
		t.Fatalf("GetPod: %v", err)
	}
	if diff := cmp.Diff(running, pod.Status); diff != "" {
		t.Errorf("status (-GetPodStatus +GetPod):\n%s", diff)
	}
	if pod.UID != "uid-1" || pod.Spec.NodeName != "vk-0" {
		t.Errorf("pod %s on %q, want the provider's pod uid-1 on vk-0", pod.UID, pod.Spec.NodeName)
	}

	// The status is the caller's: changing it changes nothing the provider has.
	pod.Status.ContainerStatuses[0].Ready = false
	pod.Status.Phase = corev1.PodFailed
	again, err := a.GetPod(ctx, "default", "web")
	if err != nil {
		t.Fatalf("GetPod: %v", err)
	}
	if again.Status.Phase != corev1.PodRunning || !again.Status.ContainerStatuses[0].Ready {
		t.Errorf("a caller's change to the status reached the provider: %+v", again.Status)
	}

	// A nil status from GetPodStatus leaves the pod's own.
	f.nilStatus = true
	pod, err = a.GetPod(ctx, "default", "web")
	if err != nil {
		t.Fatalf("GetPod: %v", err)
	}
	if pod.Status.Phase != corev1.PodPending {
		t.Errorf("phase %s with a nil GetPodStatus, want the pod's own Pending", pod.Status.Phase)
	}
}

// TestNotFound checks that every way a virtual-kubelet provider says it
// does not know a pod reaches nodelet as provider.ErrNotFound, and that
// other errors do not.
func TestNotFound(t *testing.T) {
	ctx := t.Context()
	for _, c := range []struct {
		name     string
		getErr   error
		nilPod   bool
		notFound bool
	}{
		{name: "errdefs NotFound", notFound: true},
		{name: "nil pod and nil error", nilPod: true, notFound: true},
		{name: "errdefs NotFound wrapped with %w", getErr: fmt.Errorf("backend: %w", errdefs.NotFound("no such pod")), notFound: true},
		{name: "Kubernetes NotFound", getErr: apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "web"), notFound: true},
		{name: "another error", getErr: errors.New("backend unreachable")},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFakePods()
			f.getErr, f.nilPod = c.getErr, c.nilPod
			a := mustNew(t, f, nil)
			pod, err := a.GetPod(ctx, "default", "web")
			if err == nil {
				t.Fatalf("GetPod returned %v and no error", pod)
			}
			if got := errors.Is(err, provider.ErrNotFound); got != c.notFound {
				t.Errorf("errors.Is(%q, provider.ErrNotFound) = %t, want %t", err, got, c.notFound)
			}
			if c.getErr != nil && !strings.Contains(err.Error(), c.getErr.Error()) {
				t.Errorf("error %q lost the provider's %q", err, c.getErr)
			}
		})
	}

	full := newFullPods()
	a := mustNew(t, full, nil)
	if err := a.UpdatePod(ctx, testPod("web", "uid-1", corev1.PodRunning)); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("UpdatePod of an unknown pod: %v, want provider.ErrNotFound", err)
	}
	if err := a.DeletePod(ctx, testPod("web", "uid-1", corev1.PodRunning)); err != nil {
		t.Errorf("DeletePod of an unknown pod: %v, want nil (nothing left to stop)", err)
	}
	if _, err := a.(provider.LogsProvider).GetContainerLogs(ctx, "default", "web", "app", provider.ContainerLogOpts{}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("GetContainerLogs of an unknown pod: %v, want provider.ErrNotFound", err)
	}
	if err := a.(provider.ExecProvider).RunInContainer(ctx, "default", "web", "app", []string{"true"}, &testStreams{}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("RunInContainer in an unknown pod: %v, want provider.ErrNotFound", err)
	}
	if err := a.(provider.PortForwardProvider).PortForward(ctx, "default", "web", 80, &bufferStream{}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("PortForward to an unknown pod: %v, want provider.ErrNotFound", err)
	}
}

// TestDeletedPodEnds checks how a deletion ends for nodelet: when the
// provider drops the pod, or when it keeps it with a terminal phase.
func TestDeletedPodEnds(t *testing.T) {
	ctx := t.Context()
	gone := func(a Adapter) bool {
		_, err := a.GetPod(ctx, "default", "web")
		if err != nil && !errors.Is(err, provider.ErrNotFound) {
			t.Fatalf("GetPod: %v", err)
		}
		return err != nil
	}
	listed := func(a Adapter) int {
		pods, err := a.GetPods(ctx)
		if err != nil {
			t.Fatalf("GetPods: %v", err)
		}
		return len(pods)
	}

	t.Run("provider drops the pod", func(t *testing.T) {
		a := mustNew(t, newFakePods(testPod("web", "uid-1", corev1.PodRunning)), nil)
		pod := testPod("web", "uid-1", corev1.PodRunning)
		if err := a.DeletePod(ctx, pod); err != nil {
			t.Fatalf("DeletePod: %v", err)
		}
		if pod.Status.Reason != "" {
			t.Errorf("the provider wrote %q into nodelet's pod; it must get a copy", pod.Status.Reason)
		}
		if !gone(a) {
			t.Error("a dropped pod is still reported")
		}
	})

	t.Run("provider keeps the pod", func(t *testing.T) {
		f := newFakePods(testPod("web", "uid-1", corev1.PodRunning))
		f.deletedPhase = corev1.PodRunning // stopping within its grace period
		a := mustNew(t, f, nil)
		if err := a.DeletePod(ctx, testPod("web", "uid-1", corev1.PodRunning)); err != nil {
			t.Fatalf("DeletePod: %v", err)
		}
		if gone(a) || listed(a) != 1 {
			t.Fatal("a deleted pod that still runs is reported gone")
		}
		f.setStatus("default", "web", func(s *corev1.PodStatus) { s.Phase = corev1.PodSucceeded })
		if !gone(a) || listed(a) != 0 {
			t.Fatal("a deleted pod that terminated is still reported")
		}
		// A new pod under the same name is the provider's to report.
		if err := a.CreatePod(ctx, testPod("web", "uid-2", corev1.PodSucceeded)); err != nil {
			t.Fatalf("CreatePod: %v", err)
		}
		if gone(a) || listed(a) != 1 {
			t.Fatal("a new pod under a deleted pod's name is not reported")
		}
	})

	t.Run("provider keeps the pod with its containers terminated", func(t *testing.T) {
		f := newFakePods(testPod("web", "uid-1", corev1.PodRunning))
		f.deletedPhase = corev1.PodRunning
		a := mustNew(t, f, nil)
		if err := a.DeletePod(ctx, testPod("web", "uid-1", corev1.PodRunning)); err != nil {
			t.Fatalf("DeletePod: %v", err)
		}
		f.setStatus("default", "web", func(s *corev1.PodStatus) {
			s.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
		})
		if gone(a) {
			t.Fatal("a deleted pod whose container runs is reported gone")
		}
		f.setStatus("default", "web", func(s *corev1.PodStatus) {
			s.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137}}
		})
		if !gone(a) {
			t.Fatal("a deleted pod whose containers all terminated is still reported")
		}
	})

	t.Run("a pod that was never deleted", func(t *testing.T) {
		a := mustNew(t, newFakePods(testPod("web", "uid-1", corev1.PodSucceeded)), nil)
		if gone(a) || listed(a) != 1 {
			t.Fatal("a finished pod nobody deleted is not reported")
		}
	})
}

// TestLogOpts checks that every one of nodelet's log options reaches the
// provider in virtual-kubelet's type.
func TestLogOpts(t *testing.T) {
	opts := provider.ContainerLogOpts{
		Tail:       10,
		LimitBytes: 2048,
		Timestamps: true,
		Follow:     true,
		Previous:   true,
		SinceSecs:  30,
		SinceTime:  time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC),
	}
	want := vkapi.ContainerLogOpts{
		Tail:         10,
		LimitBytes:   2048,
		Timestamps:   true,
		Follow:       true,
		Previous:     true,
		SinceSeconds: 30,
		SinceTime:    time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC),
	}
	// Every field set, so that a field left unmapped shows; a field added to
	// either type fails here until it is mapped.
	v := reflect.ValueOf(opts)
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Fatalf("the test sets no %s", v.Type().Field(i).Name)
		}
	}
	if n, m := v.NumField(), reflect.TypeOf(want).NumField(); n != m {
		t.Fatalf("nodelet's log options have %d fields, virtual-kubelet's %d", n, m)
	}

	f := newFullPods(testPod("web", "uid-1", corev1.PodRunning))
	a := mustNew(t, f, nil)
	logs, err := a.(provider.LogsProvider).GetContainerLogs(t.Context(), "default", "web", "app", opts)
	if err != nil {
		t.Fatalf("GetContainerLogs: %v", err)
	}
	defer logs.Close()
	text, err := io.ReadAll(logs)
	if err != nil || string(text) != "app log\n" {
		t.Errorf("logs %q (%v), want the provider's", text, err)
	}
	if diff := cmp.Diff(want, f.logOpts); diff != "" {
		t.Errorf("options the provider got (-want +got):\n%s", diff)
	}
}

// TestExecRelaysStreamsAndResize checks an exec session: nodelet's streams
// reach the provider, terminal sizes are relayed, and the relay ends with
// the call although nodelet's resize channel stays open.
func TestExecRelaysStreamsAndResize(t *testing.T) {
	f := newFullPods(testPod("web", "uid-1", corev1.PodRunning))
	var attach vkapi.AttachIO
	var sizes []vkapi.TermSize
	f.session = func(_ context.Context, a vkapi.AttachIO) error {
		attach = a
		in, err := io.ReadAll(a.Stdin())
		if err != nil {
			return err
		}
		fmt.Fprintf(a.Stdout(), "out:%s", in)
		fmt.Fprint(a.Stderr(), "err")
		select {
		case size := <-a.Resize():
			sizes = append(sizes, size)
		case <-time.After(5 * time.Second):
			return errors.New("no terminal size relayed")
		}
		return nil
	}
	streams := &testStreams{
		stdin:  strings.NewReader("hello"),
		stdout: &bytes.Buffer{},
		stderr: &bytes.Buffer{},
		tty:    true,
		resize: make(chan provider.TermSize, 1),
	}
	streams.resize <- provider.TermSize{Width: 80, Height: 24}

	a := mustNew(t, f, nil)
	cmd := []string{"sh", "-c", "cat"}
	if err := a.(provider.ExecProvider).RunInContainer(t.Context(), "default", "web", "app", cmd, streams); err != nil {
		t.Fatalf("RunInContainer: %v", err)
	}
	if got := streams.stdout.String(); got != "out:hello" {
		t.Errorf("stdout %q, want %q", got, "out:hello")
	}
	if got := streams.stderr.String(); got != "err" {
		t.Errorf("stderr %q, want %q", got, "err")
	}
	if !slicesEqual(f.cmd, cmd) {
		t.Errorf("command %q, want %q", f.cmd, cmd)
	}
	if !attach.TTY() {
		t.Error("TTY false, want nodelet's true")
	}
	if want := []vkapi.TermSize{{Width: 80, Height: 24}}; !reflect.DeepEqual(sizes, want) {
		t.Errorf("sizes %v, want %v", sizes, want)
	}
	if err := waitClosed(attach.Resize()); err != nil {
		t.Fatalf("after RunInContainer returned: %v", err)
	}
}

// TestAttachRelayEndsWithItsSource checks that the relay ends, and closes
// virtual-kubelet's channel, when nodelet's channel closes while the
// session still runs; and that a session without a terminal gets none.
func TestAttachRelayEndsWithItsSource(t *testing.T) {
	f := newFullPods(testPod("web", "uid-1", corev1.PodRunning))
	var relayed int
	f.session = func(_ context.Context, a vkapi.AttachIO) error {
		deadline := time.After(5 * time.Second)
		for {
			select {
			case _, ok := <-a.Resize():
				if !ok {
					return nil
				}
				relayed++
			case <-deadline:
				return errors.New("the relay did not end when its source closed")
			}
		}
	}
	streams := &testStreams{tty: true, resize: make(chan provider.TermSize, 1)}
	streams.resize <- provider.TermSize{Width: 100, Height: 40}
	close(streams.resize)
	a := mustNew(t, f, nil)
	if err := a.(provider.AttachProvider).AttachToContainer(t.Context(), "default", "web", "app", streams); err != nil {
		t.Fatalf("AttachToContainer: %v", err)
	}
	if relayed != 1 {
		t.Errorf("%d sizes relayed, want 1", relayed)
	}

	var resize <-chan vkapi.TermSize
	f.session = func(_ context.Context, a vkapi.AttachIO) error {
		resize = a.Resize()
		return nil
	}
	if err := a.(provider.AttachProvider).AttachToContainer(t.Context(), "default", "web", "app", &testStreams{}); err != nil {
		t.Fatalf("AttachToContainer: %v", err)
	}
	if resize != nil {
		t.Error("a session without a terminal got a resize channel")
	}
}

func TestPortForward(t *testing.T) {
	a := mustNew(t, newFullPods(testPod("web", "uid-1", corev1.PodRunning)), nil)
	stream := &bufferStream{}
	if err := a.(provider.PortForwardProvider).PortForward(t.Context(), "default", "web", 8080, stream); err != nil {
		t.Fatalf("PortForward: %v", err)
	}
	if got := stream.String(); got != "port 8080" {
		t.Errorf("stream got %q from the provider, want %q", got, "port 8080")
	}
}

// TestStatsSplit checks that the provider's summary answers nodelet's pod
// and node stats.
func TestStatsSplit(t *testing.T) {
	ctx := t.Context()
	nanoCores := uint64(250_000_000)
	summary := &statsv1alpha1.Summary{
		Node: statsv1alpha1.NodeStats{NodeName: "vk-0", CPU: &statsv1alpha1.CPUStats{UsageNanoCores: &nanoCores}},
		Pods: []statsv1alpha1.PodStats{
			{PodRef: statsv1alpha1.PodReference{Namespace: "default", Name: "web", UID: "uid-1"}},
			{PodRef: statsv1alpha1.PodReference{Namespace: "default", Name: "db", UID: "uid-2"}},
		},
	}
	f := newFullPods()
	f.summary = summary
	a := mustNew(t, f, nil)
	pods, err := a.(provider.StatsProvider).PodStats(ctx)
	if err != nil {
		t.Fatalf("PodStats: %v", err)
	}
	if diff := cmp.Diff(summary.Pods, pods); diff != "" {
		t.Errorf("pod stats (-summary +PodStats):\n%s", diff)
	}
	node, err := a.(provider.NodeStatsProvider).NodeStats(ctx)
	if err != nil {
		t.Fatalf("NodeStats: %v", err)
	}
	if diff := cmp.Diff(summary.Node, node); diff != "" {
		t.Errorf("node stats (-summary +NodeStats):\n%s", diff)
	}

	f.summary = nil
	if pods, err := a.(provider.StatsProvider).PodStats(ctx); err != nil || len(pods) != 0 {
		t.Errorf("PodStats of a nil summary: %v, %v; want none and no error", pods, err)
	}
	if node, err := a.(provider.NodeStatsProvider).NodeStats(ctx); err != nil || node.CPU != nil {
		t.Errorf("NodeStats of a nil summary: %+v, %v; want empty and no error", node, err)
	}
}

// TestNodeWithoutNodeProvider checks virtual-kubelet's NaiveNodeProvider
// behaviour: pings succeed while ctx lives, and nodelet decides Ready.
func TestNodeWithoutNodeProvider(t *testing.T) {
	a := mustNew(t, configuringPods{newFakePods()}, nil)
	if err := a.Ping(t.Context()); err != nil {
		t.Errorf("Ping: %v", err)
	}
	ended, cancel := context.WithCancel(t.Context())
	cancel()
	if err := a.Ping(ended); err == nil {
		t.Error("Ping with an ended ctx returned no error")
	}
	a.NotifyNodeStatus(t.Context(), func() { t.Error("notified without a NodeProvider") })

	node := &corev1.Node{} // no labels: the provider's method must not panic
	a.ConfigureNode(t.Context(), node)
	if node.Labels["example.com/configured"] != "true" {
		t.Errorf("labels %v, want the provider's", node.Labels)
	}
	if got := node.Status.Capacity[corev1.ResourceCPU]; got.Cmp(resource.MustParse("8")) != 0 {
		t.Errorf("CPU capacity %s, want the provider's 8", got.String())
	}
	want := []corev1.NodeCondition{{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory"}}
	if diff := cmp.Diff(want, node.Status.Conditions); diff != "" {
		t.Errorf("conditions (-want +got), the provider's Ready dropped for nodelet's:\n%s", diff)
	}
}

// TestNodeStatusFromNodeProvider checks the notification path: a node the
// NodeProvider pushes asks nodelet for a report, and ConfigureNode then
// gives its status and labels.
func TestNodeStatusFromNodeProvider(t *testing.T) {
	ctx := t.Context()
	np := &fakeNode{}
	a := mustNew(t, configuringPods{newFakePods()}, np)
	notified := 0
	a.NotifyNodeStatus(ctx, func() { notified++ })

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"kubernetes.io/hostname": "vk-0"}}}
	a.ConfigureNode(ctx, node)
	if len(node.Status.Conditions) == 0 || node.Status.Conditions[0].Reason != "KubeletPending" {
		t.Errorf("conditions %+v, want the provider's Ready kept when it has a NodeProvider", node.Status.Conditions)
	}

	pushed := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"example.com/pushed": "yes"}},
		Status: corev1.NodeStatus{
			Capacity:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16")},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "ProviderReady"}},
		},
	}
	want := pushed.Status.DeepCopy()
	np.push(pushed)
	if notified != 1 {
		t.Fatalf("nodelet notified %d times after a push, want 1", notified)
	}
	pushed.Status.Capacity = nil // the provider's to change: the adapter kept a copy

	node = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"kubernetes.io/hostname": "vk-0"}}}
	a.ConfigureNode(ctx, node)
	if diff := cmp.Diff(*want, node.Status); diff != "" {
		t.Errorf("status (-pushed +configured):\n%s", diff)
	}
	wantLabels := map[string]string{"kubernetes.io/hostname": "vk-0", "example.com/configured": "true", "example.com/pushed": "yes"}
	if diff := cmp.Diff(wantLabels, node.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}

	np.mu.Lock()
	np.pingErr = errors.New("backend down")
	np.mu.Unlock()
	if err := a.Ping(ctx); err == nil || err.Error() != "backend down" {
		t.Errorf("Ping: %v, want the NodeProvider's error", err)
	}
}

func slicesEqual(a, b []string) bool { return reflect.DeepEqual(a, b) }
