package virtualkubelet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	vkapi "github.com/virtual-kubelet/virtual-kubelet/node/api"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodelet/nodelet/pkg/provider"
)

// fakePods is the smallest virtual-kubelet provider (a
// node.PodLifecycleHandler and nothing more): a map of pods.
type fakePods struct {
	mu   sync.Mutex
	pods map[string]*corev1.Pod
	// statuses, when they hold a pod's key, are what GetPodStatus answers
	// for it, where the stored pod's status may be older.
	statuses map[string]corev1.PodStatus
	// nilStatus makes GetPodStatus answer nil and no error.
	nilStatus bool
	// deletedPhase, when set, makes DeletePod keep the pod with this phase
	// rather than remove it.
	deletedPhase corev1.PodPhase
	// getErr, when set, is GetPod's error.
	getErr error
	// nilPod makes GetPod answer nil and no error for a pod it lacks.
	nilPod bool
}

func newFakePods(pods ...*corev1.Pod) *fakePods {
	f := &fakePods{pods: map[string]*corev1.Pod{}, statuses: map[string]corev1.PodStatus{}}
	for _, pod := range pods {
		f.pods[podKey(pod.Namespace, pod.Name)] = pod.DeepCopy()
	}
	return f
}

func (f *fakePods) CreatePod(_ context.Context, pod *corev1.Pod) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pods[podKey(pod.Namespace, pod.Name)] = pod.DeepCopy()
	return nil
}

func (f *fakePods) UpdatePod(_ context.Context, pod *corev1.Pod) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := podKey(pod.Namespace, pod.Name)
	if _, ok := f.pods[key]; !ok {
		return errdefs.NotFoundf("pod %s is not known", key)
	}
	f.pods[key] = pod.DeepCopy()
	return nil
}

func (f *fakePods) DeletePod(_ context.Context, pod *corev1.Pod) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := podKey(pod.Namespace, pod.Name)
	stored, ok := f.pods[key]
	if !ok {
		return errdefs.NotFoundf("pod %s is not known", key)
	}
	// As virtual-kubelet's mock does, write into the pod given.
	pod.Status.Reason = "FakeDeleted"
	if f.deletedPhase != "" {
		stored.Status.Phase = f.deletedPhase
		return nil
	}
	delete(f.pods, key)
	return nil
}

// setStatus changes a stored pod's status, as the provider's own progress.
func (f *fakePods) setStatus(namespace, name string, change func(*corev1.PodStatus)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	change(&f.pods[podKey(namespace, name)].Status)
}

func (f *fakePods) GetPod(_ context.Context, namespace, name string) (*corev1.Pod, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.getErr != nil {
		return nil, f.getErr
	}
	key := podKey(namespace, name)
	pod, ok := f.pods[key]
	if !ok {
		if f.nilPod {
			return nil, nil
		}
		return nil, errdefs.NotFoundf("pod %s is not known", key)
	}
	return pod.DeepCopy(), nil
}

func (f *fakePods) GetPodStatus(_ context.Context, namespace, name string) (*corev1.PodStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := podKey(namespace, name)
	pod, ok := f.pods[key]
	if !ok {
		return nil, errdefs.NotFoundf("pod %s is not known", key)
	}
	if f.nilStatus {
		return nil, nil
	}
	if status, ok := f.statuses[key]; ok {
		return status.DeepCopy(), nil
	}
	return pod.Status.DeepCopy(), nil
}

func (f *fakePods) GetPods(context.Context) ([]*corev1.Pod, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]*corev1.Pod, 0, len(f.pods))
	for _, pod := range f.pods {
		out = append(out, pod.DeepCopy())
	}
	return out, nil
}

// notifier makes a provider a node.PodNotifier when embedded beside it.
type notifier struct {
	notifyMu sync.Mutex
	notify   func(*corev1.Pod)
}

func (n *notifier) NotifyPods(_ context.Context, notify func(*corev1.Pod)) {
	n.notifyMu.Lock()
	defer n.notifyMu.Unlock()
	n.notify = notify
}

// push calls the registered callback, as a provider does on a change.
func (n *notifier) push(pod *corev1.Pod) {
	n.notifyMu.Lock()
	notify := n.notify
	n.notifyMu.Unlock()
	if notify != nil {
		notify(pod)
	}
}

