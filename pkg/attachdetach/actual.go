package attachdetach

import (
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// AttachState is what the actual state of world knows of a (volume, node).
type AttachState int

const (
	// AttachStateDetached: the volume is not attached to the node.
	AttachStateDetached AttachState = iota
	// AttachStateUncertain: an attach was tried and failed; the volume may
	// or may not be attached, so it must be detached before it is forgotten.
	AttachStateUncertain
	// AttachStateAttached: the volume is attached to the node.
	AttachStateAttached
)

func (s AttachState) String() string {
	switch s {
	case AttachStateAttached:
		return "Attached"
	case AttachStateUncertain:
		return "Uncertain"
	}
	return "Detached"
}

// AttachedVolume is one (volume, node) pair of the actual state of world.
type AttachedVolume struct {
	VolumeName corev1.UniqueVolumeName
	Spec       *Spec
	NodeName   types.NodeName
	// AttachConfirmed is false while the pair is uncertain.
	AttachConfirmed bool
	// MountedByNode says the node may still have the volume mounted. It
	// starts true when the volume attaches, and follows the node's reports
	// (volumesInUse) afterwards.
	MountedByNode bool
	// DetachRequestedTime is when the reconciler first wanted the volume
	// detached and found it could not; zero when no detach is wanted.
	DetachRequestedTime time.Time
	// ReportedAttached says the pair is among the node's attached volumes in
	// its status (or is about to be).
	ReportedAttached bool
}

// Volume returns the name and spec of the pair's volume.
func (a AttachedVolume) Volume() Volume { return Volume{Name: a.VolumeName, Spec: a.Spec} }

// ActualStateOfWorld is the set of (volume, node) pairs that are attached or
// may be, and, per node, the volumes to report as attached in its status.
// It is safe for concurrent use.
type ActualStateOfWorld struct {
	clock clock.PassiveClock

	mu      sync.RWMutex
	volumes map[corev1.UniqueVolumeName]*actualVolume
	// statuses are the nodes whose status reports attached volumes.
	statuses map[types.NodeName]*nodeStatus
}

type actualVolume struct {
	spec  *Spec
	nodes map[types.NodeName]*attachment
}

type attachment struct {
	confirmed           bool
	mountedByNode       bool
	detachRequestedTime time.Time
}

type nodeStatus struct {
	updateNeeded bool
	reported     map[corev1.UniqueVolumeName]struct{}
}

// NewActualStateOfWorld returns an empty actual state of world whose detach
// request times come from clk.
func NewActualStateOfWorld(clk clock.PassiveClock) *ActualStateOfWorld {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &ActualStateOfWorld{
		clock:    clk,
		volumes:  make(map[corev1.UniqueVolumeName]*actualVolume),
		statuses: make(map[types.NodeName]*nodeStatus),
	}
}

// MarkVolumeAsAttached records that v is attached to node and reports it as
// attached in the node's status.
func (a *ActualStateOfWorld) MarkVolumeAsAttached(v Volume, node types.NodeName) error {
	return a.add(v, node, true)
}

// MarkVolumeAsUncertain records that v may be attached to node. A pair that
// is known attached stays so.
func (a *ActualStateOfWorld) MarkVolumeAsUncertain(v Volume, node types.NodeName) error {
	return a.add(v, node, false)
}

func (a *ActualStateOfWorld) add(v Volume, node types.NodeName, attached bool) error {
	if v.Name == "" || node == "" {
		return fmt.Errorf("mark volume %q on node %q: volume and node names are required", v.Name, node)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	av, ok := a.volumes[v.Name]
	if !ok {
		av = &actualVolume{spec: v.Spec, nodes: make(map[types.NodeName]*attachment)}
		a.volumes[v.Name] = av
	} else if v.Spec != nil {
		av.spec = v.Spec
	}
	at, ok := av.nodes[node]
	if !ok {
		// Until the node says otherwise, assume it mounts what it has.
		at = &attachment{mountedByNode: true}
		av.nodes[node] = at
	}
	if attached {
		at.confirmed = true
		a.addReported(v.Name, node)
	}
	return nil
}

// MarkVolumeAsDetached forgets the pair and stops reporting it as attached.
func (a *ActualStateOfWorld) MarkVolumeAsDetached(volume corev1.UniqueVolumeName, node types.NodeName) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if av, ok := a.volumes[volume]; ok {
		delete(av.nodes, node)
		if len(av.nodes) == 0 {
			delete(a.volumes, volume)
		}
	}
	a.removeReported(volume, node)
}

// SetVolumesMountedByNode records which of the volumes attached to node the
// node has in use (its status's volumesInUse); the others are unmounted.
func (a *ActualStateOfWorld) SetVolumesMountedByNode(node types.NodeName, inUse []corev1.UniqueVolumeName) {
	mounted := make(map[corev1.UniqueVolumeName]bool, len(inUse))
	for _, v := range inUse {
		mounted[v] = true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for name, av := range a.volumes {
		if at, ok := av.nodes[node]; ok {
			at.mountedByNode = mounted[name]
		}
	}
}

// SetDetachRequestTime records now as the time a detach of the pair was
// first wanted, unless one is already recorded, and returns how long ago
// that was.
func (a *ActualStateOfWorld) SetDetachRequestTime(volume corev1.UniqueVolumeName, node types.NodeName) (time.Duration, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	at, err := a.get(volume, node)
	if err != nil {
		return 0, err
	}
	if at.detachRequestedTime.IsZero() {
		at.detachRequestedTime = a.clock.Now()
	}
	return a.clock.Since(at.detachRequestedTime), nil
}

// ResetDetachRequestTime clears the pair's detach request time: a pod needs
// the volume again.
func (a *ActualStateOfWorld) ResetDetachRequestTime(volume corev1.UniqueVolumeName, node types.NodeName) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if at, err := a.get(volume, node); err == nil {
		at.detachRequestedTime = time.Time{}
	}
}

func (a *ActualStateOfWorld) get(volume corev1.UniqueVolumeName, node types.NodeName) (*attachment, error) {
	av, ok := a.volumes[volume]
	if !ok {
		return nil, fmt.Errorf("volume %q is not attached to any node", volume)
	}
	at, ok := av.nodes[node]
	if !ok {
		return nil, fmt.Errorf("volume %q is not attached to node %q", volume, node)
	}
	return at, nil
}

// RemoveVolumeFromReportAsAttached stops reporting the pair as attached in
// the node's status, and marks that status for an update.
func (a *ActualStateOfWorld) RemoveVolumeFromReportAsAttached(volume corev1.UniqueVolumeName, node types.NodeName) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.removeReported(volume, node)
}

