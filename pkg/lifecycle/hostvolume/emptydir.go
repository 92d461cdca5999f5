package hostvolume

import (
	"fmt"
	"math"
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
		if err := ensureTmpfs(dir, tmpfsOptions(src)); err != nil {
			return err
		}
	}
	return nil
}

// tmpfsOptions are the mount options of a memory emptyDir's tmpfs: its
// root is 1777 (sticky), as on the kubelet's nodes, and its size the
// sizeLimit when there is one. A limit past an int64 is the largest size:
// Quantity.Value wraps around there (1e19 would be 0, a tmpfs without
// limit; 9.27e18 a negative size). The approximate value tells, as
// comparing exactly would compute 10^exponent (minutes for 1e28028080).
func tmpfsOptions(src *corev1.EmptyDirVolumeSource) string {
	opts := "mode=1777"
	if src.SizeLimit != nil && src.SizeLimit.Sign() > 0 {
		size := src.SizeLimit.Value()
		if src.SizeLimit.AsApproximateFloat64() >= math.MaxInt64 {
			size = math.MaxInt64
		}
		opts += ",size=" + strconv.FormatInt(size, 10)
	}
	return opts
}
