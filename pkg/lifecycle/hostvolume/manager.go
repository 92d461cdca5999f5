package hostvolume

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// DefaultSyncPeriod is how often registered pods' API-derived volume
// contents are re-read when Options.SyncPeriod is zero.
const DefaultSyncPeriod = 10 * time.Second

// Directory names of the volume kinds under a pod's volumes directory, as
// the kubelet names them.
const (
	pluginEmptyDir    = "kubernetes.io~empty-dir"
	pluginConfigMap   = "kubernetes.io~configmap"
	pluginSecret      = "kubernetes.io~secret"
	pluginDownwardAPI = "kubernetes.io~downward-api"
	pluginProjected   = "kubernetes.io~projected"
)

// Options configures a Manager. Zero values take defaults.
type Options struct {
	// RootDir holds volumes under RootDir/pods/<uid>/volumes/<plugin>/<name>.
	// Required.
	RootDir string
	// SyncPeriod is how often configMap, secret, projected and downwardAPI
	// contents are re-read. Default DefaultSyncPeriod.
	SyncPeriod time.Duration
	// Clock drives the refresh loop and token expiry. Default the real clock.
	Clock clock.Clock
	// Allocatable is the node's allocatable resources: a downwardAPI file
	// of a limit the container does not set reads it, as the kubelet's
	// does. Nil: such a file reads 0.
	Allocatable func() corev1.ResourceList
}

// Manager sets up, refreshes and tears down the volumes of pods. Its
// methods are safe for concurrent use.
type Manager struct {
	client kubernetes.Interface
	opts   Options

	mu   sync.Mutex
	pods map[types.UID]*podState
}

// podState is what the refresh loop knows of a registered pod. mu serialises
// all writes into the pod's volume directories.
type podState struct {
	mu     sync.Mutex
	pod    *corev1.Pod       // as of the last successful SetUp; nil before
	tokens map[string]*token // by volume name + "/" + path in the volume
	gone   bool              // torn down
}

