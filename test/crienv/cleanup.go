//go:build linux

package crienv

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodelet/nodelet/pkg/mountinfo"
	"github.com/nodelet/nodelet/pkg/providers/cri"
)

// killContainers force-deletes, with runc, every container left in the
// runc root of the environment (one directory per containerd namespace):
// runc kills its processes and removes its cgroups.
func killContainers(runc, runcRoot string) error {
	namespaces, err := os.ReadDir(runcRoot)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("list runc roots: %w", err)
	}
	var errs []error
	for _, ns := range namespaces {
		root := filepath.Join(runcRoot, ns.Name())
		out, err := exec.Command(runc, "--root", root, "list", "-q").Output()
		if err != nil {
			errs = append(errs, fmt.Errorf("runc list in %s: %w", root, err))
			continue
		}
		for _, id := range strings.Fields(string(out)) {
			if b, err := exec.Command(runc, "--root", root, "delete", "--force", id).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("runc delete %s: %w: %s", id, err, bytes.TrimSpace(b)))
			}
		}
	}
	return errors.Join(errs...)
}

// killShims kills the shims that the environment's containerd started (the
// ones given its socket as -address) and waits until they are gone.
func killShims(socket string) error {
	pids, err := shimsOf(socket)
	if err != nil {
		return err
	}
	var errs []error
	for _, pid := range pids {
		if err := unix.Kill(pid, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("kill shim %d: %w", pid, err))
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for alive(pid) {
			if time.Now().After(deadline) {
				errs = append(errs, fmt.Errorf("shim %d still runs 10 s after SIGKILL", pid))
				break
			}
			time.Sleep(20 * time.Millisecond) // poll interval, bounded by the deadline
		}
	}
	return errors.Join(errs...)
}

// shimsOf lists the processes that run a containerd shim for the socket.
func shimsOf(socket string) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue // gone meanwhile
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if !strings.HasPrefix(filepath.Base(args[0]), "containerd-shim") {
			continue
		}
		for i := 1; i+1 < len(args); i++ {
			if (args[i] == "-address" || args[i] == "--address") && args[i+1] == socket {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids, nil
}

// alive says whether a process exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// unmountUnder unmounts (detaching) every mount at or below dir, the last
// mounted first, until none is left: container root filesystems, shm,
// network namespaces.
func unmountUnder(dir string) error {
	for pass := 0; pass < 10; pass++ {
		mounts, err := mountinfo.Read()
		if err != nil {
			return fmt.Errorf("unmount under %s: %w", dir, err)
		}
		var points []string
		for _, m := range mounts {
			if m.Point == dir || strings.HasPrefix(m.Point, dir+"/") {
				points = append(points, m.Point)
			}
		}
		if len(points) == 0 {
			return nil
		}
		for i := len(points) - 1; i >= 0; i-- {
			if err := unix.Unmount(points[i], unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
				return fmt.Errorf("unmount %s: %w", points[i], err)
			}
		}
	}
	return fmt.Errorf("unmount under %s: mounts are still there after 10 passes", dir)
}

// criNamespace is the containerd namespace of the CRI; containers without a
// cgroup parent get their cgroups under /<criNamespace>/ of each hierarchy.
const criNamespace = "k8s.io"

// removeNamespaceCgroups removes the cgroups that runc made as parents of
// the CRI's containers without a cgroup parent, and the cri provider's
// parents of its pods' cgroups (cri.RemoveQoSCgroups), unless another
// environment runs (it may use them). Only empty ones go: rmdir refuses
// the others.
func removeNamespaceCgroups(own *slot) error {
	if othersHeld(own) {
		return nil
	}
	dirs, err := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", criNamespace))
	if err != nil {
		return fmt.Errorf("remove cgroups: %w", err)
	}
	dirs = append(dirs, filepath.Join("/sys/fs/cgroup", criNamespace)) // cgroup v2
	var errs []error
	for _, d := range dirs {
		if err := unix.Rmdir(d); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.ENOTEMPTY) {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
		}
	}
	// And the parents the cri provider gives its pods' cgroups.
	errs = append(errs, cri.RemoveQoSCgroups())
	return errors.Join(errs...)
}

// UnmountRootDir unmounts what a cri node left mounted at its root
// directory itself: the provider binds the directory onto itself to make
// it a shared mount, and leaves the binding while its pods' volumes are
// mounted below it, or when it was killed. A test that made the directory
// calls it, once the agent has stopped and its pods are gone, before the
// directory is removed.
func UnmountRootDir(dir string) error {
	for range 10 {
		mounts, err := mountinfo.Read()
		if err != nil {
			return fmt.Errorf("unmount root directory %s: %w", dir, err)
		}
		if !slices.ContainsFunc(mounts, func(m mountinfo.Mount) bool { return m.Point == dir }) {
			return nil
		}
		if err := unix.Unmount(dir, unix.UMOUNT_NOFOLLOW); err != nil {
			return fmt.Errorf("unmount root directory %s: %w", dir, err)
		}
	}
	return fmt.Errorf("unmount root directory %s: still mounted after 10 unmounts", dir)
}
