// Package podresources serves the kubelet's pod resources API
// (podresources/v1) on the node's socket
// <rootDir>/pod-resources/kubelet.sock, for monitoring agents and device
// plugins: the node's pods with the devices their containers hold, and
// the node's allocatable devices. nodelet has no CPU or memory manager, so
// no container holds CPUs or memory of its own. It only reads: the
// provider's pods and the device manager.
package podresources

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// Devices is what the server reads of the node's devices
// (*deviceplugin.Manager).
type Devices interface {
	// PodDevices: by container, by resource, the IDs of the pod's devices.
	PodDevices(pod types.UID) map[string]map[string][]string
	// AllocatableDevices: by resource, the IDs of the healthy devices.
	AllocatableDevices() map[string][]string
}

// Server serves the API. Build it with New, serve with Run.
type Server struct {
	podresourcesv1.UnimplementedPodResourcesListerServer
	socket  string
	pods    func(ctx context.Context) ([]*corev1.Pod, error)
	devices Devices
}

// New returns a server on socket of the pods that pods lists; devices may
// be nil (a node without device plugins).
func New(socket string, pods func(ctx context.Context) ([]*corev1.Pod, error), devices Devices) *Server {
	return &Server{socket: socket, pods: pods, devices: devices}
}

// Run serves until ctx ends, then removes the socket.
func (s *Server) Run(ctx context.Context) error {
	if err := os.MkdirAll(filepath.Dir(s.socket), 0o750); err != nil {
		return fmt.Errorf("pod resources API: %w", err)
	}
	if err := os.Remove(s.socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("pod resources API: %w", err)
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "unix", s.socket)
	if err != nil {
		return fmt.Errorf("pod resources API: listen on %s: %w", s.socket, err)
	}
	srv := grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(srv, s)
	errCh := make(chan error, 1)
	go func() { errCh <- srv.Serve(ln) }()
	klog.FromContext(ctx).Info("Serving the pod resources API", "socket", s.socket)
	select {
	case err := <-errCh:
		return fmt.Errorf("pod resources API: serve on %s: %w", s.socket, err)
	case <-ctx.Done():
	}
	srv.Stop()
	<-errCh
	_ = os.Remove(s.socket)
	return nil
}

// List answers the node's pods that have not finished, as the kubelet's
// active pods.
func (s *Server) List(ctx context.Context, _ *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	pods, err := s.pods(ctx)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "list pods: %v", err)
	}
	resp := &podresourcesv1.ListPodResourcesResponse{}
	for _, p := range pods {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		resp.PodResources = append(resp.PodResources, s.podResources(p))
	}
	return resp, nil
}

// Get answers one pod of the node.
func (s *Server) Get(ctx context.Context, req *podresourcesv1.GetPodResourcesRequest) (*podresourcesv1.GetPodResourcesResponse, error) {
	pods, err := s.pods(ctx)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "list pods: %v", err)
	}
	for _, p := range pods {
		if p.Namespace == req.PodNamespace && p.Name == req.PodName {
			return &podresourcesv1.GetPodResourcesResponse{PodResources: s.podResources(p)}, nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "pod %s not found in %s", req.PodName, req.PodNamespace)
}

// GetAllocatableResources answers the node's healthy devices.
func (s *Server) GetAllocatableResources(context.Context, *podresourcesv1.AllocatableResourcesRequest) (*podresourcesv1.AllocatableResourcesResponse, error) {
	resp := &podresourcesv1.AllocatableResourcesResponse{}
	if s.devices == nil {
		return resp, nil
	}
	all := s.devices.AllocatableDevices()
	for _, name := range slices.Sorted(maps.Keys(all)) {
		resp.Devices = append(resp.Devices, &podresourcesv1.ContainerDevices{ResourceName: name, DeviceIds: all[name]})
	}
	return resp, nil
}

// podResources is one pod, its init and app containers in order, each with
// its devices.
func (s *Server) podResources(p *corev1.Pod) *podresourcesv1.PodResources {
	var held map[string]map[string][]string
	if s.devices != nil {
		held = s.devices.PodDevices(p.UID)
	}
	out := &podresourcesv1.PodResources{Name: p.Name, Namespace: p.Namespace}
	for _, c := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
		cr := &podresourcesv1.ContainerResources{Name: c.Name}
		for _, name := range slices.Sorted(maps.Keys(held[c.Name])) {
			cr.Devices = append(cr.Devices, &podresourcesv1.ContainerDevices{ResourceName: name, DeviceIds: held[c.Name][name]})
		}
		out.Containers = append(out.Containers, cr)
	}
	return out
}
