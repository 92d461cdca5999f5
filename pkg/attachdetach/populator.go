package attachdetach

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Defaults of PopulatorOptions.
const (
	DefaultRemovePeriod = time.Minute
	DefaultAddPeriod    = 3 * time.Minute
)

// Informers are the shared informers the populator reads. The pod informer
// may hold only the pods of the managed nodes; the others hold every object.
type Informers struct {
	Pods    cache.SharedIndexInformer
	Claims  cache.SharedIndexInformer
	Volumes cache.SharedIndexInformer
	Nodes   cache.SharedIndexInformer
}

// PopulatorOptions configures a Populator; zero fields take defaults.
type PopulatorOptions struct {
	// RemovePeriod is how often pods that are gone or terminated are looked
	// for and their volumes released, in case an event was missed
	// (default 1m).
	RemovePeriod time.Duration
	// AddPeriod is how often every running pod's volumes are added again, so
	// that a volume that could not be resolved before (claim not bound yet)
	// is retried (default 3m).
	AddPeriod time.Duration
	// Clock is the time source (default the real clock).
	Clock clock.WithTicker
}

func (o *PopulatorOptions) validate() error {
	errs := []error{
		defaultDuration(&o.RemovePeriod, "removePeriod", DefaultRemovePeriod),
		defaultDuration(&o.AddPeriod, "addPeriod", DefaultAddPeriod),
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	return errors.Join(errs...)
}

// defaultDuration checks that a duration option is not negative and sets
// it to def when it is zero.
func defaultDuration(d *time.Duration, name string, def time.Duration) error {
	if *d < 0 {
		return fmt.Errorf("%s %v: must not be negative", name, *d)
	}
	if *d == 0 {
		*d = def
	}
	return nil
}

// Populator keeps the desired state of world in step with the pods, claims,
// volumes and nodes in the informers: a managed node is in it, and so is
// every attachable volume that a running pod bound to a managed node uses.
// At start it also fills the actual state of world from the nodes' reported
// attached volumes, and it keeps each attachment's mountedByNode in step
// with its node's volumesInUse.
type Populator struct {
	dsw      *DesiredStateOfWorld
	asw      *ActualStateOfWorld
	plugins  Plugins
	informer Informers
	manages  func(node string) bool
	opts     PopulatorOptions

	pods    corelisters.PodLister
	claims  corelisters.PersistentVolumeClaimLister
	volumes corelisters.PersistentVolumeLister
	nodes   corelisters.NodeLister

	// nodeAdded wakes the loop to add the pods of a node that became managed.
	nodeAdded chan struct{}
	synced    chan struct{}
}

// NewPopulator returns a populator of dsw and asw from informers, for the
// nodes that manages says are this process's.
func NewPopulator(dsw *DesiredStateOfWorld, asw *ActualStateOfWorld, plugins Plugins, informers Informers,
	manages func(node string) bool, opts PopulatorOptions) (*Populator, error) {
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("invalid populator options: %w", err)
	}
	return &Populator{
		dsw:       dsw,
		asw:       asw,
		plugins:   plugins,
		informer:  informers,
		manages:   manages,
		opts:      opts,
		pods:      corelisters.NewPodLister(informers.Pods.GetIndexer()),
		claims:    corelisters.NewPersistentVolumeClaimLister(informers.Claims.GetIndexer()),
		volumes:   corelisters.NewPersistentVolumeLister(informers.Volumes.GetIndexer()),
		nodes:     corelisters.NewNodeLister(informers.Nodes.GetIndexer()),
		nodeAdded: make(chan struct{}, 1),
		synced:    make(chan struct{}),
	}, nil
}

// NodeLister lists the nodes of the node informer; the reconciler and the
// executor read node health, taints and volumesInUse from it.
func (p *Populator) NodeLister() corelisters.NodeLister { return p.nodes }

// Synced is closed once the caches have synced and both states of world
// were filled from them: the reconciler must not start before, or it would
// detach volumes that pods it has not seen yet need.
func (p *Populator) Synced() <-chan struct{} { return p.synced }

