package stats

import (
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// This file holds what a provider whose containers run on this host uses
// to describe them as the kubelet does: the filesystem a directory is on,
// what a directory takes of it, a process's network and a cgroup's
// processes.

// Statfs returns the figures of the filesystem that holds dir, with no
// usage of its own: a container's layer, logs or volume is measured by
// whoever knows what is in it.
func Statfs(dir string, ts metav1.Time) (*statsv1alpha1.FsStats, error) {
	return statfs(dir, ts)
}

// DirUsage sums the blocks allocated under dir and counts its inodes
// (dir's own included), staying on dir's filesystem, as du does; what
// cannot be read is skipped.
func DirUsage(dir string) (bytes, inodes uint64) {
	top, err := os.Lstat(dir)
	if err != nil {
		return 0, 0
	}
	topDev := deviceOf(top)
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		if d.IsDir() && path != dir && deviceOf(info) != topDev {
			return filepath.SkipDir // a mount inside
		}
		inodes++
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			bytes += uint64(st.Blocks) * 512
		}
		return nil
	})
	return bytes, inodes
}

func deviceOf(info fs.FileInfo) uint64 {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Dev)
	}
	return 0
}

// defaultInterface is the interface the summary names as a pod's own, as
// the kubelet names it: the one CNI plugins make in the pod.
const defaultInterface = "eth0"

// ProcessNetwork returns the interface counters of the network namespace
// process pid is in (a pod's sandbox), less the loopback, with eth0 as the
// pod's main interface.
func ProcessNetwork(procRoot string, pid int, ts metav1.Time) (*statsv1alpha1.NetworkStats, error) {
	ifaces, err := readNetDev(filepath.Join(procRoot, strconv.Itoa(pid), "net", "dev"))
	if err != nil {
		return nil, err
	}
	network := &statsv1alpha1.NetworkStats{Time: ts, Interfaces: []statsv1alpha1.InterfaceStats{}}
	for _, iface := range ifaces {
		if iface.Name == "lo" {
			continue
		}
		if iface.Name == defaultInterface {
			network.InterfaceStats = iface
		}
		network.Interfaces = append(network.Interfaces, iface)
	}
	return network, nil
}

// Procs lists the processes of the cgroup at path: from the unified
// hierarchy where there is one and the cgroup is in it, else from cgroup
// v1's cpu hierarchy.
func (c CgroupFS) Procs(path string) ([]int, error) {
	var data []byte
	err := fs.ErrNotExist
	if root := c.unifiedRoot(); root != "" {
		data, err = os.ReadFile(filepath.Join(root, path, "cgroup.procs"))
	}
	if err != nil {
		if data, err = os.ReadFile(filepath.Join(c.Root, "cpu", path, "cgroup.procs")); err != nil {
			return nil, err
		}
	}
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}
