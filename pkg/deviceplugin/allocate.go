package deviceplugin

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// ContainerDevices is what a container's devices need of the runtime, as
// their plugins answered Allocate: environment, mounts, device nodes,
// annotations and CDI devices, in the CRI's terms.
type ContainerDevices struct {
	Envs        []*runtimeapi.KeyValue
	Mounts      []*runtimeapi.Mount
	Devices     []*runtimeapi.Device
	Annotations map[string]string
	CDIDevices  []*runtimeapi.CDIDevice
}

// Allocate gives the container the devices it requests of each plugin's
// resource (its limits; resources no plugin serves are not this
// manager's) and asks each plugin what they need. A container that
// starts again keeps the devices it had. It fails when a plugin has too
// few healthy devices free, or its Allocate fails.
func (m *Manager) Allocate(ctx context.Context, pod *corev1.Pod, c *corev1.Container) (*ContainerDevices, error) {
	out := &ContainerDevices{}
	envs := map[string]string{}
	names := slices.Sorted(maps.Keys(c.Resources.Limits))
	for _, name := range names {
		q := c.Resources.Limits[name]
		m.mu.Lock()
		r := m.resources[string(name)]
		m.mu.Unlock()
		if r == nil || q.Value() <= 0 {
			continue
		}
		ids, err := m.devicesFor(pod.UID, c.Name, r, int(q.Value()))
		if err != nil {
			return nil, err
		}
		callCtx, cancel := context.WithTimeout(ctx, m.opts.CallTimeout)
		resp, err := r.client.Allocate(callCtx, &pluginapi.AllocateRequest{
			ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}},
		})
		cancel()
		if err != nil {
			m.release(pod.UID, c.Name, r.name)
			return nil, fmt.Errorf("allocate %d of %s: %w", len(ids), r.name, err)
		}
		if len(resp.ContainerResponses) != 1 {
			m.release(pod.UID, c.Name, r.name)
			return nil, fmt.Errorf("allocate %d of %s: the plugin answered %d containers, not 1", len(ids), r.name, len(resp.ContainerResponses))
		}
		cr := resp.ContainerResponses[0]
		maps.Copy(envs, cr.Envs)
		for _, mnt := range cr.Mounts {
			out.Mounts = append(out.Mounts, &runtimeapi.Mount{ContainerPath: mnt.ContainerPath, HostPath: mnt.HostPath, Readonly: mnt.ReadOnly})
		}
		for _, d := range cr.Devices {
			out.Devices = append(out.Devices, &runtimeapi.Device{ContainerPath: d.ContainerPath, HostPath: d.HostPath, Permissions: d.Permissions})
		}
		for _, d := range cr.CdiDevices {
			out.CDIDevices = append(out.CDIDevices, &runtimeapi.CDIDevice{Name: d.Name})
		}
		if len(cr.Annotations) > 0 {
			if out.Annotations == nil {
				out.Annotations = map[string]string{}
			}
			maps.Copy(out.Annotations, cr.Annotations)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(envs)) {
		out.Envs = append(out.Envs, &runtimeapi.KeyValue{Key: k, Value: []byte(envs[k])})
	}
	return out, nil
}

// devicesFor picks n healthy devices of r for the pod's container that no
// other container holds, or the ones it holds already.
func (m *Manager) devicesFor(pod types.UID, container string, r *pluginResource, n int) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ids := m.allocated[pod][container][r.name]; len(ids) == n {
		return ids, nil
	}
	inUse := map[string]bool{}
	for uid, containers := range m.allocated {
		for name, byResource := range containers {
			if uid == pod && name == container {
				continue
			}
			for _, id := range byResource[r.name] {
				inUse[id] = true
			}
		}
	}
	var free []string
	if r.stopped.IsZero() {
		for _, id := range r.healthy() {
			if !inUse[id] {
				free = append(free, id)
			}
		}
	}
	if len(free) < n {
		return nil, fmt.Errorf("requested number of devices unavailable for %s. Requested: %d, Available: %d", r.name, n, len(free))
	}
	ids := free[:n]
	sort.Strings(ids)
	if m.allocated[pod] == nil {
		m.allocated[pod] = map[string]map[string][]string{}
	}
	if m.allocated[pod][container] == nil {
		m.allocated[pod][container] = map[string][]string{}
	}
	m.allocated[pod][container][r.name] = ids
	return ids, nil
}

func (m *Manager) release(pod types.UID, container, resource string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.allocated[pod][container], resource)
}

// Release frees the devices of the pod's containers, once the pod is gone
// from the node.
func (m *Manager) Release(pod types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.allocated, pod)
}

// PodDevices are the devices the pod's containers hold: by container, by
// resource, their IDs.
func (m *Manager) PodDevices(pod types.UID) map[string]map[string][]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]map[string][]string{}
	for container, byResource := range m.allocated[pod] {
		out[container] = map[string][]string{}
		for name, ids := range byResource {
			out[container][name] = slices.Clone(ids)
		}
	}
	return out
}

// AllocatableDevices are the healthy devices of the running plugins, by
// resource.
func (m *Manager) AllocatableDevices() map[string][]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string][]string{}
	for name, r := range m.resources {
		if r.stopped.IsZero() {
			out[name] = r.healthy()
		}
	}
	return out
}