// Run registers the populator's event handlers, waits for the caches, fills
// the states of world, and then keeps the desired one in step until ctx is
// done.
func (p *Populator) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	regs, err := p.addHandlers(ctx)
	defer func() {
		for inf, reg := range regs {
			if err := inf.RemoveEventHandler(reg); err != nil {
				logger.Error(err, "Cannot remove event handler")
			}
		}
	}()
	if err != nil {
		return err
	}
	synced := []cache.InformerSynced{p.informer.Pods.HasSynced, p.informer.Claims.HasSynced,
		p.informer.Volumes.HasSynced, p.informer.Nodes.HasSynced}
	for _, reg := range regs {
		synced = append(synced, reg.HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return fmt.Errorf("volume populator: caches did not sync: %w", context.Cause(ctx))
	}
	p.populateActualState(ctx)
	p.addActivePods(ctx)
	close(p.synced)

	removeTicker := p.opts.Clock.NewTicker(p.opts.RemovePeriod)
	defer removeTicker.Stop()
	addTicker := p.opts.Clock.NewTicker(p.opts.AddPeriod)
	defer addTicker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-removeTicker.C():
			p.removeDeletedPods(ctx)
		case <-addTicker.C():
			p.addActivePods(ctx)
		case <-p.nodeAdded:
			p.addActivePods(ctx)
		}
	}
}

func (p *Populator) addHandlers(ctx context.Context) (map[cache.SharedIndexInformer]cache.ResourceEventHandlerRegistration, error) {
	regs := make(map[cache.SharedIndexInformer]cache.ResourceEventHandlerRegistration)
	handlers := []struct {
		inf cache.SharedIndexInformer
		h   cache.ResourceEventHandler
	}{
		{p.informer.Nodes, cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { p.nodeChanged(ctx, obj) },
			UpdateFunc: func(_, obj any) { p.nodeChanged(ctx, obj) },
			DeleteFunc: func(obj any) { p.nodeDeleted(ctx, obj) },
		}},
		{p.informer.Pods, cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { p.podChanged(ctx, obj) },
			UpdateFunc: func(_, obj any) { p.podChanged(ctx, obj) },
			DeleteFunc: func(obj any) { p.podDeleted(obj) },
		}},
		{p.informer.Claims, cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { p.claimChanged(ctx, obj) },
			UpdateFunc: func(_, obj any) { p.claimChanged(ctx, obj) },
		}},
		{p.informer.Volumes, cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { p.volumeChanged(ctx, obj) },
			UpdateFunc: func(_, obj any) { p.volumeChanged(ctx, obj) },
		}},
	}
	for _, h := range handlers {
		reg, err := h.inf.AddEventHandler(h.h)
		if err != nil {
			return regs, fmt.Errorf("volume populator: add event handler: %w", err)
		}
		regs[h.inf] = reg
	}
	return regs, nil
}

// populateActualState records the volumes that the managed nodes' statuses
// report as attached, so that after a restart volumes no pod needs any
// more are still detached.
func (p *Populator) populateActualState(ctx context.Context) {
	logger := klog.FromContext(ctx)
	nodes, err := p.nodes.List(labels.Everything())
	if err != nil {
		logger.Error(err, "Cannot list nodes")
		return
	}
	var byName map[corev1.UniqueVolumeName]*Spec
	for _, node := range nodes {
		if !p.manages(node.Name) || len(node.Status.VolumesAttached) == 0 {
			continue
		}
		if byName == nil {
			byName = p.specsByName(ctx)
		}
		name := types.NodeName(node.Name)
		for _, av := range node.Status.VolumesAttached {
			spec := byName[av.Name]
			if spec == nil {
				spec = specFromCSIVolumeName(av.Name)
			}
			if err := p.asw.MarkVolumeAsAttached(Volume{Name: av.Name, Spec: spec}, name); err != nil {
				logger.Error(err, "Cannot record attached volume", "node", node.Name, "volume", av.Name)
			}
		}
		p.asw.SetVolumesMountedByNode(name, node.Status.VolumesInUse)
	}
}

