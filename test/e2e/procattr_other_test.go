//go:build !linux

package e2e

import "syscall"

// stopWithParent: only Linux can tie a child's life to its parent's.
func stopWithParent() *syscall.SysProcAttr { return nil }
