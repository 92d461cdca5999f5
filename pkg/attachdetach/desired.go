package attachdetach

import (
	"fmt"
	"sort"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// VolumeToAttach is one (volume, node) pair of the desired state of world,
// with the pods on that node that need the volume.
type VolumeToAttach struct {
	VolumeName corev1.UniqueVolumeName
	Spec       *Spec
	NodeName   types.NodeName
	// ScheduledPods are the pods on NodeName that use the volume, in no
	// particular order. They are the informer's objects: read, never write.
	ScheduledPods []*corev1.Pod
	// MultiAttachErrorReported is set once the Multi-Attach warning was sent
	// for this pair, so that it is sent once, not every loop.
	MultiAttachErrorReported bool
}

// Volume returns the name and spec of the pair's volume.
func (v VolumeToAttach) Volume() Volume { return Volume{Name: v.VolumeName, Spec: v.Spec} }

// MultiAttachAllowed reports whether the volume may attach to several nodes.
func (v VolumeToAttach) MultiAttachAllowed() bool { return v.Spec.MultiAttachAllowed() }

// PodVolume is one pod's use of one volume on one node.
type PodVolume struct {
	Pod        *corev1.Pod
	VolumeName corev1.UniqueVolumeName
	NodeName   types.NodeName
}

// DesiredStateOfWorld is the set of managed nodes and, per node, the
// attachable volumes that pods bound to it need, with those pods. Only
// managed nodes have volumes to attach. It is safe for concurrent use.
type DesiredStateOfWorld struct {
	mu    sync.RWMutex
	nodes map[types.NodeName]*desiredNode
	// podVolumes indexes the (node, volume) pairs each pod is part of, so a
	// pod can be removed without resolving its volumes again.
	podVolumes map[types.UID]map[nodeVolume]struct{}
}

type nodeVolume struct {
	node   types.NodeName
	volume corev1.UniqueVolumeName
}

type desiredNode struct {
	volumes map[corev1.UniqueVolumeName]*desiredVolume
}

type desiredVolume struct {
	spec                     *Spec
	multiAttachErrorReported bool
	pods                     map[types.UID]*corev1.Pod
}

// NewDesiredStateOfWorld returns an empty desired state of world.
func NewDesiredStateOfWorld() *DesiredStateOfWorld {
	return &DesiredStateOfWorld{
		nodes:      make(map[types.NodeName]*desiredNode),
		podVolumes: make(map[types.UID]map[nodeVolume]struct{}),
	}
}

// AddNode makes node a managed node. Adding it again changes nothing.
func (d *DesiredStateOfWorld) AddNode(node types.NodeName) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.nodes[node]; !ok {
		d.nodes[node] = &desiredNode{volumes: make(map[corev1.UniqueVolumeName]*desiredVolume)}
	}
}

// DeleteNode stops managing node. It fails while pods on the node still need
// volumes: remove those pods first.
func (d *DesiredStateOfWorld) DeleteNode(node types.NodeName) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	n, ok := d.nodes[node]
	if !ok {
		return nil
	}
	if len(n.volumes) > 0 {
		return fmt.Errorf("node %q still has %d volumes to attach", node, len(n.volumes))
	}
	delete(d.nodes, node)
	return nil
}

// NodeExists reports whether node is managed.
func (d *DesiredStateOfWorld) NodeExists(node types.NodeName) bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	_, ok := d.nodes[node]
	return ok
}

// AddPod records that pod, bound to node, needs volume v. The node must be
// managed. A volume new to the node starts without a Multi-Attach report.
func (d *DesiredStateOfWorld) AddPod(pod *corev1.Pod, v Volume, node types.NodeName) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	n, ok := d.nodes[node]
	if !ok {
		return fmt.Errorf("add pod %s/%s: node %q is not managed", pod.Namespace, pod.Name, node)
	}
	dv, ok := n.volumes[v.Name]
	if !ok {
		dv = &desiredVolume{spec: v.Spec, pods: make(map[types.UID]*corev1.Pod)}
		n.volumes[v.Name] = dv
	}
	dv.pods[pod.UID] = pod
	idx := d.podVolumes[pod.UID]
	if idx == nil {
		idx = make(map[nodeVolume]struct{})
		d.podVolumes[pod.UID] = idx
	}
	idx[nodeVolume{node, v.Name}] = struct{}{}
	return nil
}

