package virtualkubelet_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	dto "github.com/prometheus/client_model/go"
	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	vknode "github.com/virtual-kubelet/virtual-kubelet/node"
	vkapi "github.com/virtual-kubelet/virtual-kubelet/node/api"
	"github.com/virtual-kubelet/virtual-kubelet/node/nodeutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// tinyProvider is a provider written for virtual-kubelet, against its own
// interface types and nothing of nodelet's: the pods it is given run at once
// (nothing runs anywhere), their log is one line naming the pod, and exec
// writes back the command it was given. It is what the end-to-end test runs
// on nodelet through the adapter.
type tinyProvider struct {
	nodeName string
	address  string // the node's InternalIP, where the kubelet API listens
	port     int32  // the kubelet API's port
	version  string // the kubelet version the node reports

	mu         sync.Mutex
	pods       map[string]*corev1.Pod // by namespace/name
	notify     func(*corev1.Pod)      // from NotifyPods
	nodeNotify func(*corev1.Node)     // from NotifyNodeStatus, kept unused
}

var (
	_ vknode.PodLifecycleHandler = (*tinyProvider)(nil)
	_ vknode.PodNotifier         = (*tinyProvider)(nil)
	_ nodeutil.Provider          = (*tinyProvider)(nil)
	_ vknode.NodeProvider        = (*tinyProvider)(nil)
)

func newTinyProvider(nodeName, address string, port int32, version string) *tinyProvider {
	return &tinyProvider{nodeName: nodeName, address: address, port: port, version: version, pods: map[string]*corev1.Pod{}}
}

// tinyLogLine is the log of every container of the tiny provider.
func tinyLogLine(namespace, pod, container string) string {
	return fmt.Sprintf("tiny provider: log of %s/%s container %s\n", namespace, pod, container)
}

// tinyExecOutput is what the tiny provider's exec writes to stdout.
func tinyExecOutput(namespace, pod, container string, cmd []string) string {
	return fmt.Sprintf("tiny provider ran %q in %s/%s container %s\n", strings.Join(cmd, " "), namespace, pod, container)
}

func tinyKey(namespace, name string) string { return namespace + "/" + name }

// CreatePod runs the pod: it is Running at once, and notified.
func (p *tinyProvider) CreatePod(_ context.Context, pod *corev1.Pod) error {
	pod = pod.DeepCopy()
	now := metav1.Now()
	pod.Status = corev1.PodStatus{
		Phase:     corev1.PodRunning,
		HostIP:    p.address,
		HostIPs:   []corev1.HostIP{{IP: p.address}},
		PodIP:     "10.244.0.7",
		PodIPs:    []corev1.PodIP{{IP: "10.244.0.7"}},
		StartTime: &now,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		},
	}
	for _, c := range pod.Spec.Containers {
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.Image,
			ContainerID: "tiny://" + tinyKey(pod.Namespace, pod.Name) + "/" + c.Name,
			Ready:       true, Started: ptr(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
	p.mu.Lock()
	p.pods[tinyKey(pod.Namespace, pod.Name)] = pod
	notify := p.notify
	p.mu.Unlock()
	if notify != nil {
		notify(pod.DeepCopy())
	}
	return nil
}

// UpdatePod takes the new spec and keeps the status.
func (p *tinyProvider) UpdatePod(_ context.Context, pod *corev1.Pod) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	old, ok := p.pods[tinyKey(pod.Namespace, pod.Name)]
	if !ok {
		return errdefs.NotFoundf("pod %s/%s is not known", pod.Namespace, pod.Name)
	}
	pod = pod.DeepCopy()
	pod.Status = old.Status
	p.pods[tinyKey(pod.Namespace, pod.Name)] = pod
	return nil
}

// DeletePod stops the pod at once: it forgets the pod and notifies it
// terminated, as virtual-kubelet's contract asks.
func (p *tinyProvider) DeletePod(_ context.Context, pod *corev1.Pod) error {
	key := tinyKey(pod.Namespace, pod.Name)
	p.mu.Lock()
	running, ok := p.pods[key]
	delete(p.pods, key)
	notify := p.notify
	p.mu.Unlock()
	if !ok {
		return errdefs.NotFoundf("pod %s is not known", key)
	}
	done := running.DeepCopy()
	now := metav1.Now()
	done.Status.Phase = corev1.PodSucceeded
	for i := range done.Status.Conditions {
		if c := &done.Status.Conditions[i]; c.Type == corev1.PodReady || c.Type == corev1.ContainersReady {
			c.Status, c.LastTransitionTime = corev1.ConditionFalse, now
		}
	}
	for i := range done.Status.ContainerStatuses {
		cs := &done.Status.ContainerStatuses[i]
		cs.Ready, cs.Started = false, ptr(false)
		cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 0, Reason: "Completed", StartedAt: cs.State.Running.StartedAt, FinishedAt: now, ContainerID: cs.ContainerID,
		}}
	}
	if notify != nil {
		notify(done)
	}
	return nil
}

// GetPod returns a copy of the pod.
func (p *tinyProvider) GetPod(_ context.Context, namespace, name string) (*corev1.Pod, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pod, ok := p.pods[tinyKey(namespace, name)]
	if !ok {
		return nil, errdefs.NotFoundf("pod %s/%s is not known", namespace, name)
	}
	return pod.DeepCopy(), nil
}

