package cri

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/mountinfo"
)

// podsCgroup holds the pods' cgroups, as the kubelet's kubepods (below its
// cgroupRoot "/"): Guaranteed pods directly, Burstable and BestEffort pods
// in a cgroup of their QoS class. Tools that read a node's cgroups by the
// kubelet's names (cAdvisor, the node e2e suite) find the pods there.
const podsCgroup = "/kubepods"

// qosCgroup is the cgroup of a QoS class's pods.
func qosCgroup(qos corev1.PodQOSClass) string {
	switch qos {
	case corev1.PodQOSBurstable:
		return podsCgroup + "/burstable"
	case corev1.PodQOSBestEffort:
		return podsCgroup + "/besteffort"
	}
	return podsCgroup
}

// EnsureQOSCgroups creates the pods' cgroup and those of the Burstable and
// BestEffort classes in every cgroup hierarchy, as the kubelet does at
// start, before any pod of the class runs. They stay when the agent stops,
// as the kubelet's do.
func EnsureQOSCgroups() error {
	hierarchies, err := mountinfo.CgroupHierarchies()
	if err != nil {
		return err
	}
	var errs []error
	for _, h := range hierarchies {
		for _, dir := range []string{podsCgroup, qosCgroup(corev1.PodQOSBurstable), qosCgroup(corev1.PodQOSBestEffort)} {
			if err := ensureCgroup(h, dir); err != nil {
				errs = append(errs, fmt.Errorf("QoS cgroup %s in %s: %w", dir, h, err))
			}
		}
	}
	return errors.Join(errs...)
}

// ensureCgroup creates the cgroup dir of the hierarchy mounted at root. In
// a cpuset hierarchy it takes its parent's CPUs and memory nodes, which a
// new cpuset lacks (no process could join it otherwise).
func ensureCgroup(root, dir string) error {
	path := filepath.Join(root, dir)
	if err := os.Mkdir(path, 0o755); err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil
		}
		return err
	}
	for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
		own, err := os.ReadFile(filepath.Join(path, f))
		if err != nil || len(own) > 1 {
			continue // not a cpuset hierarchy, or already set
		}
		parent, err := os.ReadFile(filepath.Join(filepath.Dir(path), f))
		if err != nil || len(parent) <= 1 {
			continue // cgroup v2, whose empty cpuset takes its parent's
		}
		if err := os.WriteFile(filepath.Join(path, f), parent, 0o644); err != nil {
			return err
		}
	}
	return nil
}
