package process

import (
	"bufio"
	"context"
	"fmt"
	"os"
	goruntime "runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodelet/nodelet/pkg/provider"
	"github.com/nodelet/nodelet/pkg/provider/process/sandbox"
)

// hostInfo is what the node reports of the host, read once.
type hostInfo struct {
	capacity              corev1.ResourceList
	kernel, osImage, boot string
	machineID             string
}

// readHost reads the host's CPUs, memory, disk under the root dir and
// identity.
func (p *Provider) readHost() hostInfo {
	p.hostOnce.Do(func() {
		h := hostInfo{capacity: corev1.ResourceList{
			corev1.ResourceCPU:  *resource.NewQuantity(int64(goruntime.NumCPU()), resource.DecimalSI),
			corev1.ResourcePods: *resource.NewQuantity(p.opts.MaxPods, resource.DecimalSI),
		}}
		if mem, err := memTotal(); err == nil {
			h.capacity[corev1.ResourceMemory] = *resource.NewQuantity(mem, resource.BinarySI)
		}
		var fs unix.Statfs_t
		if err := os.MkdirAll(p.opts.RootDir, 0o700); err == nil && unix.Statfs(p.opts.RootDir, &fs) == nil {
			h.capacity[corev1.ResourceEphemeralStorage] = *resource.NewQuantity(int64(fs.Blocks)*fs.Bsize, resource.BinarySI)
		}
		var u unix.Utsname
		if unix.Uname(&u) == nil {
			h.kernel = unix.ByteSliceToString(u.Release[:])
		}
		h.osImage = osImage()
		if id, err := os.ReadFile("/etc/machine-id"); err == nil {
			h.machineID = strings.TrimSpace(string(id))
		}
		if id, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err == nil {
			h.boot = strings.TrimSpace(string(id))
		}
		p.host = h
	})
	return p.host
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

// allocatable is the host's capacity less what is reserved.
func (p *Provider) allocatable() corev1.ResourceList {
	out := p.readHost().capacity.DeepCopy()
	for name, r := range p.opts.Reserved {
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

// Ping checks that the pods' root directory is usable.
func (p *Provider) Ping(context.Context) error {
	if _, err := os.Stat(p.opts.RootDir); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("root dir: %w", err)
	}
	return nil
}

// ConfigureNode describes the host: capacity from its CPUs, memory and the
// disk under the root dir, allocatable less the reserved amounts, healthy
// conditions, addresses, nodeInfo, the kubelet endpoint, and the CSI
// volumes in use (which the volume controller must not detach).
func (p *Provider) ConfigureNode(_ context.Context, node *corev1.Node) {
	h := p.readHost()
	if node.Labels == nil {
		node.Labels = map[string]string{}
	}
	for k, v := range map[string]string{
		corev1.LabelHostname:   p.opts.NodeName,
		corev1.LabelOSStable:   "linux",
		corev1.LabelArchStable: goruntime.GOARCH,
	} {
		if _, ok := node.Labels[k]; !ok {
			node.Labels[k] = v
		}
	}
	s := &node.Status
	s.Capacity = h.capacity.DeepCopy()
	s.Allocatable = p.allocatable()
	setCondition(s, corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "nodelet is posting ready status")
	setCondition(s, corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available")
	setCondition(s, corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure")
	setCondition(s, corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available")
	s.Addresses = []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: p.opts.Address},
		{Type: corev1.NodeHostName, Address: p.opts.NodeName},
	}
	s.NodeInfo.MachineID = h.machineID
	s.NodeInfo.BootID = h.boot
	s.NodeInfo.KernelVersion = h.kernel
	s.NodeInfo.OSImage = h.osImage
	s.NodeInfo.OperatingSystem = "linux"
	s.NodeInfo.Architecture = goruntime.GOARCH
	s.NodeInfo.KubeletVersion = p.opts.Version
	s.NodeInfo.ContainerRuntimeVersion = "nodelet-process://" + p.opts.Version
	s.DaemonEndpoints.KubeletEndpoint.Port = p.opts.Port
	s.VolumesInUse = nil
	if p.parts.CSI != nil {
		if inUse := p.parts.CSI.VolumesInUse(); len(inUse) > 0 {
			s.VolumesInUse = inUse
		}
	}
}

// setCondition sets a node condition's status, reason and message; the
// node controller owns its times.
func setCondition(s *corev1.NodeStatus, typ corev1.NodeConditionType, status corev1.ConditionStatus, reason, msg string) {
	for i := range s.Conditions {
		if s.Conditions[i].Type == typ {
			s.Conditions[i].Status, s.Conditions[i].Reason, s.Conditions[i].Message = status, reason, msg
			return
		}
	}
	s.Conditions = append(s.Conditions, corev1.NodeCondition{Type: typ, Status: status, Reason: reason, Message: msg})
}

// resources are a container's cgroup limits: its limits, and its CPU
// request for the CPU share.
// podResources are a pod cgroup's resources, as the kubelet sets them: the
// CPU share of the pod's effective requests, and the CPU and memory limits
// only when every container has one (the sum of the app containers' or the
// largest init container's, whichever is more).
func podResources(pod *corev1.Pod) sandbox.Resources {
	r := sandbox.Resources{CPURequestMillis: provider.PodRequests(pod).MilliCPU}
	value := func(q resource.Quantity, name corev1.ResourceName) int64 {
		if name == corev1.ResourceCPU {
			return q.MilliValue()
		}
		return q.Value()
	}
	limit := func(name corev1.ResourceName) int64 {
		var sum, initMax int64
		for i := range pod.Spec.Containers {
			q, ok := pod.Spec.Containers[i].Resources.Limits[name]
			if !ok {
				return 0
			}
			sum += value(q, name)
		}
		for i := range pod.Spec.InitContainers {
			q, ok := pod.Spec.InitContainers[i].Resources.Limits[name]
			if !ok {
				return 0
			}
			initMax = max(initMax, value(q, name))
		}
		return max(sum, initMax)
	}
	r.CPULimitMillis = limit(corev1.ResourceCPU)
	r.MemoryLimitBytes = limit(corev1.ResourceMemory)
	return r
}

func resources(c *corev1.Container) sandbox.Resources {
	var r sandbox.Resources
	if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
		r.MemoryLimitBytes = q.Value()
	}
	if q, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
		r.CPULimitMillis = q.MilliValue()
	}
	if q, ok := c.Resources.Requests[corev1.ResourceCPU]; ok {
		r.CPURequestMillis = q.MilliValue()
	}
	return r
}