// GetPodStatus returns a copy of the pod's status.
func (p *tinyProvider) GetPodStatus(ctx context.Context, namespace, name string) (*corev1.PodStatus, error) {
	pod, err := p.GetPod(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	return &pod.Status, nil
}

// GetPods returns copies of every pod.
func (p *tinyProvider) GetPods(context.Context) ([]*corev1.Pod, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*corev1.Pod, 0, len(p.pods))
	for _, pod := range p.pods {
		out = append(out, pod.DeepCopy())
	}
	return out, nil
}

// NotifyPods keeps the callback.
func (p *tinyProvider) NotifyPods(_ context.Context, notify func(*corev1.Pod)) {
	p.mu.Lock()
	p.notify = notify
	p.mu.Unlock()
}

// GetContainerLogs is one line naming the pod and container.
func (p *tinyProvider) GetContainerLogs(_ context.Context, namespace, pod, container string, _ vkapi.ContainerLogOpts) (io.ReadCloser, error) {
	if err := p.known(namespace, pod); err != nil {
		return nil, err
	}
	return io.NopCloser(strings.NewReader(tinyLogLine(namespace, pod, container))), nil
}

// RunInContainer writes the command it was given to stdout.
func (p *tinyProvider) RunInContainer(_ context.Context, namespace, pod, container string, cmd []string, attach vkapi.AttachIO) error {
	if err := p.known(namespace, pod); err != nil {
		return err
	}
	_, err := io.WriteString(attach.Stdout(), tinyExecOutput(namespace, pod, container, cmd))
	return err
}

// AttachToContainer has no process to attach to.
func (p *tinyProvider) AttachToContainer(context.Context, string, string, string, vkapi.AttachIO) error {
	return errdefs.InvalidInput("the tiny provider runs no process to attach to")
}

// PortForward has nothing listening.
func (p *tinyProvider) PortForward(_ context.Context, _, _ string, _ int32, stream io.ReadWriteCloser) error {
	stream.Close()
	return errors.New("the tiny provider listens on no port")
}

// GetStatsSummary names the node and its pods, with no figures.
func (p *tinyProvider) GetStatsSummary(ctx context.Context) (*statsv1alpha1.Summary, error) {
	pods, _ := p.GetPods(ctx)
	s := &statsv1alpha1.Summary{Node: statsv1alpha1.NodeStats{NodeName: p.nodeName, StartTime: metav1.Now()}}
	for _, pod := range pods {
		s.Pods = append(s.Pods, statsv1alpha1.PodStats{
			PodRef:    statsv1alpha1.PodReference{Name: pod.Name, Namespace: pod.Namespace, UID: string(pod.UID)},
			StartTime: *pod.Status.StartTime,
		})
	}
	return s, nil
}

// GetMetricsResource has no metrics.
func (p *tinyProvider) GetMetricsResource(context.Context) ([]*dto.MetricFamily, error) {
	return nil, nil
}

// Ping: the tiny provider is always there.
func (p *tinyProvider) Ping(context.Context) error { return nil }

// NotifyNodeStatus keeps the callback; the node never changes.
func (p *tinyProvider) NotifyNodeStatus(_ context.Context, notify func(*corev1.Node)) {
	p.mu.Lock()
	p.nodeNotify = notify
	p.mu.Unlock()
}

// ConfigureNode describes the node, as virtual-kubelet's mock provider does
// before its node registers: room for 110 pods, Ready, its address and the
// kubelet API's port.
func (p *tinyProvider) ConfigureNode(_ context.Context, node *corev1.Node) {
	node.Labels[corev1.LabelHostname] = p.nodeName
	node.Labels[corev1.LabelOSStable] = "linux"
	node.Labels["type"] = "virtual-kubelet"
	capacity := corev1.ResourceList{
		corev1.ResourcePods:   resource.MustParse("110"),
		corev1.ResourceCPU:    resource.MustParse("8"),
		corev1.ResourceMemory: resource.MustParse("32Gi"),
	}
	s := &node.Status
	s.Capacity, s.Allocatable = capacity, capacity.DeepCopy()
	s.Conditions = []corev1.NodeCondition{
		{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "TinyProviderReady", Message: "the tiny provider is ready"},
		{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "TinyProviderHasMemory"},
		{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, Reason: "TinyProviderHasDisk"},
		{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, Reason: "TinyProviderHasPIDs"},
	}
	s.Addresses = []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: p.address},
		{Type: corev1.NodeHostName, Address: p.nodeName},
	}
	s.DaemonEndpoints.KubeletEndpoint.Port = p.port
	s.NodeInfo = corev1.NodeSystemInfo{
		OperatingSystem: "linux", Architecture: "amd64",
		KubeletVersion: p.version, ContainerRuntimeVersion: "tiny://v1",
	}
}

// known is nil when the provider runs the pod.
func (p *tinyProvider) known(namespace, name string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.pods[tinyKey(namespace, name)]; !ok {
		return errdefs.NotFoundf("pod %s/%s is not known", namespace, name)
	}
	return nil
}

func ptr[T any](v T) *T { return &v }
