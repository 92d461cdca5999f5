package podservice_test

import (
	"context"
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/examples/podservice"
	"github.com/nodelet/nodelet/examples/podservice/fakeservice"
	"github.com/nodelet/nodelet/pkg/provider"
)

// newService starts a fake pod service on a clock of the test's.
func newService(t *testing.T) (*fakeservice.Service, *httptest.Server, *testingclock.FakeClock) {
	t.Helper()
	clk := testingclock.NewFakeClock(time.Date(2026, 11, 26, 22, 0, 0, 0, time.UTC))
	svc := fakeservice.New(fakeservice.Options{Clock: clk, StartDelay: time.Second})
	srv := httptest.NewServer(svc)
	t.Cleanup(srv.Close)
	return svc, srv, clk
}

func newProvider(t *testing.T, node, url string) *podservice.Provider {
	t.Helper()
	p, err := podservice.New(podservice.Options{NodeName: node, URL: url, Address: "192.0.2.1", Port: 10255, Version: "v1.36.3"})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func newPod(namespace, name, uid string) *corev1.Pod {
	grace := int64(5)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID(uid)},
		Spec: corev1.PodSpec{
			NodeName:                      "n1",
			TerminationGracePeriodSeconds: &grace,
			Containers:                    []corev1.Container{{Name: "app", Image: "app:1", Command: []string{"serve"}}},
		},
	}
}

func condition(pod *corev1.Pod, t corev1.PodConditionType) corev1.ConditionStatus {
	for _, c := range pod.Status.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return ""
}

// A pod goes through the service: created Pending, Running once the
// service starts it, its log served, deleted within its grace period.
func TestPodLifecycle(t *testing.T) {
	ctx := context.Background()
	svc, srv, clk := newService(t)
	p := newProvider(t, "n1", srv.URL)
	pod := newPod("ns", "web", "u1")

	if err := p.CreatePod(ctx, pod); err != nil {
		t.Fatalf("CreatePod: %v", err)
	}
	got, err := p.GetPod(ctx, "ns", "web")
	if err != nil {
		t.Fatalf("GetPod: %v", err)
	}
	if got.UID != "u1" || got.Status.Phase != corev1.PodPending || got.Status.ContainerStatuses[0].State.Waiting == nil {
		t.Errorf("new pod: UID %s, phase %s, container %+v; want u1, Pending, waiting", got.UID, got.Status.Phase, got.Status.ContainerStatuses[0].State)
	}
	if len(got.Spec.Containers) != 1 || got.Spec.Containers[0].Command[0] != "serve" {
		t.Errorf("new pod's spec %+v, want the one created", got.Spec)
	}

	clk.Step(time.Second)
	got, err = p.GetPod(ctx, "ns", "web")
	if err != nil {
		t.Fatalf("GetPod: %v", err)
	}
	if got.Status.Phase != corev1.PodRunning || got.Status.PodIP == "" || got.Status.StartTime == nil ||
		condition(got, corev1.PodReady) != corev1.ConditionTrue || !got.Status.ContainerStatuses[0].Ready {
		t.Errorf("started pod's status %+v, want Running and Ready with an IP and a start time", got.Status)
	}

	// A second create (a lost answer) of the same pod is accepted; of
	// another pod of the same name, refused.
	if err := p.CreatePod(ctx, pod); err != nil {
		t.Errorf("CreatePod again: %v", err)
	}
	if err := p.CreatePod(ctx, newPod("ns", "web", "u2")); err == nil || !strings.Contains(err.Error(), "409") {
		t.Errorf("CreatePod of another pod of the same name: %v, want the service's 409", err)
	}

	rc, err := p.GetContainerLogs(ctx, "ns", "web", "app", provider.ContainerLogOpts{Tail: 1})
	if err != nil {
		t.Fatalf("GetContainerLogs: %v", err)
	}
	log, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || string(log) != fakeservice.LogLine("ns", "web", "app") {
		t.Errorf("log %q (%v), want %q", log, err, fakeservice.LogLine("ns", "web", "app"))
	}
	if _, err := p.GetContainerLogs(ctx, "ns", "web", "nope", provider.ContainerLogOpts{}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("log of an unknown container: %v, want ErrNotFound", err)
	}
	if _, err := p.GetContainerLogs(ctx, "ns", "web", "app", provider.ContainerLogOpts{Previous: true}); err == nil {
		t.Error("previous log: no error, want one (the service keeps none)")
	}

	deleted := pod.DeepCopy()
	grace := int64(3)
	deleted.DeletionGracePeriodSeconds = &grace
	if err := p.DeletePod(ctx, deleted); err != nil {
		t.Fatalf("DeletePod: %v", err)
	}
	if d := svc.Deletions(); len(d) != 1 || d[0].Grace != 3*time.Second {
		t.Errorf("deletions %+v, want one with the pod's grace period of 3s", d)
	}
	clk.Step(2 * time.Second)
	if _, err := p.GetPod(ctx, "ns", "web"); err != nil {
		t.Errorf("GetPod within the grace period: %v, want the pod", err)
	}
	clk.Step(time.Second)
	if _, err := p.GetPod(ctx, "ns", "web"); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("GetPod after the grace period: %v, want ErrNotFound", err)
	}
	if err := p.DeletePod(ctx, deleted); err != nil {
		t.Errorf("DeletePod of a pod gone: %v, want nil", err)
	}
}

