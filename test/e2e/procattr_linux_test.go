package e2e

import "syscall"

// stopWithParent makes a child process get SIGTERM when the test binary dies
// (a test timeout, a panic, ^C), so no control plane or agent outlives it.
func stopWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
