package podresources

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

type fakeDevices struct{}

func (fakeDevices) PodDevices(pod types.UID) map[string]map[string][]string {
	if pod == "uid-1" {
		return map[string]map[string][]string{"app": {"example.com/gpu": {"0"}}}
	}
	return nil
}

func (fakeDevices) AllocatableDevices() map[string][]string {
	return map[string][]string{"example.com/gpu": {"0", "1"}}
}

// TestPodResources serves the API and asks it as a monitoring agent does:
// the running pods with their containers' devices, one pod, and the
// node's allocatable devices.
func TestPodResources(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "kubelet.sock")
	pods := []*corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p1", UID: "uid-1"},
			Spec: corev1.PodSpec{InitContainers: []corev1.Container{{Name: "init"}}, Containers: []corev1.Container{{Name: "app"}}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "done", UID: "uid-2"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}}, Status: corev1.PodStatus{Phase: corev1.PodSucceeded}},
	}
	s := New(socket, func(context.Context) ([]*corev1.Pod, error) { return pods, nil }, fakeDevices{})
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := podresourcesv1.NewPodResourcesListerClient(conn)
	var list *podresourcesv1.ListPodResourcesResponse
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err = client.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(list.PodResources) != 1 || list.PodResources[0].Name != "p1" || len(list.PodResources[0].Containers) != 2 {
		t.Fatalf("List = %v, want p1 alone with its two containers", list)
	}
	app := list.PodResources[0].Containers[1]
	if app.Name != "app" || len(app.Devices) != 1 || app.Devices[0].ResourceName != "example.com/gpu" || app.Devices[0].DeviceIds[0] != "0" {
		t.Errorf("app's resources %v", app)
	}
	got, err := client.Get(ctx, &podresourcesv1.GetPodResourcesRequest{PodName: "p1", PodNamespace: "ns"})
	if err != nil || got.PodResources.Name != "p1" {
		t.Errorf("Get p1: %v, %v", got, err)
	}
	if _, err := client.Get(ctx, &podresourcesv1.GetPodResourcesRequest{PodName: "nope", PodNamespace: "ns"}); err == nil {
		t.Error("Get of an unknown pod succeeded")
	}
	alloc, err := client.GetAllocatableResources(ctx, &podresourcesv1.AllocatableResourcesRequest{})
	if err != nil || len(alloc.Devices) != 1 || len(alloc.Devices[0].DeviceIds) != 2 {
		t.Errorf("GetAllocatableResources: %v, %v", alloc, err)
	}
}