// GetPods lists the node's pods only; a provider that did not create a pod
// (the agent restarted) rebuilds it from the service.
func TestGetPods(t *testing.T) {
	ctx := context.Background()
	_, srv, _ := newService(t)
	p1, p2 := newProvider(t, "n1", srv.URL), newProvider(t, "n2", srv.URL)
	for _, pod := range []*corev1.Pod{newPod("ns", "a", "ua"), newPod("ns", "b", "ub")} {
		if err := p1.CreatePod(ctx, pod); err != nil {
			t.Fatal(err)
		}
	}
	if err := p2.CreatePod(ctx, newPod("ns", "c", "uc")); err != nil {
		t.Fatal(err)
	}
	pods, err := p1.GetPods(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, pod := range pods {
		names = append(names, pod.Name)
	}
	if strings.Join(names, ",") != "a,b" {
		t.Errorf("pods of n1: %v, want a,b", names)
	}

	restarted := newProvider(t, "n1", srv.URL)
	got, err := restarted.GetPod(ctx, "ns", "a")
	if err != nil {
		t.Fatal(err)
	}
	if got.UID != "ua" || got.Spec.NodeName != "n1" || len(got.Spec.Containers) != 1 ||
		got.Spec.Containers[0].Image != "app:1" || len(got.Status.ContainerStatuses) != 1 {
		t.Errorf("pod rebuilt from the service: %+v", got)
	}
}

func TestInitContainersRejected(t *testing.T) {
	_, srv, _ := newService(t)
	p := newProvider(t, "n1", srv.URL)
	pod := newPod("ns", "init", "u1")
	pod.Spec.InitContainers = []corev1.Container{{Name: "setup", Image: "setup:1"}}
	var rej *provider.Rejection
	if err := p.CreatePod(context.Background(), pod); !errors.As(err, &rej) {
		t.Errorf("CreatePod with init containers: %v, want a rejection", err)
	}
}

// The node's capacity is the service's once Ping has asked it, reported at
// once; Options.Capacity overrides it.
func TestNode(t *testing.T) {
	ctx := context.Background()
	_, srv, _ := newService(t)
	p := newProvider(t, "n1", srv.URL)
	notified := 0
	p.NotifyNodeStatus(ctx, func() { notified++ })

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	p.ConfigureNode(ctx, node)
	if len(node.Status.Capacity) != 0 {
		t.Errorf("capacity before the first ping: %v, want none", node.Status.Capacity)
	}
	if err := p.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	if err := p.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	if notified != 1 {
		t.Errorf("notified %d times, want once (the capacity changed once)", notified)
	}
	p.ConfigureNode(ctx, node)
	s := node.Status
	if s.Capacity.Cpu().String() != "8" || s.Capacity.Memory().String() != "32Gi" || s.Allocatable.Pods().Value() != 110 {
		t.Errorf("capacity %v, allocatable %v; want the service's 8 CPUs, 32Gi, 110 pods", s.Capacity, s.Allocatable)
	}
	var ready corev1.ConditionStatus
	for _, c := range s.Conditions {
		if c.Type == corev1.NodeReady {
			ready = c.Status
		}
	}
	if ready != corev1.ConditionTrue {
		t.Errorf("Ready %q, want True", ready)
	}
	if len(s.Addresses) != 2 || s.Addresses[0] != (corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "192.0.2.1"}) {
		t.Errorf("addresses %v, want the InternalIP 192.0.2.1 and the hostname", s.Addresses)
	}
	if s.DaemonEndpoints.KubeletEndpoint.Port != 10255 || s.NodeInfo.KubeletVersion != "v1.36.3" {
		t.Errorf("kubelet port %d, version %q; want 10255, v1.36.3", s.DaemonEndpoints.KubeletEndpoint.Port, s.NodeInfo.KubeletVersion)
	}
	if node.Labels[corev1.LabelHostname] != "n1" {
		t.Errorf("labels %v, want the hostname n1", node.Labels)
	}

	fixed, err := podservice.New(podservice.Options{NodeName: "n1", URL: srv.URL,
		Capacity: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("5")}})
	if err != nil {
		t.Fatal(err)
	}
	if err := fixed.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	fixed.ConfigureNode(ctx, node)
	if node.Status.Capacity.Pods().Value() != 5 || !node.Status.Capacity.Cpu().IsZero() {
		t.Errorf("capacity %v with Options.Capacity, want 5 pods only", node.Status.Capacity)
	}

	srv.Close()
	if err := p.Ping(ctx); err == nil {
		t.Error("Ping of a service that is down: no error")
	}
}

func TestNewChecksOptions(t *testing.T) {
	_, err := podservice.New(podservice.Options{URL: "ftp://x", Address: "not-an-ip"})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"node name", "service URL", "address"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}
