package csimount

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/csi"
	"github.com/nodelet/nodelet/pkg/lifecycle/hostvolume"
)

// DefaultAttachTimeout is how long a volume may wait to be attached before
// its pod gets a FailedAttachVolume Event, as long as the kubelet waits.
const DefaultAttachTimeout = 2 * time.Minute

// Sources are the API objects the Manager reads, from informer caches. A
// claim or volume that the cache does not show bound is read again from the
// API server before the pod is told so.
type Sources struct {
	Claims      corelisters.PersistentVolumeClaimLister
	Volumes     corelisters.PersistentVolumeLister
	Drivers     storagelisters.CSIDriverLister
	Attachments storagelisters.VolumeAttachmentLister
	// Nodes lists at least the Node of Options.NodeName.
	Nodes corelisters.NodeLister
	// Synced tells whether the caches have synced; until they have, volumes
	// wait. Nil means they have.
	Synced func() bool
}

func (s *Sources) validate() error {
	if s.Claims == nil || s.Volumes == nil || s.Drivers == nil || s.Attachments == nil || s.Nodes == nil {
		return errors.New("listers of claims, volumes, drivers, attachments and nodes are required")
	}
	return nil
}

// Options configure a Manager. NodeName and RootDir are required.
type Options struct {
	NodeName string
	// RootDir is the agent's root directory: pods' volumes are published
	// under RootDir/pods, staged under RootDir/plugins/kubernetes.io/csi,
	// and drivers listen under RootDir/plugins.
	RootDir string
	// AttachTimeout is how long a volume waits to be attached before its
	// pod gets a FailedAttachVolume Event (default DefaultAttachTimeout).
	AttachTimeout time.Duration
	// Client configures the calls to the drivers.
	Client csi.NodeClientOptions
	// Clock times the wait for attach; default the real clock.
	Clock clock.Clock
}

func (o *Options) validate() error {
	var errs []error
	if o.NodeName == "" {
		errs = append(errs, errors.New("node name is required"))
	}
	if !filepath.IsAbs(o.RootDir) {
		errs = append(errs, fmt.Errorf("root dir %q: must be an absolute path", o.RootDir))
	}
	if o.AttachTimeout < 0 {
		errs = append(errs, fmt.Errorf("attach timeout %v: must not be negative", o.AttachTimeout))
	}
	return errors.Join(errs...)
}

// Manager sets up and tears down the CSI volumes of the pods of one node,
// and says which volumes the node uses. It is safe for concurrent use; calls
// for one pod must not run concurrently.
type Manager struct {
	client kubernetes.Interface
	src    Sources
	opts   Options
	logger klog.Logger

	loadOnce sync.Once
	// locks serialises the driver calls for one volume (by unique name).
	locks keyedLocks

	mu   sync.Mutex
	pods map[types.UID]*podVolumes
	// staged are the volumes staged on the node, as recorded on disk.
	staged map[corev1.UniqueVolumeName]*stageRecord
	// stagedNow are the staged volumes staged by this agent: the others
	// are staged again (NodeStageVolume is idempotent) before their next
	// publish.
	stagedNow map[corev1.UniqueVolumeName]bool
	// waitSince is when a pod's volume began to wait, by uid/volume.
	waitSince map[string]time.Time
	// inUse is the last in-use set told to onChange.
	inUse    []corev1.UniqueVolumeName
	onChange func()
}

// podVolumes are one pod's CSI volumes, by the pod's volume name.
type podVolumes struct {
	// wanted are the volumes the pod needs, by unique name: in use from
	// when the pod asks for them until they are released.
	wanted map[string]corev1.UniqueVolumeName
	// published mirrors the publish records on disk.
	published map[string]*publishRecord
	// confirmed are the published volumes this agent published.
	confirmed map[string]bool
}

