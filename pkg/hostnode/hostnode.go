// Package hostnode describes the machine the agent runs on as a Node:
// capacity from its CPUs, memory and the disk under the root dir,
// allocatable less what is reserved, its identity (machine and boot IDs,
// kernel, OS image), addresses, the well-known labels and the kubelet
// endpoint. The providers that run pods on the host (process, cri) build
// their node status on it and add what their runtime knows.
//
// It only reads the host; it never writes anything but the root dir it is
// told to create.
package hostnode

import (
	"bufio"
	"fmt"
	"os"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Options describe the node; NodeName, Address and RootDir are required.
type Options struct {
	NodeName string
	// Address is the node's InternalIP.
	Address string
	// RootDir is the agent's root directory: its disk is the node's
	// ephemeral storage.
	RootDir string
	// Port is the kubelet API port published in daemonEndpoints.
	Port int32
	// Reserved is taken from the capacity to give allocatable (the
	// kubelet's systemReserved plus kubeReserved).
	Reserved corev1.ResourceList
	// MaxPods is the pod capacity; default 110.
	MaxPods int64
	// Version is the kubelet version in nodeInfo.
	Version string
	// AllowedUnsafeSysctls are the sysctls (or prefixes, ending in "*")
	// beyond the safe set that pods may set (the kubelet's
	// allowedUnsafeSysctls).
	AllowedUnsafeSysctls []string
	// Pressure, when set, reports the node's memory, disk and PID pressure
	// conditions (the eviction manager's) over the healthy ones Describe
	// sets, and Admit refuses pods the node cannot take under pressure.
	Pressure func(node *corev1.Node)
	Admit    func(pod *corev1.Pod) error
	// NotReady, when set, says why the node is not ready ("" while it is):
	// SetReady then makes the Ready condition False, as the kubelet's
	// (reason KubeletNotReady) while the node shuts down.
	NotReady func() string
}

// Host is the node, read from the host once.
type Host struct {
	opts Options
	once sync.Once
	info hostInfo
}

// New returns the host's description; it reads nothing until asked.
func New(opts Options) *Host {
	if opts.MaxPods == 0 {
		opts.MaxPods = 110
	}
	return &Host{opts: opts}
}

// hostInfo is what the node reports of the host, read once.
type hostInfo struct {
	capacity              corev1.ResourceList
	kernel, osImage, boot string
	machineID             string
}

// readHost reads the host's CPUs, memory, disk under the root dir and
// identity.
func (h *Host) readHost() hostInfo {
	h.once.Do(func() {
		info := hostInfo{capacity: corev1.ResourceList{
			corev1.ResourceCPU:  *resource.NewQuantity(int64(goruntime.NumCPU()), resource.DecimalSI),
			corev1.ResourcePods: *resource.NewQuantity(h.opts.MaxPods, resource.DecimalSI),
		}}
		if mem, err := memTotal(); err == nil {
			info.capacity[corev1.ResourceMemory] = *resource.NewQuantity(mem, resource.BinarySI)
		}
		var fs unix.Statfs_t
		if err := os.MkdirAll(h.opts.RootDir, 0o700); err == nil && unix.Statfs(h.opts.RootDir, &fs) == nil {
			info.capacity[corev1.ResourceEphemeralStorage] = *resource.NewQuantity(int64(fs.Blocks)*fs.Bsize, resource.BinarySI)
		}
		var u unix.Utsname
		if unix.Uname(&u) == nil {
			info.kernel = unix.ByteSliceToString(u.Release[:])
		}
		info.osImage = osImage()
		if id, err := os.ReadFile("/etc/machine-id"); err == nil {
			info.machineID = strings.TrimSpace(string(id))
		}
		if id, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err == nil {
			info.boot = strings.TrimSpace(string(id))
		}
		h.info = info
	})
	return h.info
}

func memTotal() (int64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/meminfo: %w", err)
			}
			return kb * 1024, nil
		}
	}
	return 0, fmt.Errorf("/proc/meminfo: no MemTotal")
}