// fullPods is a whole nodeutil.Provider over fakePods.
type fullPods struct {
	*fakePods
	// logOpts are the options of the last GetContainerLogs.
	logOpts vkapi.ContainerLogOpts
	// cmd is the command of the last RunInContainer.
	cmd []string
	// session serves RunInContainer and AttachToContainer.
	session func(ctx context.Context, attach vkapi.AttachIO) error
	summary *statsv1alpha1.Summary
}

func newFullPods(pods ...*corev1.Pod) *fullPods {
	return &fullPods{fakePods: newFakePods(pods...)}
}

func (f *fullPods) GetContainerLogs(ctx context.Context, namespace, pod, container string, opts vkapi.ContainerLogOpts) (io.ReadCloser, error) {
	if _, err := f.GetPod(ctx, namespace, pod); err != nil {
		return nil, err
	}
	f.logOpts = opts
	return io.NopCloser(strings.NewReader(container + " log\n")), nil
}

func (f *fullPods) RunInContainer(ctx context.Context, namespace, pod, _ string, cmd []string, attach vkapi.AttachIO) error {
	if _, err := f.GetPod(ctx, namespace, pod); err != nil {
		return err
	}
	f.cmd = cmd
	return f.session(ctx, attach)
}

func (f *fullPods) AttachToContainer(ctx context.Context, namespace, pod, _ string, attach vkapi.AttachIO) error {
	if _, err := f.GetPod(ctx, namespace, pod); err != nil {
		return err
	}
	return f.session(ctx, attach)
}

func (f *fullPods) GetStatsSummary(context.Context) (*statsv1alpha1.Summary, error) {
	return f.summary, nil
}

func (f *fullPods) GetMetricsResource(context.Context) ([]*dto.MetricFamily, error) {
	return nil, errors.New("not used by nodelet")
}

func (f *fullPods) PortForward(ctx context.Context, namespace, pod string, port int32, stream io.ReadWriteCloser) error {
	if _, err := f.GetPod(ctx, namespace, pod); err != nil {
		return err
	}
	_, err := fmt.Fprintf(stream, "port %d", port)
	return err
}

// configuringPods has the ConfigureNode method of virtual-kubelet's mock
// provider, which writes into the node's labels without checking them and
// reports Ready False until virtual-kubelet marks the node Ready.
type configuringPods struct {
	*fakePods
}

func (configuringPods) ConfigureNode(_ context.Context, node *corev1.Node) {
	node.Labels["example.com/configured"] = "true"
	node.Status.Capacity = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8")}
	node.Status.Conditions = []corev1.NodeCondition{
		{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "KubeletPending"},
		{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory"},
	}
}

// fakeNode is a virtual-kubelet node.NodeProvider.
type fakeNode struct {
	mu      sync.Mutex
	pingErr error
	notify  func(*corev1.Node)
}

func (f *fakeNode) Ping(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pingErr
}

func (f *fakeNode) NotifyNodeStatus(_ context.Context, notify func(*corev1.Node)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.notify = notify
}

// push calls the registered callback, as a provider does on a change.
func (f *fakeNode) push(node *corev1.Node) {
	f.mu.Lock()
	notify := f.notify
	f.mu.Unlock()
	if notify != nil {
		notify(node)
	}
}

func testPod(name string, uid types.UID, phase corev1.PodPhase) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: uid},
		Spec:       corev1.PodSpec{NodeName: "vk-0", Containers: []corev1.Container{{Name: "app"}}},
		Status:     corev1.PodStatus{Phase: phase},
	}
}

// testStreams is nodelet's side of an exec or attach session.
type testStreams struct {
	stdin          io.Reader
	stdout, stderr *bytes.Buffer
	tty            bool
	resize         chan provider.TermSize
}

func (s *testStreams) Stdin() io.Reader       { return s.stdin }
func (s *testStreams) Stdout() io.WriteCloser { return nopCloser{s.stdout} }
func (s *testStreams) Stderr() io.WriteCloser { return nopCloser{s.stderr} }
func (s *testStreams) TTY() bool              { return s.tty }
func (s *testStreams) Resize() <-chan provider.TermSize {
	return s.resize
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// bufferStream is a port-forward stream that keeps what is written to it.
type bufferStream struct {
	bytes.Buffer
}

func (*bufferStream) Close() error { return nil }

// waitClosed drains ch until it is closed, failing after a deadline: the
// resize relay closes its channel as the last thing it does.
func waitClosed(ch <-chan vkapi.TermSize) error {
	deadline := time.After(5 * time.Second)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return nil
			}
		case <-deadline:
			return errors.New("the resize relay did not end")
		}
	}
}
