package hostvolume

import (
	"fmt"
	"os"
	"strconv"

	corev1 "k8s.io/api/core/v1"
)

// setUpEmptyDir creates an emptyDir, writable by every user as on the
// kubelet; medium Memory mounts a tmpfs there, sized by sizeLimit if set.
func setUpEmptyDir(dir string, src *corev1.EmptyDirVolumeSource) error {
	switch src.Medium {
	case corev1.StorageMediumDefault, corev1.StorageMediumMemory:
	default:
		return fmt.Errorf("emptyDir medium %q is not supported by the process provider", src.Medium)
	}
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return fmt.Errorf("create directory: %w", err)
	}
	// MkdirAll's mode is filtered by the umask.
	if err := os.Chmod(dir, 0o777); err != nil {
		return fmt.Errorf("chmod directory: %w", err)
	}
	if src.Medium == corev1.StorageMediumMemory {
		// A tmpfs's root is 1777 (sticky), as on the kubelet's nodes.
		opts := "mode=1777"
		if src.SizeLimit != nil && src.SizeLimit.Sign() > 0 {
			opts += ",size=" + strconv.FormatInt(src.SizeLimit.Value(), 10)
		}
		if err := ensureTmpfs(dir, opts); err != nil {
			return err
		}
	}
	return nil
}
