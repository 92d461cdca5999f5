package csimount

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/pkg/atomicfile"
	"github.com/nodelet/nodelet/pkg/csi"
)

// Where volumes are published and staged, as the kubelet lays them out.
const (
	// podPluginDir is the CSI volumes' directory under a pod's volumes.
	podPluginDir = "kubernetes.io~csi"
	// targetName is the publish target in a volume's directory.
	targetName = "mount"
	// stagingName is the staging target in a staged volume's directory.
	stagingName = "globalmount"
	// recordName is the record in a published or staged volume's directory.
	recordName = "vol_data.json"
)

// publishRecord says that a volume of a pod is (or is being) published. It
// is written before NodePublishVolume and removed after a successful
// NodeUnpublishVolume, so it names everything the unpublish needs.
type publishRecord struct {
	Driver       string                  `json:"driver"`
	VolumeHandle string                  `json:"volumeHandle"`
	UniqueName   corev1.UniqueVolumeName `json:"uniqueName"`
	// PersistentVolume is the volume's PersistentVolume, for messages.
	PersistentVolume string `json:"persistentVolume,omitempty"`
	TargetPath       string `json:"targetPath"`
}

// stageRecord says that a volume is (or is being) staged on the node.
type stageRecord struct {
	Driver       string                  `json:"driver"`
	VolumeHandle string                  `json:"volumeHandle"`
	UniqueName   corev1.UniqueVolumeName `json:"uniqueName"`
	StagingPath  string                  `json:"stagingPath"`
}

// podVolumesDir is RootDir/pods/<uid>/volumes/kubernetes.io~csi.
func (m *Manager) podVolumesDir(uid types.UID) string {
	return filepath.Join(m.opts.RootDir, "pods", string(uid), "volumes", podPluginDir)
}

// volumeDir is the directory of one CSI volume of a pod: its record and its
// publish target.
func (m *Manager) volumeDir(uid types.UID, volume string) string {
	return filepath.Join(m.podVolumesDir(uid), volume)
}

// stagingDir is the node-wide directory of a staged volume: its record and
// its staging target.
func (m *Manager) stagingDir(driver, handle string) string {
	sum := sha256.Sum256([]byte(handle))
	return filepath.Join(m.opts.RootDir, csi.PluginsDir, "kubernetes.io", "csi", driver, fmt.Sprintf("%x", sum))
}

// writeRecord writes v as JSON to dir/vol_data.json atomically, creating dir.
func writeRecord(dir string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode record: %w", err)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	// A fixed temporary name: removeDir knows it, so a write that a crash
	// interrupted never keeps the directory from being removed.
	return atomicfile.Write(filepath.Join(dir, recordName), data, atomicfile.Options{Sync: true, FixedTemp: true})
}

func readRecord(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("decode record %s: %w", path, err)
	}
	return nil
}

// removeDir removes a volume's directory once its target is gone: the
// record and what an interrupted write of it left, then the directory,
// which must then be empty (a directory something is still mounted in or
// written to is never emptied).
func removeDir(dir string) error {
	for _, name := range []string{recordName, recordName + atomicfile.TempSuffix} {
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove record: %w", err)
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}

// load reads the records an earlier agent left: the published volumes of
// every pod and the staged volumes of the node. Unreadable records, and
// those whose paths are not their own directory's, are logged and left
// alone.
func (m *Manager) load() {
	m.loadOnce.Do(func() {
		logger := m.logger
		pods, err := filepath.Glob(filepath.Join(m.opts.RootDir, "pods", "*", "volumes", podPluginDir, "*", recordName))
		if err != nil {
			logger.Error(err, "Listing published CSI volumes failed")
		}
		staged, err := filepath.Glob(filepath.Join(m.opts.RootDir, csi.PluginsDir, "kubernetes.io", "csi", "*", "*", recordName))
		if err != nil {
			logger.Error(err, "Listing staged CSI volumes failed")
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		for _, path := range pods {
			var rec publishRecord
			volDir := filepath.Dir(path)
			err := readRecord(path, &rec)
			if err == nil && !samePath(rec.TargetPath, filepath.Join(volDir, targetName)) {
				err = fmt.Errorf("target %q is not the one beside the record", rec.TargetPath)
			}
			if err != nil || rec.UniqueName == "" || rec.TargetPath == "" {
				logger.Error(err, "Ignoring an unreadable record of a published CSI volume", "file", path)
				continue
			}
			uid := types.UID(filepath.Base(filepath.Dir(filepath.Dir(filepath.Dir(volDir)))))
			pv := m.podLocked(uid)
			pv.published[filepath.Base(volDir)] = &rec
			pv.wanted[filepath.Base(volDir)] = rec.UniqueName
		}
		for _, path := range staged {
			var rec stageRecord
			err := readRecord(path, &rec)
			if dir := m.stagingDir(rec.Driver, rec.VolumeHandle); err == nil && (!samePath(filepath.Dir(path), dir) || !samePath(rec.StagingPath, filepath.Join(dir, stagingName))) {
				err = fmt.Errorf("staging path %q is not the one of driver %q and handle %q", rec.StagingPath, rec.Driver, rec.VolumeHandle)
			}
			if err != nil || rec.UniqueName == "" || rec.StagingPath == "" {
				logger.Error(err, "Ignoring an unreadable record of a staged CSI volume", "file", path)
				continue
			}
			m.staged[rec.UniqueName] = &rec
		}
		logger.V(2).Info("Loaded CSI volume records", "published", len(pods), "staged", len(m.staged))
	})
}

// samePath tells whether a and b name the same path once absolute. The
// paths in a record must be those of the record's own directory: the
// driver is asked to unmount them, and they are removed with the record.
func samePath(a, b string) bool {
	absA, errA := filepath.Abs(a)
	absB, errB := filepath.Abs(b)
	return errA == nil && errB == nil && absA == absB
}

// podLocked returns the volumes of a pod, registering it.
func (m *Manager) podLocked(uid types.UID) *podVolumes {
	pv, ok := m.pods[uid]
	if !ok {
		pv = &podVolumes{
			wanted:    map[string]corev1.UniqueVolumeName{},
			published: map[string]*publishRecord{},
			confirmed: map[string]bool{},
		}
		m.pods[uid] = pv
	}
	return pv
}