// DeletePodVolume records that the pod no longer needs the volume on node. A
// volume that no pod on the node needs leaves the node.
func (d *DesiredStateOfWorld) DeletePodVolume(pod types.UID, volume corev1.UniqueVolumeName, node types.NodeName) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.deletePodVolume(pod, nodeVolume{node, volume})
}

// DeletePod records that the pod needs no volume any more.
func (d *DesiredStateOfWorld) DeletePod(pod types.UID) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for nv := range d.podVolumes[pod] {
		d.deletePodVolume(pod, nv)
	}
}

func (d *DesiredStateOfWorld) deletePodVolume(pod types.UID, nv nodeVolume) {
	if idx := d.podVolumes[pod]; idx != nil {
		delete(idx, nv)
		if len(idx) == 0 {
			delete(d.podVolumes, pod)
		}
	}
	n, ok := d.nodes[nv.node]
	if !ok {
		return
	}
	dv, ok := n.volumes[nv.volume]
	if !ok {
		return
	}
	delete(dv.pods, pod)
	if len(dv.pods) == 0 {
		delete(n.volumes, nv.volume)
	}
}

// VolumeExists reports whether some pod on node needs volume.
func (d *DesiredStateOfWorld) VolumeExists(volume corev1.UniqueVolumeName, node types.NodeName) bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	n, ok := d.nodes[node]
	if !ok {
		return false
	}
	_, ok = n.volumes[volume]
	return ok
}

// GetVolumesToAttach returns every (volume, node) pair, sorted by node and
// volume name.
func (d *DesiredStateOfWorld) GetVolumesToAttach() []VolumeToAttach {
	d.mu.RLock()
	defer d.mu.RUnlock()
	var out []VolumeToAttach
	for node, n := range d.nodes {
		for name, dv := range n.volumes {
			out = append(out, VolumeToAttach{
				VolumeName:               name,
				Spec:                     dv.spec,
				NodeName:                 node,
				ScheduledPods:            podList(dv.pods),
				MultiAttachErrorReported: dv.multiAttachErrorReported,
			})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].NodeName != out[j].NodeName {
			return out[i].NodeName < out[j].NodeName
		}
		return out[i].VolumeName < out[j].VolumeName
	})
	return out
}

// GetVolumePodsOnNodes returns the pods on nodes that need volume, sorted by
// namespace and name.
func (d *DesiredStateOfWorld) GetVolumePodsOnNodes(nodes []types.NodeName, volume corev1.UniqueVolumeName) []*corev1.Pod {
	d.mu.RLock()
	defer d.mu.RUnlock()
	var out []*corev1.Pod
	for _, node := range nodes {
		n, ok := d.nodes[node]
		if !ok {
			continue
		}
		if dv, ok := n.volumes[volume]; ok {
			out = append(out, podList(dv.pods)...)
		}
	}
	sortPods(out)
	return out
}

// SetMultiAttachError records that the Multi-Attach warning for the pair was
// sent.
func (d *DesiredStateOfWorld) SetMultiAttachError(volume corev1.UniqueVolumeName, node types.NodeName) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if n, ok := d.nodes[node]; ok {
		if dv, ok := n.volumes[volume]; ok {
			dv.multiAttachErrorReported = true
		}
	}
}

// GetPodVolumes returns every pod's use of every volume.
func (d *DesiredStateOfWorld) GetPodVolumes() []PodVolume {
	d.mu.RLock()
	defer d.mu.RUnlock()
	var out []PodVolume
	for uid, idx := range d.podVolumes {
		for nv := range idx {
			out = append(out, PodVolume{
				Pod:        d.nodes[nv.node].volumes[nv.volume].pods[uid],
				VolumeName: nv.volume,
				NodeName:   nv.node,
			})
		}
	}
	return out
}

func podList(pods map[types.UID]*corev1.Pod) []*corev1.Pod {
	out := make([]*corev1.Pod, 0, len(pods))
	for _, p := range pods {
		out = append(out, p)
	}
	sortPods(out)
	return out
}

func sortPods(pods []*corev1.Pod) {
	sort.Slice(pods, func(i, j int) bool {
		if pods[i].Namespace != pods[j].Namespace {
			return pods[i].Namespace < pods[j].Namespace
		}
		return pods[i].Name < pods[j].Name
	})
}
