package csimount

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/csi"
	"github.com/nodelet/nodelet/pkg/lifecycle/hostvolume"
)

// TearDown unpublishes every CSI volume of the pod with the given uid that
// is published (by this agent or an earlier one), from its records: it
// needs neither the pod's spec nor the API. Its volumes stay in use and
// staged until Release. It is idempotent; failed volumes stay recorded for
// the next call. The containers must have stopped.
func (m *Manager) TearDown(ctx context.Context, uid types.UID) error {
	m.load()
	defer m.changed()
	m.mu.Lock()
	var names []string
	recs := map[string]*publishRecord{}
	if pv := m.pods[uid]; pv != nil {
		for name, rec := range pv.published {
			names = append(names, name)
			recs[name] = rec
		}
	}
	m.mu.Unlock()
	sort.Strings(names)
	var errs []error
	for _, name := range names {
		rec := recs[name]
		if err := m.unpublish(ctx, uid, name, rec); err != nil {
			errs = append(errs, &VolumeError{Volume: name, Err: err})
			continue
		}
		m.mu.Lock()
		if pv := m.pods[uid]; pv != nil {
			delete(pv.published, name)
			delete(pv.confirmed, name)
		}
		m.mu.Unlock()
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	// The pod's CSI directory goes when it is empty; the volume manager
	// removes the rest of the pod's volumes.
	_ = os.Remove(m.podVolumesDir(uid))
	return nil
}

// unpublish asks the driver to unpublish one volume and removes its
// directory once the driver has left nothing mounted there.
func (m *Manager) unpublish(ctx context.Context, uid types.UID, name string, rec *publishRecord) error {
	unlock := m.locks.lock(rec.UniqueName)
	defer unlock()
	client, err := m.dial(rec.Driver)
	if err != nil {
		return fmt.Errorf("UnmountVolume.TearDown failed for %s: %w", rec.UniqueName, err)
	}
	defer client.Close()
	if err := client.NodeUnpublishVolume(ctx, rec.VolumeHandle, rec.TargetPath); err != nil {
		return fmt.Errorf("UnmountVolume.TearDown failed for %s: %w", rec.UniqueName, err)
	}
	if err := removeTarget(rec.TargetPath); err != nil {
		return fmt.Errorf("UnmountVolume.TearDown of %s: %w", rec.UniqueName, err)
	}
	if err := removeDir(m.volumeDir(uid, name)); err != nil {
		return fmt.Errorf("UnmountVolume.TearDown of %s: %w", rec.UniqueName, err)
	}
	klog.FromContext(ctx).V(2).Info("Unpublished CSI volume", "podUID", uid, "volume", rec.UniqueName, "target", rec.TargetPath)
	return nil
}

// removeTarget removes a publish or staging target the driver left behind,
// unless something is still mounted there.
func removeTarget(path string) error {
	mounted, err := hostvolume.IsMountPoint(path)
	if err != nil {
		return err
	}
	if mounted {
		return fmt.Errorf("the driver left %s mounted", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return nil
}

// Release ends the pod's use of its CSI volumes once TearDown has
// unpublished them: each volume that no other pod on the node wants or has
// published is unstaged, and then the pod is forgotten, so its volumes
// leave VolumesInUse. It is idempotent; on error the pod is kept for the
// next call. Call it after the pod's sandbox is gone, so that no mount
// namespace holds the volume any more when it is unstaged.
func (m *Manager) Release(ctx context.Context, uid types.UID) error {
	m.load()
	defer m.changed()
	m.mu.Lock()
	pv := m.pods[uid]
	if pv == nil {
		m.mu.Unlock()
		return nil
	}
	if len(pv.published) > 0 {
		m.mu.Unlock()
		return fmt.Errorf("pod %s still has %d published CSI volumes", uid, len(pv.published))
	}
	names := map[corev1.UniqueVolumeName]bool{}
	for _, name := range pv.wanted {
		names[name] = true
	}
	m.mu.Unlock()
	var errs []error
	for name := range names {
		if err := m.unstageUnused(ctx, name, uid); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	m.mu.Lock()
	delete(m.pods, uid)
	for key := range m.waitSince {
		if len(key) > len(uid) && key[:len(uid)+1] == string(uid)+"/" {
			delete(m.waitSince, key)
		}
	}
	m.mu.Unlock()
	return nil
}

// unstageUnused unstages a volume that is staged and that no pod other
// than except wants or has published.
func (m *Manager) unstageUnused(ctx context.Context, name corev1.UniqueVolumeName, except types.UID) error {
	unlock := m.locks.lock(name)
	defer unlock()
	m.mu.Lock()
	rec := m.staged[name]
	used := false
	for uid, pv := range m.pods {
		if uid == except {
			continue
		}
		for _, n := range pv.wanted {
			used = used || n == name
		}
		for _, r := range pv.published {
			used = used || r.UniqueName == name
		}
	}
	m.mu.Unlock()
	if rec == nil || used {
		return nil
	}
	client, err := m.dial(rec.Driver)
	if err != nil {
		return fmt.Errorf("UnmountDevice failed for %s: %w", name, err)
	}
	defer client.Close()
	if err := client.NodeUnstageVolume(ctx, rec.VolumeHandle, rec.StagingPath); err != nil {
		return fmt.Errorf("UnmountDevice failed for %s: %w", name, err)
	}
	if err := removeTarget(rec.StagingPath); err != nil {
		return fmt.Errorf("UnmountDevice of %s: %w", name, err)
	}
	if err := removeDir(filepath.Dir(rec.StagingPath)); err != nil {
		return fmt.Errorf("UnmountDevice of %s: %w", name, err)
	}
	m.mu.Lock()
	delete(m.staged, name)
	delete(m.stagedNow, name)
	m.mu.Unlock()
	klog.FromContext(ctx).V(2).Info("Unstaged CSI volume", "volume", name, "stagingPath", rec.StagingPath)
	return nil
}

// Sweep cleans up after pods that are gone: the published volumes of pods
// that known does not know (left by a crash, or found on disk after a
// restart) are unpublished and released, and staged volumes no pod uses are
// unstaged. Call it after the provider has adopted its pods, and again
// from time to time: what fails is retried by the next call.
func (m *Manager) Sweep(ctx context.Context, known func(types.UID) bool) error {
	m.load()
	defer m.changed()
	m.mu.Lock()
	var orphans []types.UID
	for uid := range m.pods {
		if !known(uid) {
			orphans = append(orphans, uid)
		}
	}
	var staged []corev1.UniqueVolumeName
	for name := range m.staged {
		staged = append(staged, name)
	}
	m.mu.Unlock()
	logger := klog.FromContext(ctx)
	var errs []error
	for _, uid := range orphans {
		logger.Info("Cleaning up the CSI volumes of a pod that is gone", "podUID", uid)
		if err := m.TearDown(ctx, uid); err != nil {
			errs = append(errs, fmt.Errorf("pod %s: %w", uid, err))
			continue
		}
		if err := m.Release(ctx, uid); err != nil {
			errs = append(errs, fmt.Errorf("pod %s: %w", uid, err))
		}
	}
	for _, name := range staged {
		if err := m.unstageUnused(ctx, name, ""); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// dial returns a client of a driver's node service.
func (m *Manager) dial(driver string) (*csi.NodeClient, error) {
	socket, err := csi.DriverSocket(m.opts.RootDir, driver)
	if err != nil {
		return nil, err
	}
	return csi.NewNodeClient(socket, m.opts.Client)
}
