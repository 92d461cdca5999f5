package podservice

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/provider"
)

// Options configure a Provider. NodeName and URL are required.
type Options struct {
	// NodeName is the node the provider runs pods for.
	NodeName string
	// URL is the service's base URL (http or https).
	URL string
	// HTTPClient sends the requests to the service (default: a client
	// with a 30 s timeout).
	HTTPClient *http.Client

	// Address is the node's InternalIP: where the agent's kubelet API
	// server is reached. Empty reports the node's hostname only.
	Address string
	// Port is the kubelet API server's port (default 10250), reported in
	// the node's daemon endpoints.
	Port int32
	// Capacity, when set, is the node's capacity in place of the
	// service's.
	Capacity corev1.ResourceList
	// Version is the kubelet version the node reports.
	Version string
}

// Provider runs the pods of one node on the pod service.
type Provider struct {
	opts   Options
	client *client

	mu sync.Mutex
	// pods are the pods the provider was asked to run, by namespace/name:
	// their metadata and spec, which the service does not keep whole.
	pods map[string]*corev1.Pod
	// capacity is the service's, as the last Ping learned it.
	capacity   corev1.ResourceList
	notifyNode func()
}

var (
	_ provider.PodLifecycleHandler = (*Provider)(nil)
	_ provider.NodeProvider        = (*Provider)(nil)
	_ provider.NodeNotifier        = (*Provider)(nil)
	_ provider.LogsProvider        = (*Provider)(nil)
)

// New checks the options and returns a provider; it does no I/O.
func New(o Options) (*Provider, error) {
	var errs []error
	if o.NodeName == "" {
		errs = append(errs, errors.New("node name: required"))
	}
	base, err := url.Parse(o.URL)
	switch {
	case o.URL == "":
		errs = append(errs, errors.New("service URL: required"))
	case err != nil:
		errs = append(errs, fmt.Errorf("service URL: %w", err))
	case (base.Scheme != "http" && base.Scheme != "https") || base.Host == "":
		errs = append(errs, fmt.Errorf("service URL %q: want http:// or https:// and a host", o.URL))
	}
	if o.Address != "" && net.ParseIP(o.Address) == nil {
		errs = append(errs, fmt.Errorf("address %q: not an IP address", o.Address))
	}
	if o.Port < 0 || o.Port > 65535 {
		errs = append(errs, fmt.Errorf("port %d: must be between 0 and 65535", o.Port))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("pod service provider: %w", err)
	}
	if o.Port == 0 {
		o.Port = 10250
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}
	return &Provider{
		opts:   o,
		client: &client{base: base, http: o.HTTPClient},
		pods:   map[string]*corev1.Pod{},
	}, nil
}

// CreatePod sends the pod to the service. A pod the service already runs
// with the same UID (an earlier create whose answer was lost) is accepted.
func (p *Provider) CreatePod(ctx context.Context, pod *corev1.Pod) error {
	if len(pod.Spec.InitContainers) > 0 {
		return provider.Reject("InitContainersUnsupported", "the pod service runs no init containers")
	}
	_, err := p.client.create(ctx, toService(pod, p.opts.NodeName))
	if isConflict(err) {
		existing, gerr := p.client.get(ctx, pod.Namespace, pod.Name)
		if gerr != nil {
			return fmt.Errorf("%w; then %w", err, gerr)
		}
		if existing.UID != string(pod.UID) {
			return fmt.Errorf("%w: it runs pod UID %s", err, existing.UID)
		}
		err = nil
	}
	if err != nil {
		return err
	}
	p.keep(pod)
	klog.FromContext(ctx).V(2).Info("Pod sent to the pod service", "pod", klog.KObj(pod))
	return nil
}

// UpdatePod keeps the pod's new spec; the service cannot change a pod it
// runs.
func (p *Provider) UpdatePod(_ context.Context, pod *corev1.Pod) error {
	p.keep(pod)
	return nil
}

// DeletePod asks the service to stop the pod within its grace period. A
// pod the service does not have is gone already.
func (p *Provider) DeletePod(ctx context.Context, pod *corev1.Pod) error {
	err := p.client.delete(ctx, pod.Namespace, pod.Name, gracePeriod(pod))
	if errors.Is(err, provider.ErrNotFound) {
		return nil
	}
	return err
}