// AddVolumeToReportAsAttached reports the pair as attached in the node's
// status again, if it is still in the actual state of world.
func (a *ActualStateOfWorld) AddVolumeToReportAsAttached(volume corev1.UniqueVolumeName, node types.NodeName) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, err := a.get(volume, node); err != nil {
		return
	}
	a.addReported(volume, node)
}

func (a *ActualStateOfWorld) addReported(volume corev1.UniqueVolumeName, node types.NodeName) {
	ns, ok := a.statuses[node]
	if !ok {
		ns = &nodeStatus{reported: make(map[corev1.UniqueVolumeName]struct{})}
		a.statuses[node] = ns
	}
	if _, ok := ns.reported[volume]; !ok {
		ns.reported[volume] = struct{}{}
		ns.updateNeeded = true
	}
}

func (a *ActualStateOfWorld) removeReported(volume corev1.UniqueVolumeName, node types.NodeName) error {
	ns, ok := a.statuses[node]
	if !ok {
		return fmt.Errorf("node %q reports no attached volumes", node)
	}
	if _, ok := ns.reported[volume]; !ok {
		return fmt.Errorf("node %q does not report volume %q as attached", node, volume)
	}
	delete(ns.reported, volume)
	ns.updateNeeded = true
	return nil
}

// SetNodeStatusUpdateNeeded marks node's status for an update (after a
// failed one, or when it shows other volumes than reported).
func (a *ActualStateOfWorld) SetNodeStatusUpdateNeeded(node types.NodeName) {
	a.mu.Lock()
	defer a.mu.Unlock()
	ns, ok := a.statuses[node]
	if !ok {
		ns = &nodeStatus{reported: make(map[corev1.UniqueVolumeName]struct{})}
		a.statuses[node] = ns
	}
	ns.updateNeeded = true
}

// RemoveNode forgets the node's status report: the Node is gone. Its
// attachments stay, to be detached.
func (a *ActualStateOfWorld) RemoveNode(node types.NodeName) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.statuses, node)
}

// GetAttachState returns what is known of the pair.
func (a *ActualStateOfWorld) GetAttachState(volume corev1.UniqueVolumeName, node types.NodeName) AttachState {
	a.mu.RLock()
	defer a.mu.RUnlock()
	at, err := a.get(volume, node)
	switch {
	case err != nil:
		return AttachStateDetached
	case at.confirmed:
		return AttachStateAttached
	}
	return AttachStateUncertain
}