// specsByName returns the specs of the PersistentVolumes that the plugins
// attach, by unique name.
func (p *Populator) specsByName(ctx context.Context) map[corev1.UniqueVolumeName]*Spec {
	out := make(map[corev1.UniqueVolumeName]*Spec)
	pvs, err := p.volumes.List(labels.Everything())
	if err != nil {
		klog.FromContext(ctx).Error(err, "Cannot list persistent volumes")
		return out
	}
	for _, pv := range pvs {
		spec := &Spec{PersistentVolume: pv}
		plugin := p.plugins.FindSupporting(spec)
		if plugin == nil {
			continue
		}
		if name, err := plugin.VolumeName(spec); err == nil {
			out[name] = SpecFromPersistentVolume(pv, false)
		}
	}
	return out
}

// specFromCSIVolumeName rebuilds the spec of a CSI volume from its unique
// name, for an attached volume whose PersistentVolume is gone: enough for
// a plugin to detach it. Any other name gives a nil spec.
func specFromCSIVolumeName(name corev1.UniqueVolumeName) *Spec {
	rest, ok := strings.CutPrefix(string(name), csiPluginName+"/")
	if !ok {
		return nil
	}
	driver, handle, ok := strings.Cut(rest, "^")
	if !ok || driver == "" || handle == "" {
		return nil
	}
	return &Spec{PersistentVolume: &corev1.PersistentVolume{Spec: corev1.PersistentVolumeSpec{
		PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: handle}},
	}}}
}

func (p *Populator) nodeChanged(ctx context.Context, obj any) {
	node, ok := obj.(*corev1.Node)
	if !ok || !p.manages(node.Name) {
		return
	}
	name := types.NodeName(node.Name)
	if !p.dsw.NodeExists(name) {
		p.dsw.AddNode(name)
		// Its status may not have been written while the Node was missing.
		p.asw.SetNodeStatusUpdateNeeded(name)
		klog.FromContext(ctx).V(4).Info("Managing volumes of node", "node", node.Name)
		select {
		case p.nodeAdded <- struct{}{}:
		default:
		}
	}
	p.asw.SetVolumesMountedByNode(name, node.Status.VolumesInUse)
	// A status that lists other volumes than we report (a recreated Node,
	// or a status someone else overwrote) is written again.
	if !sameVolumes(node.Status.VolumesAttached, p.asw.VolumesReportedAttached(name)) {
		p.asw.SetNodeStatusUpdateNeeded(name)
	}
}

// sameVolumes reports whether a and b name the same volumes.
func sameVolumes(a, b []corev1.AttachedVolume) bool {
	if len(a) != len(b) {
		return false
	}
	names := make(map[corev1.UniqueVolumeName]bool, len(a))
	for _, v := range a {
		names[v.Name] = true
	}
	for _, v := range b {
		if !names[v.Name] {
			return false
		}
	}
	return true
}

func (p *Populator) nodeDeleted(ctx context.Context, obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	node, ok := obj.(*corev1.Node)
	if !ok || !p.manages(node.Name) {
		return
	}
	name := types.NodeName(node.Name)
	if err := p.dsw.DeleteNode(name); err != nil {
		// Pods on a deleted node keep their volumes until they go too.
		klog.FromContext(ctx).Info("Node deleted but still has volumes to attach", "node", node.Name, "err", err)
	}
	p.asw.SetVolumesMountedByNode(name, node.Status.VolumesInUse)
}

func (p *Populator) podChanged(ctx context.Context, obj any) {
	if pod, ok := obj.(*corev1.Pod); ok {
		p.processPod(ctx, pod)
	}
}

func (p *Populator) podDeleted(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if pod, ok := obj.(*corev1.Pod); ok {
		p.dsw.DeletePod(pod.UID)
	}
}