// New returns a Manager. It does no I/O: the records of an earlier agent are
// read by the first call.
func New(client kubernetes.Interface, src Sources, opts Options) (*Manager, error) {
	var errs []error
	if client == nil {
		errs = append(errs, errors.New("client is required"))
	}
	errs = append(errs, src.validate(), opts.validate())
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("invalid csi mount manager: %w", err)
	}
	if opts.AttachTimeout == 0 {
		opts.AttachTimeout = DefaultAttachTimeout
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if src.Synced == nil {
		src.Synced = func() bool { return true }
	}
	return &Manager{
		client: client, src: src, opts: opts,
		logger:    klog.Background().WithName("csimount").WithValues("node", opts.NodeName),
		pods:      map[types.UID]*podVolumes{},
		staged:    map[corev1.UniqueVolumeName]*stageRecord{},
		stagedNow: map[corev1.UniqueVolumeName]bool{},
		waitSince: map[string]time.Time{},
	}, nil
}

// Handles tells whether v is the Manager's to set up: a
// persistentVolumeClaim, a generic ephemeral volume (a claim made for the
// pod) or an inline csi volume (which it refuses with a clear error).
func Handles(v *corev1.Volume) bool {
	return v.PersistentVolumeClaim != nil || v.Ephemeral != nil || v.CSI != nil
}

// OnChange sets the function called, without locks held, whenever the set
// VolumesInUse returns changes. It must not block.
func (m *Manager) OnChange(f func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.onChange = f
}

// VolumesInUse are the unique names, sorted, of the CSI volumes the node
// must keep attached: those pods want (from their first SetUp until their
// Release) and those published or staged on disk.
func (m *Manager) VolumesInUse() []corev1.UniqueVolumeName {
	m.load()
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.inUseLocked()
}