// IsVolumeAttachedToNode reports whether the pair is attached, not merely
// uncertain. The mount side waits for it before mounting.
func (a *ActualStateOfWorld) IsVolumeAttachedToNode(volume corev1.UniqueVolumeName, node types.NodeName) bool {
	return a.GetAttachState(volume, node) == AttachStateAttached
}

// GetAttachedVolumes returns every pair, attached or uncertain, sorted by
// volume and node name.
func (a *ActualStateOfWorld) GetAttachedVolumes() []AttachedVolume {
	return a.list(func(types.NodeName, *attachment) bool { return true })
}

// GetAttachedVolumesForNode returns the pairs of node, attached or uncertain.
func (a *ActualStateOfWorld) GetAttachedVolumesForNode(node types.NodeName) []AttachedVolume {
	return a.list(func(n types.NodeName, _ *attachment) bool { return n == node })
}

// GetAttachedVolumesPerNode returns the confirmed attachments by node.
func (a *ActualStateOfWorld) GetAttachedVolumesPerNode() map[types.NodeName][]AttachedVolume {
	out := make(map[types.NodeName][]AttachedVolume)
	for _, av := range a.list(func(_ types.NodeName, at *attachment) bool { return at.confirmed }) {
		out[av.NodeName] = append(out[av.NodeName], av)
	}
	return out
}

func (a *ActualStateOfWorld) list(keep func(types.NodeName, *attachment) bool) []AttachedVolume {
	a.mu.RLock()
	defer a.mu.RUnlock()
	var out []AttachedVolume
	for name, av := range a.volumes {
		for node, at := range av.nodes {
			if !keep(node, at) {
				continue
			}
			_, reported := a.statuses[node].reportedSet()[name]
			out = append(out, AttachedVolume{
				VolumeName:          name,
				Spec:                av.spec,
				NodeName:            node,
				AttachConfirmed:     at.confirmed,
				MountedByNode:       at.mountedByNode,
				DetachRequestedTime: at.detachRequestedTime,
				ReportedAttached:    reported,
			})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].VolumeName != out[j].VolumeName {
			return out[i].VolumeName < out[j].VolumeName
		}
		return out[i].NodeName < out[j].NodeName
	})
	return out
}

func (ns *nodeStatus) reportedSet() map[corev1.UniqueVolumeName]struct{} {
	if ns == nil {
		return nil
	}
	return ns.reported
}

// GetNodesForAttachedVolume returns the nodes the volume is attached to
// (confirmed, not uncertain), sorted.
func (a *ActualStateOfWorld) GetNodesForAttachedVolume(volume corev1.UniqueVolumeName) []types.NodeName {
	a.mu.RLock()
	defer a.mu.RUnlock()
	av, ok := a.volumes[volume]
	if !ok {
		return nil
	}
	var out []types.NodeName
	for node, at := range av.nodes {
		if at.confirmed {
			out = append(out, node)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// GetVolumesToReportAttached returns, for each node whose status needs an
// update, the volumes to report as attached, and clears the need: the
// caller writes them (and calls SetNodeStatusUpdateNeeded if that fails).
func (a *ActualStateOfWorld) GetVolumesToReportAttached() map[types.NodeName][]corev1.AttachedVolume {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[types.NodeName][]corev1.AttachedVolume)
	for node, ns := range a.statuses {
		if ns.updateNeeded {
			out[node] = attachedList(ns.reported)
			ns.updateNeeded = false
		}
	}
	return out
}

// GetVolumesToReportAttachedForNode is GetVolumesToReportAttached for one
// node; ok is false when its status needs no update.
func (a *ActualStateOfWorld) GetVolumesToReportAttachedForNode(node types.NodeName) (ok bool, volumes []corev1.AttachedVolume) {
	a.mu.Lock()
	defer a.mu.Unlock()
	ns, found := a.statuses[node]
	if !found || !ns.updateNeeded {
		return false, nil
	}
	ns.updateNeeded = false
	return true, attachedList(ns.reported)
}

// VolumesReportedAttached returns the volumes node's status reports as
// attached now, without touching the need for an update. The node loop
// reads it when it builds a status of its own accord.
func (a *ActualStateOfWorld) VolumesReportedAttached(node types.NodeName) []corev1.AttachedVolume {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return attachedList(a.statuses[node].reportedSet())
}

func attachedList(reported map[corev1.UniqueVolumeName]struct{}) []corev1.AttachedVolume {
	out := make([]corev1.AttachedVolume, 0, len(reported))
	for name := range reported {
		out = append(out, corev1.AttachedVolume{Name: name})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