// claimChanged processes again the pods that use the claim: it may have
// become bound.
func (p *Populator) claimChanged(ctx context.Context, obj any) {
	if pvc, ok := obj.(*corev1.PersistentVolumeClaim); ok {
		p.processClaimPods(ctx, pvc.Namespace, pvc.Name)
	}
}

// volumeChanged processes again the pods that use the volume's claim: the
// volume may have become bound to it.
func (p *Populator) volumeChanged(ctx context.Context, obj any) {
	if pv, ok := obj.(*corev1.PersistentVolume); ok && pv.Spec.ClaimRef != nil {
		p.processClaimPods(ctx, pv.Spec.ClaimRef.Namespace, pv.Spec.ClaimRef.Name)
	}
}

func (p *Populator) processClaimPods(ctx context.Context, namespace, claim string) {
	pods, err := p.pods.Pods(namespace).List(labels.Everything())
	if err != nil {
		klog.FromContext(ctx).Error(err, "Cannot list pods", "namespace", namespace)
		return
	}
	for _, pod := range pods {
		for i := range pod.Spec.Volumes {
			if claimName(pod, &pod.Spec.Volumes[i]) == claim {
				p.processPod(ctx, pod)
				break
			}
		}
	}
}

// processPod adds the attachable volumes of a running pod on a managed node
// to the desired state of world, or removes all of a terminated pod's.
func (p *Populator) processPod(ctx context.Context, pod *corev1.Pod) {
	if pod.Spec.NodeName == "" || len(pod.Spec.Volumes) == 0 {
		return
	}
	if podTerminated(pod) {
		p.dsw.DeletePod(pod.UID)
		return
	}
	node := types.NodeName(pod.Spec.NodeName)
	if !p.dsw.NodeExists(node) {
		return
	}
	logger := klog.FromContext(ctx).WithValues("pod", klog.KObj(pod))
	for i := range pod.Spec.Volumes {
		v, err := p.attachableVolume(pod, &pod.Spec.Volumes[i])
		if err != nil {
			// Tried again when the claim or volume changes, and every AddPeriod.
			logger.V(4).Info("Volume not added", "volume", pod.Spec.Volumes[i].Name, "err", err)
			continue
		}
		if v.Spec == nil {
			continue
		}
		if err := p.dsw.AddPod(pod, v, node); err != nil {
			logger.Error(err, "Cannot add volume", "volume", v.Name)
		}
	}
}

// PodVolumes returns the names of the volumes of pod that must be attached
// before it runs, or the errors of the volumes it cannot resolve yet (a
// claim not bound, a volume not found).
func (p *Populator) PodVolumes(pod *corev1.Pod) ([]corev1.UniqueVolumeName, error) {
	var names []corev1.UniqueVolumeName
	var errs []error
	for i := range pod.Spec.Volumes {
		v, err := p.attachableVolume(pod, &pod.Spec.Volumes[i])
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("volume %q: %w", pod.Spec.Volumes[i].Name, err))
		case v.Spec != nil:
			names = append(names, v.Name)
		}
	}
	return names, errors.Join(errs...)
}

// attachableVolume resolves a pod's volume to the volume to attach; a zero
// Volume when no plugin attaches it.
func (p *Populator) attachableVolume(pod *corev1.Pod, v *corev1.Volume) (Volume, error) {
	spec, err := p.spec(pod, v)
	if err != nil {
		return Volume{}, err
	}
	plugin, err := p.plugins.FindAttachable(spec)
	if err != nil || plugin == nil {
		return Volume{}, err
	}
	name, err := plugin.VolumeName(spec)
	if err != nil {
		return Volume{}, fmt.Errorf("plugin %s: name of volume %q: %w", plugin.Name(), spec.Name(), err)
	}
	if spec.PersistentVolume == nil {
		spec = SpecFromVolume(v)
	}
	return Volume{Name: name, Spec: spec}, nil
}