// gracePeriod is the seconds a deleted pod has to stop.
func gracePeriod(pod *corev1.Pod) int64 {
	switch {
	case pod.DeletionGracePeriodSeconds != nil:
		return *pod.DeletionGracePeriodSeconds
	case pod.Spec.TerminationGracePeriodSeconds != nil:
		return *pod.Spec.TerminationGracePeriodSeconds
	}
	return corev1.DefaultTerminationGracePeriodSeconds
}

// GetPod asks the service for the pod's status.
func (p *Provider) GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	sp, err := p.client.get(ctx, namespace, name)
	if errors.Is(err, provider.ErrNotFound) {
		p.mu.Lock()
		delete(p.pods, namespace+"/"+name)
		p.mu.Unlock()
		return nil, fmt.Errorf("pod %s/%s: %w", namespace, name, provider.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	return p.toPod(sp), nil
}

// GetPods lists the node's pods in the service.
func (p *Provider) GetPods(ctx context.Context) ([]*corev1.Pod, error) {
	list, err := p.client.list(ctx, p.opts.NodeName)
	if err != nil {
		return nil, err
	}
	out := make([]*corev1.Pod, 0, len(list))
	for _, sp := range list {
		out = append(out, p.toPod(sp))
	}
	return out, nil
}

// GetContainerLogs returns the container's log from the service: tail is
// honoured; the service keeps no previous logs and no timestamps, and
// cannot filter by time nor follow.
func (p *Provider) GetContainerLogs(ctx context.Context, namespace, pod, container string, opts provider.ContainerLogOpts) (io.ReadCloser, error) {
	if opts.Previous {
		return nil, errors.New("previous logs: the pod service keeps none")
	}
	return p.client.logs(ctx, namespace, pod, container, opts.Tail)
}

// keep records the pod's metadata and spec, which GetPod reports.
func (p *Provider) keep(pod *corev1.Pod) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pods[pod.Namespace+"/"+pod.Name] = pod
}

// toPod is the service's pod with its status mapped, over the metadata
// and spec the provider keeps of it; a pod it does not keep (created by an
// earlier agent) is rebuilt from the service's answer.
func (p *Provider) toPod(sp Pod) *corev1.Pod {
	p.mu.Lock()
	kept := p.pods[sp.Namespace+"/"+sp.Name]
	p.mu.Unlock()
	out := &corev1.Pod{}
	if kept != nil && string(kept.UID) == sp.UID {
		out.ObjectMeta, out.Spec = kept.ObjectMeta, kept.Spec // shared, as the contract allows
	} else {
		out.ObjectMeta = metav1.ObjectMeta{Namespace: sp.Namespace, Name: sp.Name, UID: types.UID(sp.UID)}
		out.Spec.NodeName = p.opts.NodeName
		for _, c := range sp.Containers {
			out.Spec.Containers = append(out.Spec.Containers, corev1.Container{
				Name: c.Name, Image: c.Image, Command: c.Command, Args: c.Args,
			})
		}
	}
	out.Status = podStatus(out, sp.Status, p.opts.Address)
	return out
}

// toService is the pod as the service runs it: its containers' image,
// command, literal environment and resource requests.
func toService(pod *corev1.Pod, node string) Pod {
	out := Pod{Node: node, Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID)}
	for _, c := range pod.Spec.Containers {
		sc := Container{Name: c.Name, Image: c.Image, Command: c.Command, Args: c.Args,
			CPU: request(c, corev1.ResourceCPU), Memory: request(c, corev1.ResourceMemory)}
		for _, e := range c.Env {
			if e.ValueFrom == nil {
				sc.Env = append(sc.Env, EnvVar{Name: e.Name, Value: e.Value})
			}
		}
		out.Containers = append(out.Containers, sc)
	}
	return out
}

// request is the container's request of a resource, else its limit, as a
// quantity; "" for neither.
func request(c corev1.Container, name corev1.ResourceName) string {
	if q, ok := c.Resources.Requests[name]; ok {
		return q.String()
	}
	if q, ok := c.Resources.Limits[name]; ok {
		return q.String()
	}
	return ""
}