func (m *Manager) inUseLocked() []corev1.UniqueVolumeName {
	set := map[corev1.UniqueVolumeName]bool{}
	for _, pv := range m.pods {
		for _, name := range pv.wanted {
			set[name] = true
		}
		for _, rec := range pv.published {
			set[rec.UniqueName] = true
		}
	}
	for name := range m.staged {
		set[name] = true
	}
	out := make([]corev1.UniqueVolumeName, 0, len(set))
	for name := range set {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// changed tells onChange when the in-use set changed.
func (m *Manager) changed() {
	m.mu.Lock()
	now := m.inUseLocked()
	same := slices.Equal(now, m.inUse)
	m.inUse = now
	f := m.onChange
	m.mu.Unlock()
	if !same && f != nil {
		f()
	}
}

// SetUp stages and publishes every CSI volume of pod that is not published
// yet and returns each one's host path by volume name. A volume waits until
// its claim is bound and, when attach is required, until it is reported in
// use and attached to the node. Errors are a *SetUpError; SetUp is retried
// until it succeeds.
func (m *Manager) SetUp(ctx context.Context, pod *corev1.Pod) (map[string]string, error) {
	m.load()
	defer m.changed()
	paths := map[string]string{}
	var errs []*VolumeError
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		if !Handles(v) {
			continue
		}
		path, err := m.setUpVolume(ctx, pod, v)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		paths[v.Name] = path
	}
	if len(errs) > 0 {
		return nil, &SetUpError{Volumes: errs}
	}
	return paths, nil
}

// volumeSpec is a pod's CSI volume resolved to its PersistentVolume.
type volumeSpec struct {
	name     string // the pod's name for it
	pv       *corev1.PersistentVolume
	source   *corev1.CSIPersistentVolumeSource
	unique   corev1.UniqueVolumeName
	readOnly bool
}

func (s *volumeSpec) String() string {
	return fmt.Sprintf("%s (persistentvolume %q)", s.unique, s.pv.Name)
}

func (m *Manager) setUpVolume(ctx context.Context, pod *corev1.Pod, v *corev1.Volume) (string, *VolumeError) {
	logger := klog.FromContext(ctx).WithValues("pod", klog.KObj(pod), "volume", v.Name)
	fail := func(reason string, waiting bool, format string, args ...any) *VolumeError {
		return &VolumeError{Volume: v.Name, Reason: reason, Waiting: waiting, Err: fmt.Errorf(format, args...)}
	}
	if v.CSI != nil {
		return "", fail(ReasonFailedMount, false, "inline csi volumes of driver %q are not supported by the process provider; use a PersistentVolumeClaim", v.CSI.Driver)
	}
	if v.Name == "" || v.Name == "." || v.Name == ".." || strings.ContainsAny(v.Name, `/\`) {
		return "", fail(ReasonFailedMount, false, "the volume name is not usable as a directory name")
	}
	if path, ok := m.alreadyPublished(pod.UID, v.Name); ok {
		return path, nil
	}
	if !m.src.Synced() {
		return "", m.wait(pod.UID, v.Name, "waiting for the API caches of claims, volumes and drivers to sync")
	}
	spec, verr := m.resolve(ctx, pod, v)
	if verr != nil {
		return "", verr
	}
	m.want(pod.UID, v.Name, spec.unique)

	var publishContext map[string]string
	driverObj, err := m.driver(spec.source.Driver)
	if err != nil {
		return "", fail(ReasonFailedMount, true, "read CSIDriver %q: %w", spec.source.Driver, err)
	}
	if driverObj == nil || driverObj.Spec.AttachRequired == nil || *driverObj.Spec.AttachRequired {
		var wait *VolumeError
		if publishContext, wait = m.attachment(ctx, pod.UID, spec); wait != nil {
			return "", wait
		}
	}
	m.stopWaiting(pod.UID, v.Name)

	unlock := m.locks.lock(spec.unique)
	defer unlock()
	client, err := m.dial(spec.source.Driver)
	if err != nil {
		return "", fail(ReasonFailedMount, false, "%w", err)
	}
	defer client.Close()
	caps, err := client.NodeGetCapabilities(ctx)
	if err != nil {
		return "", fail(ReasonFailedMount, false, "%w", err)
	}
	req := csi.VolumeRequest{
		VolumeHandle:   spec.source.VolumeHandle,
		PublishContext: publishContext,
		VolumeContext:  volumeContext(pod, spec.source, driverObj),
		Capability: csi.VolumeCapability{
			AccessMode: csi.AccessMode(spec.pv.Spec.AccessModes, caps.SingleNodeMultiWriter),
			FSType:     spec.source.FSType,
			MountFlags: spec.pv.Spec.MountOptions,
		},
	}

	stagingPath := ""
	if caps.StageUnstage {
		dir := m.stagingDir(spec.source.Driver, spec.source.VolumeHandle)
		stagingPath = filepath.Join(dir, stagingName)
		if err := m.stage(ctx, client, spec, req, dir, stagingPath); err != nil {
			return "", fail(ReasonFailedMount, false, "MountVolume.MountDevice failed for %s: %w", spec, err)
		}
	}

	dir := m.volumeDir(pod.UID, v.Name)
	target := filepath.Join(dir, targetName)
	rec := &publishRecord{
		Driver: spec.source.Driver, VolumeHandle: spec.source.VolumeHandle, UniqueName: spec.unique,
		PersistentVolume: spec.pv.Name, TargetPath: target,
	}
	if err := writeRecord(dir, rec); err != nil {
		return "", fail(ReasonFailedMount, false, "MountVolume.SetUp failed for %s: %w", spec, err)
	}
	m.mu.Lock()
	m.podLocked(pod.UID).published[v.Name] = rec
	m.mu.Unlock()
	secrets, err := m.secrets(ctx, spec.source.NodePublishSecretRef)
	if err != nil {
		return "", fail(ReasonFailedMount, false, "MountVolume.SetUp failed for %s: %w", spec, err)
	}
	preq := csi.PublishRequest{VolumeRequest: req, StagingPath: stagingPath, TargetPath: target, ReadOnly: spec.readOnly}
	preq.Secrets = secrets
	if err := client.NodePublishVolume(ctx, preq); err != nil {
		return "", fail(ReasonFailedMount, false, "MountVolume.SetUp failed for %s: %w", spec, err)
	}
	if fsGroupApplies(pod, spec, driverObj) {
		if err := hostvolume.SetOwnership(target, pod, false); err != nil {
			return "", fail(ReasonFailedMount, false, "MountVolume.SetUp failed for %s: %w", spec, err)
		}
	}
	m.mu.Lock()
	m.podLocked(pod.UID).confirmed[v.Name] = true
	m.mu.Unlock()
	logger.V(2).Info("Published CSI volume", "volume", spec.unique, "target", target, "readOnly", spec.readOnly)
	return target, nil
}

// fsGroupApplies tells whether the node gives a published volume to the
// pod's fsGroup, as the kubelet decides it by the driver's fsGroupPolicy:
// File always, None never, and ReadWriteOnceWithFSType (the default) for a
// volume with an fsType and the ReadWriteOnce access mode. A read-only
// volume is left as it is.
func fsGroupApplies(pod *corev1.Pod, spec *volumeSpec, driver *storagev1.CSIDriver) bool {
	if sc := pod.Spec.SecurityContext; sc == nil || sc.FSGroup == nil || spec.readOnly {
		return false
	}
	policy := storagev1.ReadWriteOnceWithFSTypeFSGroupPolicy
	if driver != nil && driver.Spec.FSGroupPolicy != nil {
		policy = *driver.Spec.FSGroupPolicy
	}
	switch policy {
	case storagev1.FileFSGroupPolicy:
		return true
	case storagev1.NoneFSGroupPolicy:
		return false
	}
	return spec.source.FSType != "" && slices.Contains(spec.pv.Spec.AccessModes, corev1.ReadWriteOnce)
}

// alreadyPublished returns the target of a volume of the pod that is
// published: by this agent, or by an earlier one if it is still mounted.
func (m *Manager) alreadyPublished(uid types.UID, name string) (string, bool) {
	m.mu.Lock()
	pv := m.pods[uid]
	var rec *publishRecord
	confirmed := false
	if pv != nil {
		rec, confirmed = pv.published[name], pv.confirmed[name]
	}
	m.mu.Unlock()
	if rec == nil {
		return "", false
	}
	if confirmed {
		return rec.TargetPath, true
	}
	if mounted, err := hostvolume.IsMountPoint(rec.TargetPath); err != nil || !mounted {
		return "", false
	}
	m.mu.Lock()
	m.podLocked(uid).confirmed[name] = true
	m.mu.Unlock()
	return rec.TargetPath, true
}

// stage stages the volume unless this agent did already. The record is
// written first, so that a crash during the call still unstages it.
func (m *Manager) stage(ctx context.Context, client *csi.NodeClient, spec *volumeSpec, req csi.VolumeRequest, dir, stagingPath string) error {
	m.mu.Lock()
	done := m.stagedNow[spec.unique]
	m.mu.Unlock()
	if done {
		return nil
	}
	rec := &stageRecord{Driver: spec.source.Driver, VolumeHandle: spec.source.VolumeHandle, UniqueName: spec.unique, StagingPath: stagingPath}
	if err := writeRecord(dir, rec); err != nil {
		return err
	}
	m.mu.Lock()
	m.staged[spec.unique] = rec
	m.mu.Unlock()
	if err := os.MkdirAll(stagingPath, 0o750); err != nil {
		return fmt.Errorf("create staging directory: %w", err)
	}
	secrets, err := m.secrets(ctx, spec.source.NodeStageSecretRef)
	if err != nil {
		return err
	}
	sreq := csi.StageRequest{VolumeRequest: req, StagingPath: stagingPath}
	sreq.Secrets = secrets
	if err := client.NodeStageVolume(ctx, sreq); err != nil {
		return err
	}
	m.mu.Lock()
	m.stagedNow[spec.unique] = true
	m.mu.Unlock()
	klog.FromContext(ctx).V(2).Info("Staged CSI volume", "volume", spec.unique, "stagingPath", stagingPath)
	return nil
}
