package hostvolume

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
)

// checkHostPath applies a hostPath volume's type check, creating the
// directory or file for the OrCreate types, and returns the path.
func checkHostPath(src *corev1.HostPathVolumeSource) (string, error) {
	p := filepath.Clean(src.Path)
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("hostPath %q is not absolute", src.Path)
	}
	typ := corev1.HostPathUnset
	if src.Type != nil {
		typ = *src.Type
	}
	fail := func(what string) (string, error) {
		return "", fmt.Errorf("hostPath type check failed: %s is not %s", p, what)
	}

	info, err := os.Stat(p)
	missing := errors.Is(err, fs.ErrNotExist)
	if err != nil && !missing {
		return "", fmt.Errorf("hostPath %s: %w", p, err)
	}
	switch typ {
	case corev1.HostPathUnset:
		return p, nil
	case corev1.HostPathDirectoryOrCreate:
		if missing {
			if err := os.MkdirAll(p, 0o755); err != nil {
				return "", fmt.Errorf("hostPath %s: create directory: %w", p, err)
			}
			return p, nil
		}
		if !info.IsDir() {
			return fail("a directory")
		}
	case corev1.HostPathDirectory:
		if missing || !info.IsDir() {
			return fail("a directory")
		}
	case corev1.HostPathFileOrCreate:
		if missing {
			// Like the kubelet, the parent directory is not created.
			f, err := os.OpenFile(p, os.O_RDONLY|os.O_CREATE, 0o644)
			if err != nil {
				return "", fmt.Errorf("hostPath %s: create file: %w", p, err)
			}
			return p, f.Close()
		}
		if info.IsDir() {
			return fail("a file")
		}
	case corev1.HostPathFile:
		if missing || !info.Mode().IsRegular() {
			return fail("a file")
		}
	case corev1.HostPathSocket:
		if missing || info.Mode()&fs.ModeSocket == 0 {
			return fail("a socket")
		}
	case corev1.HostPathCharDev:
		if missing || info.Mode()&fs.ModeCharDevice == 0 {
			return fail("a character device")
		}
	case corev1.HostPathBlockDev:
		if missing || info.Mode()&fs.ModeDevice == 0 || info.Mode()&fs.ModeCharDevice != 0 {
			return fail("a block device")
		}
	default:
		return "", fmt.Errorf("hostPath type %q is unknown", typ)
	}
	return p, nil
}