// NewManager returns a Manager; it does no I/O.
func NewManager(client kubernetes.Interface, opts Options) *Manager {
	if opts.SyncPeriod <= 0 {
		opts.SyncPeriod = DefaultSyncPeriod
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &Manager{client: client, opts: opts, pods: map[types.UID]*podState{}}
}

// volumesDir returns RootDir/pods/<uid>/volumes after checking that the UID
// cannot step out of it.
func (m *Manager) volumesDir(pod *corev1.Pod) (string, error) {
	if m.opts.RootDir == "" {
		return "", errors.New("volume manager has no root directory")
	}
	uid := string(pod.UID)
	if uid == "" || uid == "." || uid == ".." || strings.ContainsAny(uid, `/\`) {
		return "", fmt.Errorf("pod %s/%s has an unusable uid %q", pod.Namespace, pod.Name, uid)
	}
	return filepath.Join(m.opts.RootDir, "pods", uid, "volumes"), nil
}

// SetUp prepares every volume of pod but its image volumes, which the
// runtime mounts, and returns each volume's host path by volume name. It is idempotent: calling it again with an updated pod brings
// the contents up to date. On success the pod is registered for refresh.
// Errors name the volume; all failing volumes are reported.
func (m *Manager) SetUp(ctx context.Context, pod *corev1.Pod) (map[string]string, error) {
	root, err := m.volumesDir(pod)
	if err != nil {
		return nil, err
	}
	st := m.state(pod.UID)
	st.mu.Lock()
	for st.gone {
		// Torn down while we waited: start over with a fresh registration.
		st.mu.Unlock()
		st = m.state(pod.UID)
		st.mu.Lock()
	}
	defer st.mu.Unlock()

	pod = pod.DeepCopy()
	paths := make(map[string]string, len(pod.Spec.Volumes))
	objs := newObjectCache(m.client)
	var errs []error
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		if v.Image != nil {
			continue // the runtime mounts image volumes (ContainerMounts)
		}
		p, err := m.setUpVolume(ctx, st, objs, root, pod, v)
		if err != nil {
			errs = append(errs, &SetUpError{Volume: v.Name, Err: err})
			continue
		}
		paths[v.Name] = p
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}

	st.pod = pod
	klog.FromContext(ctx).V(4).Info("Set up pod volumes", "pod", klog.KObj(pod), "volumes", len(paths))
	return paths, nil
}

// state returns the state of a pod, registering it if needed. The refresh
// loop skips it until a SetUp has succeeded.
func (m *Manager) state(uid types.UID) *podState {
	m.mu.Lock()
	defer m.mu.Unlock()
	st, ok := m.pods[uid]
	if !ok {
		st = &podState{tokens: map[string]*token{}}
		m.pods[uid] = st
	}
	return st
}

func (m *Manager) setUpVolume(ctx context.Context, st *podState, objs *objectCache, root string, pod *corev1.Pod, v *corev1.Volume) (string, error) {
	src := &v.VolumeSource
	switch {
	case src.HostPath != nil:
		return checkHostPath(src.HostPath)
	case src.EmptyDir != nil:
		dir := filepath.Join(root, pluginEmptyDir, v.Name)
		if err := setUpEmptyDir(dir, src.EmptyDir); err != nil {
			return "", err
		}
		return dir, setOwnership(dir, fsGroup(pod), false)
	}
	plugin, ok := contentPlugin(src)
	if !ok {
		return "", fmt.Errorf("type %s is not supported by the process provider", sourceType(src))
	}
	dir := filepath.Join(root, plugin, v.Name)
	if err := m.writeContent(ctx, st, objs, pod, v, dir); err != nil {
		return "", err
	}
	return dir, nil
}

// contentPlugin returns the directory name of the volume kinds whose files
// come from the API and are kept current by the refresh loop.
func contentPlugin(src *corev1.VolumeSource) (string, bool) {
	switch {
	case src.ConfigMap != nil:
		return pluginConfigMap, true
	case src.Secret != nil:
		return pluginSecret, true
	case src.DownwardAPI != nil:
		return pluginDownwardAPI, true
	case src.Projected != nil:
		return pluginProjected, true
	}
	return "", false
}

// writeContent computes the files of an API-derived volume and swaps them in
// if they changed. Secret and projected volumes live on tmpfs when the host
// allows it, so that credentials do not reach the disk.
func (m *Manager) writeContent(ctx context.Context, st *podState, objs *objectCache, pod *corev1.Pod, v *corev1.Volume, dir string) error {
	files, err := m.payload(ctx, st, objs, pod, v)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create directory: %w", err)
	}
	if v.Secret != nil || v.Projected != nil {
		if err := ensureTmpfs(dir, "mode=0755"); err != nil {
			if !errors.Is(err, os.ErrPermission) {
				return err
			}
			klog.FromContext(ctx).V(2).Info("Cannot mount tmpfs, keeping volume on disk", "pod", klog.KObj(pod), "volume", v.Name, "err", err)
		}
	}
	changed, err := writeAtomic(dir, files, m.opts.Clock.Now())
	if err != nil {
		return err
	}
	if err := setOwnership(dir, fsGroup(pod), true); err != nil {
		return err
	}
	if changed {
		klog.FromContext(ctx).V(4).Info("Updated volume contents", "pod", klog.KObj(pod), "volume", v.Name)
	}
	return nil
}

// Run refreshes the contents of registered pods' configMap, secret,
// downwardAPI and projected volumes every SyncPeriod, including service
// account tokens that are due for renewal, until ctx ends.
func (m *Manager) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	logger.V(2).Info("Starting volume refresh", "period", m.opts.SyncPeriod)
	timer := m.opts.Clock.NewTimer(m.opts.SyncPeriod)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C():
			m.syncAll(ctx)
			timer.Reset(m.opts.SyncPeriod)
		}
	}
}

// syncAll refreshes every registered pod once. Failures are logged and the
// previous contents kept; they are retried on the next round.
func (m *Manager) syncAll(ctx context.Context) {
	m.mu.Lock()
	states := make([]*podState, 0, len(m.pods))
	for _, st := range m.pods {
		states = append(states, st)
	}
	m.mu.Unlock()

	objs := newObjectCache(m.client)
	for _, st := range states {
		if ctx.Err() != nil {
			return
		}
		m.syncPod(ctx, st, objs)
	}
}

func (m *Manager) syncPod(ctx context.Context, st *podState, objs *objectCache) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.gone || st.pod == nil {
		return
	}
	pod := st.pod
	root, err := m.volumesDir(pod)
	if err != nil {
		return
	}
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		plugin, ok := contentPlugin(&v.VolumeSource)
		if !ok {
			continue
		}
		if err := m.writeContent(ctx, st, objs, pod, v, filepath.Join(root, plugin, v.Name)); err != nil {
			klog.FromContext(ctx).Error(err, "Refreshing volume failed, keeping its previous contents", "pod", klog.KObj(pod), "volume", v.Name)
		}
	}
}

// TearDown unregisters the pod, unmounts the tmpfs file systems of its
// volumes and removes its volume directories. It is idempotent and works
// for pods this Manager never saw (after a restart). It never descends into
// a mount point and never touches hostPath volumes.
func (m *Manager) TearDown(ctx context.Context, pod *corev1.Pod) error {
	root, err := m.volumesDir(pod)
	if err != nil {
		return err
	}
	m.mu.Lock()
	st, ok := m.pods[pod.UID]
	delete(m.pods, pod.UID)
	m.mu.Unlock()
	if ok {
		st.mu.Lock()
		defer st.mu.Unlock()
		st.gone = true
		st.tokens = map[string]*token{}
	}

	plugins, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", root, err)
	}
	var errs []error
	for _, p := range plugins {
		if !p.IsDir() {
			continue
		}
		vols, err := os.ReadDir(filepath.Join(root, p.Name()))
		if err != nil {
			errs = append(errs, fmt.Errorf("read %s: %w", p.Name(), err))
			continue
		}
		for _, v := range vols {
			dir := filepath.Join(root, p.Name(), v.Name())
			if err := unmountVolume(dir); err != nil {
				errs = append(errs, fmt.Errorf("volume %q: %w", v.Name(), err))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := removeTree(root); err != nil {
		return err
	}
	klog.FromContext(ctx).V(4).Info("Tore down pod volumes", "pod", klog.KObj(pod))
	return nil
}

// SetUpError is the failure to set up one of a pod's volumes; SetUp joins
// one per volume that failed.
type SetUpError struct {
	Volume string
	Err    error
}

func (e *SetUpError) Error() string { return fmt.Sprintf("volume %q: %v", e.Volume, e.Err) }
func (e *SetUpError) Unwrap() error { return e.Err }