// spec resolves a pod's volume: through its claim to the bound
// PersistentVolume, or the inline volume itself (not copied: the caller
// copies it if it keeps it).
func (p *Populator) spec(pod *corev1.Pod, v *corev1.Volume) (*Spec, error) {
	claim := claimName(pod, v)
	if claim == "" {
		return &Spec{Volume: v}, nil
	}
	pvc, err := p.claims.PersistentVolumeClaims(pod.Namespace).Get(claim)
	if err != nil {
		return nil, fmt.Errorf("get claim %s/%s: %w", pod.Namespace, claim, err)
	}
	if v.Ephemeral != nil && !metav1.IsControlledBy(pvc, pod) {
		return nil, fmt.Errorf("claim %s/%s was not created for the pod's ephemeral volume", pod.Namespace, claim)
	}
	if pvc.Status.Phase != corev1.ClaimBound || pvc.Spec.VolumeName == "" {
		return nil, fmt.Errorf("claim %s/%s is not bound", pod.Namespace, claim)
	}
	pv, err := p.volumes.Get(pvc.Spec.VolumeName)
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("volume %s of claim %s/%s not found", pvc.Spec.VolumeName, pod.Namespace, claim)
	}
	if err != nil {
		return nil, fmt.Errorf("get volume %s: %w", pvc.Spec.VolumeName, err)
	}
	if pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.UID != pvc.UID {
		return nil, fmt.Errorf("volume %s is not bound to claim %s/%s", pv.Name, pod.Namespace, claim)
	}
	readOnly := v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ReadOnly
	return SpecFromPersistentVolume(pv, readOnly), nil
}

// claimName is the claim a pod's volume uses, "" for none: the named claim,
// or the one generated for an ephemeral volume.
func claimName(pod *corev1.Pod, v *corev1.Volume) string {
	switch {
	case v.PersistentVolumeClaim != nil:
		return v.PersistentVolumeClaim.ClaimName
	case v.Ephemeral != nil:
		return pod.Name + "-" + v.Name
	}
	return ""
}

// podTerminated reports whether a pod needs its volumes no more: it
// succeeded or failed, or it is being deleted and none of its containers
// runs.
func podTerminated(pod *corev1.Pod) bool {
	switch pod.Status.Phase {
	case corev1.PodSucceeded, corev1.PodFailed:
		return true
	}
	return pod.DeletionTimestamp != nil &&
		notRunning(pod.Status.InitContainerStatuses) &&
		notRunning(pod.Status.ContainerStatuses) &&
		notRunning(pod.Status.EphemeralContainerStatuses)
}

func notRunning(statuses []corev1.ContainerStatus) bool {
	for _, s := range statuses {
		if s.State.Terminated == nil && s.State.Waiting == nil {
			return false
		}
	}
	return true
}

// addActivePods adds the volumes of every running pod on a managed node.
func (p *Populator) addActivePods(ctx context.Context) {
	pods, err := p.pods.List(labels.Everything())
	if err != nil {
		klog.FromContext(ctx).Error(err, "Cannot list pods")
		return
	}
	for _, pod := range pods {
		if !podTerminated(pod) {
			p.processPod(ctx, pod)
		}
	}
}

// removeDeletedPods releases the volumes of pods that are gone from the
// informer, were replaced by a pod of the same name, or terminated.
func (p *Populator) removeDeletedPods(ctx context.Context) {
	seen := make(map[types.UID]bool)
	for _, pv := range p.dsw.GetPodVolumes() {
		if seen[pv.Pod.UID] {
			continue
		}
		seen[pv.Pod.UID] = true
		pod, err := p.pods.Pods(pv.Pod.Namespace).Get(pv.Pod.Name)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			klog.FromContext(ctx).Error(err, "Cannot get pod", "pod", klog.KObj(pv.Pod))
			continue
		case pod.UID == pv.Pod.UID && !podTerminated(pod):
			continue
		}
		klog.FromContext(ctx).V(4).Info("Releasing volumes of a pod that is gone", "pod", klog.KObj(pv.Pod))
		p.dsw.DeletePod(pv.Pod.UID)
	}
}
