package fault

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// hostLockName is the lock file, in the temporary directory, shared by the
// test binaries of one machine.
const hostLockName = "nodelet-tests-host.lock"

// LockHost waits for the machine's test lock and returns its release. Tests
// that load the host (the reliability scenarios: control planes killed,
// a thousand nodes, containerd restarted) and tests that measure it (memory
// eviction thresholds relative to the host's memory, CPU usage read back
// through kubectl top) hold it, so that go test's packages running side by
// side never make one's load the other's measurement.
func LockHost() (func(), error) {
	path := filepath.Join(os.TempDir(), hostLockName)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, fmt.Errorf("host test lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("host test lock %s: %w", path, err)
	}
	return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}