func osImage() string {
	data, err := os.ReadFile("/etc/os-release")
	if err != nil {
		return "Linux"
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
			return strings.Trim(v, `"`)
		}
	}
	return "Linux"
}

// Capacity is the host's capacity.
func (h *Host) Capacity() corev1.ResourceList {
	return h.readHost().capacity.DeepCopy()
}

// Allocatable is the host's capacity less what is reserved.
func (h *Host) Allocatable() corev1.ResourceList {
	out := h.readHost().capacity.DeepCopy()
	for name, r := range h.opts.Reserved {
		if q, ok := out[name]; ok {
			q.Sub(r)
			if q.Sign() < 0 {
				q = resource.Quantity{}
			}
			out[name] = q
		}
	}
	return out
}

// SetReady sets the node's Ready condition: True, or False with the reason
// Options.NotReady gives.
func (h *Host) SetReady(s *corev1.NodeStatus) {
	if h.opts.NotReady != nil {
		if why := h.opts.NotReady(); why != "" {
			SetCondition(s, corev1.NodeReady, corev1.ConditionFalse, "KubeletNotReady", why)
			return
		}
	}
	SetCondition(s, corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "nodelet is posting ready status")
}

// Describe fills in what the node reports of the host: the well-known
// labels (unless set), capacity, allocatable, the memory, disk and PID
// pressure (none, or Options.Pressure's), addresses, nodeInfo and the
// kubelet endpoint. The Ready
// condition and the runtime's version are the caller's.
func (h *Host) Describe(node *corev1.Node) {
	info := h.readHost()
	if node.Labels == nil {
		node.Labels = map[string]string{}
	}
	for k, v := range map[string]string{
		corev1.LabelHostname:   h.opts.NodeName,
		corev1.LabelOSStable:   "linux",
		corev1.LabelArchStable: goruntime.GOARCH,
	} {
		if _, ok := node.Labels[k]; !ok {
			node.Labels[k] = v
		}
	}
	s := &node.Status
	s.Capacity = info.capacity.DeepCopy()
	s.Allocatable = h.Allocatable()
	SetCondition(s, corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available")
	SetCondition(s, corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure")
	SetCondition(s, corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available")
	if h.opts.Pressure != nil {
		h.opts.Pressure(node)
	}
	s.Addresses = []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: h.opts.Address},
		{Type: corev1.NodeHostName, Address: h.opts.NodeName},
	}
	s.NodeInfo.MachineID = info.machineID
	s.NodeInfo.BootID = info.boot
	s.NodeInfo.KernelVersion = info.kernel
	s.NodeInfo.OSImage = info.osImage
	s.NodeInfo.OperatingSystem = "linux"
	s.NodeInfo.Architecture = goruntime.GOARCH
	s.NodeInfo.KubeletVersion = h.opts.Version
	s.DaemonEndpoints.KubeletEndpoint.Port = h.opts.Port
}

// SetCondition sets a node condition's status, reason and message; the
// node controller owns its times.
func SetCondition(s *corev1.NodeStatus, typ corev1.NodeConditionType, status corev1.ConditionStatus, reason, msg string) {
	for i := range s.Conditions {
		if s.Conditions[i].Type == typ {
			s.Conditions[i].Status, s.Conditions[i].Reason, s.Conditions[i].Message = status, reason, msg
			return
		}
	}
	s.Conditions = append(s.Conditions, corev1.NodeCondition{Type: typ, Status: status, Reason: reason, Message: msg})
}

// AppArmorEnabled tells whether the host enforces AppArmor profiles, as
// the kubelet finds out: AppArmor's securityfs directory exists and the
// module says "Y". It is read once.
var AppArmorEnabled = sync.OnceValue(func() bool {
	if _, err := os.Stat("/sys/kernel/security/apparmor"); err != nil {
		return false
	}
	data, err := os.ReadFile("/sys/module/apparmor/parameters/enabled")
	return err == nil && len(data) > 0 && data[0] == 'Y'
})
