package cri

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"
)

// Defaults of nodeSettings, as the kubelet's where it has one.
const (
	defaultPodLogsDir         = "/var/log/pods"
	defaultCPUCFSQuotaPeriod  = 100 * time.Millisecond
	defaultSeccompProfileRoot = "/var/lib/nodelet/seccomp"
)

// nodeSettings are the node-wide inputs of the translation, fixed for the
// life of the runtime.
type nodeSettings struct {
	// NodeName labels every sandbox and container (labelNode). Required.
	NodeName string
	// PodLogsDir holds the pods' log directories, <ns>_<name>_<uid>.
	// Default /var/log/pods.
	PodLogsDir string
	// DNS are the node's DNS settings; its ClusterDomain also makes the
	// domain of pods with a subdomain.
	DNS dnsOptions
	// MemoryCapacity is the node's memory in bytes, the base of burstable
	// containers' OOM score adjustment. Required.
	MemoryCapacity int64
	// DisableCPUCFSQuota leaves CPU limits unenforced, as the kubelet's
	// --cpu-cfs-quota=false.
	DisableCPUCFSQuota bool
	// CPUCFSQuotaPeriod is the CFS period of CPU limits. Default 100ms.
	CPUCFSQuotaPeriod time.Duration
	// GroupOOMKill makes an OOM kill take the whole container
	// (memory.oom.group=1, cgroup v2 only): the kubelet's default on cgroup
	// v2 (singleProcessOOMKill false).
	GroupOOMKill bool
	// HugePageSizes are the node's huge page sizes in the runtime's units
	// ("2MB", "1GB"). Each container gets a zero limit for every size it
	// does not request.
	HugePageSizes []string
	// SeccompDefault confines containers without a seccomp profile to the
	// runtime's default profile, as the kubelet's --seccomp-default.
	SeccompDefault bool
	// SeccompProfileRoot is the directory of Localhost seccomp profiles.
	// Default /var/lib/nodelet/seccomp.
	SeccompProfileRoot string
}

// withDefaults returns the settings with every unset optional field at its
// default.
func (s nodeSettings) withDefaults() nodeSettings {
	if s.PodLogsDir == "" {
		s.PodLogsDir = defaultPodLogsDir
	}
	if s.CPUCFSQuotaPeriod == 0 {
		s.CPUCFSQuotaPeriod = defaultCPUCFSQuotaPeriod
	}
	if s.SeccompProfileRoot == "" {
		s.SeccompProfileRoot = defaultSeccompProfileRoot
	}
	return s
}

// validate reports every setting that cannot work, after defaulting.
func (s nodeSettings) validate() error {
	var errs []error
	if s.NodeName == "" {
		errs = append(errs, errors.New("node name is required"))
	}
	if s.MemoryCapacity <= 0 {
		errs = append(errs, fmt.Errorf("memory capacity must be positive, not %d", s.MemoryCapacity))
	}
	if !filepath.IsAbs(s.PodLogsDir) {
		errs = append(errs, fmt.Errorf("pod logs directory %q must be an absolute path", s.PodLogsDir))
	}
	if !filepath.IsAbs(s.SeccompProfileRoot) {
		errs = append(errs, fmt.Errorf("seccomp profile root %q must be an absolute path", s.SeccompProfileRoot))
	}
	if s.CPUCFSQuotaPeriod < time.Millisecond || s.CPUCFSQuotaPeriod > time.Second {
		errs = append(errs, fmt.Errorf("CPU CFS quota period %v must be between 1ms and 1s", s.CPUCFSQuotaPeriod))
	}
	return errors.Join(errs...)
}
