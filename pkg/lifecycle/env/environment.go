package env

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/pkg/podrules"
)

// masterService is the service whose variables every pod gets, even with
// service links disabled: in-cluster clients find the API server with them.
const masterService = "kubernetes"

// NodeInfo is what the environment needs to know about the node.
type NodeInfo struct {
	NodeName string
	// HostIP is the node's primary IP.
	HostIP string
	// PodIPs are the pod's IPs, primary first; none means the pod uses the
	// host's network, whose IPs are then the pod's.
	PodIPs []string
	// Allocatable stands in for a resource limit a container does not set.
	Allocatable corev1.ResourceList
	// Volumes are the host directories of the pod's volumes by name,
	// where a fileKeyRef reads its env file.
	Volumes map[string]string
}

// Environment returns the container's environment as "K=V" entries: service
// variables first, then envFrom sources, then env in declaration order. A
// name defined again replaces the earlier entry and takes the later position,
// so every name appears once.
func Environment(ctx context.Context, g Getter, pod *corev1.Pod, c *corev1.Container, node NodeInfo) ([]string, error) {
	services, err := podServices(ctx, g, pod)
	if err != nil {
		return nil, fmt.Errorf("service environment: %w", err)
	}
	links := pod.Spec.EnableServiceLinks == nil || *pod.Spec.EnableServiceLinks
	var vars orderedVars
	for _, kv := range serviceVars(selectServices(services, pod.Namespace, links)) {
		vars.set(kv[0], kv[1])
	}
	if err := vars.checkSize(); err != nil {
		return nil, fmt.Errorf("service environment: %w", err)
	}

	r := &resolver{
		ctx:        ctx,
		g:          g,
		pod:        pod,
		c:          c,
		node:       node,
		configMaps: map[string]*corev1.ConfigMap{},
		secrets:    map[string]*corev1.Secret{},
	}
	for i := range c.EnvFrom {
		if err := r.envFrom(&c.EnvFrom[i], &vars); err != nil {
			return nil, err
		}
		if err := vars.checkSize(); err != nil {
			return nil, fmt.Errorf("envFrom: %w", err)
		}
	}
	for i := range c.Env {
		ev := &c.Env[i]
		switch {
		case ev.Value != "":
			v, err := Expand(ev.Value, vars.lookup)
			if err != nil {
				return nil, fmt.Errorf("env %s: %w", ev.Name, err)
			}
			vars.set(ev.Name, v)
		case ev.ValueFrom != nil:
			v, ok, err := r.valueFrom(ev.ValueFrom)
			if err != nil {
				return nil, fmt.Errorf("env %s: %w", ev.Name, err)
			}
			if ok {
				vars.set(ev.Name, v)
			}
		default:
			vars.set(ev.Name, "")
		}
		if err := vars.checkSize(); err != nil {
			return nil, fmt.Errorf("env %s: %w", ev.Name, err)
		}
	}
	return vars.list(), nil
}

// MaxEnvironmentLen bounds a container's environment: 6 MiB, more than the
// kernel takes for the arguments and environment of a process together
// (a quarter of the stack limit, at most three quarters of 8 MiB). It is
// checked as the variables are set, so that references between variables
// cannot grow it without end.
const MaxEnvironmentLen = 6 << 20

// orderedVars keeps each name once, at the position where it was last set.
type orderedVars struct {
	values map[string]string
	order  []string
	last   map[string]int
	size   int // of the entries "name=value\x00"
}

func (o *orderedVars) set(name, value string) {
	if o.values == nil {
		o.values, o.last = map[string]string{}, map[string]int{}
	}
	if old, ok := o.values[name]; ok {
		o.size -= len(name) + len(old) + 2
	}
	o.size += len(name) + len(value) + 2
	o.values[name] = value
	o.last[name] = len(o.order)
	o.order = append(o.order, name)
}

func (o *orderedVars) checkSize() error {
	if o.size > MaxEnvironmentLen {
		return fmt.Errorf("the environment takes more than %d bytes, more than the kernel takes", MaxEnvironmentLen)
	}
	return nil
}

func (o *orderedVars) lookup(name string) (string, bool) {
	v, ok := o.values[name]
	return v, ok
}

func (o *orderedVars) list() []string {
	out := make([]string, 0, len(o.values))
	for i, name := range o.order {
		if o.last[name] == i {
			out = append(out, name+"="+o.values[name])
		}
	}
	return out
}

// staticServiceWait bounds how long a static pod's container waits for the
// services: static pods run while the API server is away, without service
// variables if it must be.
const staticServiceWait = 2 * time.Second

// podServices returns the services a pod's variables come from. A static
// pod (which the node runs from a manifest, not from the API) waits for
// them only briefly, as the kubelet starts static pods before it has ever
// reached the API server.
func podServices(ctx context.Context, g Getter, pod *corev1.Pod) ([]corev1.Service, error) {
	if !podrules.IsStaticPod(pod) {
		return g.Services(ctx, pod.Namespace)
	}
	wait, cancel := context.WithTimeout(ctx, staticServiceWait)
	defer cancel()
	services, err := g.Services(wait, pod.Namespace)
	if err != nil && ctx.Err() == nil {
		return nil, nil
	}
	return services, err
}

// selectServices keeps the services whose variables a pod in namespace gets:
// the default namespace's "kubernetes" always, and the namespace's own
// services (which win over it on a name clash) when links are enabled.
// Services without a cluster IP never give variables. The result is sorted
// by name so that the environment is stable.
func selectServices(services []corev1.Service, namespace string, links bool) []*corev1.Service {
	byName := map[string]*corev1.Service{}
	for i := range services {
		s := &services[i]
		if s.Spec.ClusterIP == "" || s.Spec.ClusterIP == corev1.ClusterIPNone || len(s.Spec.Ports) == 0 {
			continue
		}
		switch {
		case links && s.Namespace == namespace:
			byName[s.Name] = s
		case s.Namespace == metav1.NamespaceDefault && s.Name == masterService:
			if _, taken := byName[s.Name]; !taken {
				byName[s.Name] = s
			}
		}
	}
	out := make([]*corev1.Service, 0, len(byName))
	for _, s := range byName {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// serviceVars returns the {name, value} pairs describing services: the
// NAME_SERVICE_HOST/PORT family and the Docker link style NAME_PORT family.
func serviceVars(services []*corev1.Service) [][2]string {
	var out [][2]string
	add := func(k, v string) { out = append(out, [2]string{k, v}) }
	for _, s := range services {
		prefix := envName(s.Name)
		ip := s.Spec.ClusterIP
		add(prefix+"_SERVICE_HOST", ip)
		add(prefix+"_SERVICE_PORT", strconv.Itoa(int(s.Spec.Ports[0].Port)))
		for _, p := range s.Spec.Ports {
			if p.Name != "" {
				add(prefix+"_SERVICE_PORT_"+envName(p.Name), strconv.Itoa(int(p.Port)))
			}
		}
		for i, p := range s.Spec.Ports {
			proto := strings.ToLower(string(p.Protocol))
			if proto == "" {
				proto = "tcp"
			}
			port := strconv.Itoa(int(p.Port))
			url := proto + "://" + net.JoinHostPort(ip, port)
			if i == 0 {
				add(prefix+"_PORT", url)
			}
			pp := prefix + "_PORT_" + port + "_" + strings.ToUpper(proto)
			add(pp, url)
			add(pp+"_PROTO", proto)
			add(pp+"_PORT", port)
			add(pp+"_ADDR", ip)
		}
	}
	return out
}

func envName(s string) string {
	return strings.ToUpper(strings.ReplaceAll(s, "-", "_"))
}

// resolver reads the sources of variables, each object once per call.
type resolver struct {
	ctx        context.Context
	g          Getter
	pod        *corev1.Pod
	c          *corev1.Container
	node       NodeInfo
	configMaps map[string]*corev1.ConfigMap
	secrets    map[string]*corev1.Secret
}

func (r *resolver) configMap(name string) (*corev1.ConfigMap, error) {
	if cm, ok := r.configMaps[name]; ok {
		return cm, nil
	}
	cm, err := r.g.ConfigMap(r.ctx, r.pod.Namespace, name)
	if err != nil {
		return nil, err
	}
	r.configMaps[name] = cm
	return cm, nil
}

func (r *resolver) secret(name string) (*corev1.Secret, error) {
	if s, ok := r.secrets[name]; ok {
		return s, nil
	}
	s, err := r.g.Secret(r.ctx, r.pod.Namespace, name)
	if err != nil {
		return nil, err
	}
	r.secrets[name] = s
	return s, nil
}

// envFrom adds every key of a ConfigMap or Secret, prefixed, in key order.
// Keys that cannot be variable names are skipped.
func (r *resolver) envFrom(src *corev1.EnvFromSource, vars *orderedVars) error {
	var data map[string]string
	switch {
	case src.ConfigMapRef != nil:
		cm, err := r.configMap(src.ConfigMapRef.Name)
		if err != nil {
			if apierrors.IsNotFound(err) && isOptional(src.ConfigMapRef.Optional) {
				return nil
			}
			return fmt.Errorf("envFrom: configmap %s/%s: %w", r.pod.Namespace, src.ConfigMapRef.Name, err)
		}
		data = cm.Data
	case src.SecretRef != nil:
		s, err := r.secret(src.SecretRef.Name)
		if err != nil {
			if apierrors.IsNotFound(err) && isOptional(src.SecretRef.Optional) {
				return nil
			}
			return fmt.Errorf("envFrom: secret %s/%s: %w", r.pod.Namespace, src.SecretRef.Name, err)
		}
		data = make(map[string]string, len(s.Data))
		for k, v := range s.Data {
			data[k] = string(v)
		}
	default:
		return fmt.Errorf("envFrom: no configMapRef or secretRef")
	}
	keys := make([]string, 0, len(data))
	for k := range data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		name := src.Prefix + k
		if !validName(name) {
			continue
		}
		vars.set(name, data[k])
	}
	return nil
}

// validName reports whether name can be an environment variable name: not
// empty, printable ASCII, no '='.
func validName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < ' ' || c > '~' || c == '=' {
			return false
		}
	}
	return true
}

func isOptional(b *bool) bool { return b != nil && *b }

// valueFrom resolves one env source. ok is false when an optional source is
// missing and the variable must be left out.
func (r *resolver) valueFrom(src *corev1.EnvVarSource) (value string, ok bool, err error) {
	ns := r.pod.Namespace
	switch {
	case src.FieldRef != nil:
		v, err := r.field(src.FieldRef.FieldPath)
		return v, err == nil, err
	case src.ResourceFieldRef != nil:
		c := r.c
		if name := src.ResourceFieldRef.ContainerName; name != "" && name != c.Name {
			if c = FindContainer(r.pod, name); c == nil {
				return "", false, fmt.Errorf("resourceFieldRef: no container %q in pod", name)
			}
		}
		v, err := ResourceValue(c, src.ResourceFieldRef, r.node.Allocatable)
		if err != nil {
			return "", false, fmt.Errorf("resourceFieldRef: %w", err)
		}
		return v, true, nil
	case src.ConfigMapKeyRef != nil:
		ref := src.ConfigMapKeyRef
		cm, err := r.configMap(ref.Name)
		if err != nil {
			if apierrors.IsNotFound(err) && isOptional(ref.Optional) {
				return "", false, nil
			}
			return "", false, fmt.Errorf("configmap %s/%s: %w", ns, ref.Name, err)
		}
		v, found := cm.Data[ref.Key]
		if !found {
			if isOptional(ref.Optional) {
				return "", false, nil
			}
			return "", false, fmt.Errorf("configmap %s/%s has no key %q", ns, ref.Name, ref.Key)
		}
		return v, true, nil
	case src.SecretKeyRef != nil:
		ref := src.SecretKeyRef
		s, err := r.secret(ref.Name)
		if err != nil {
			if apierrors.IsNotFound(err) && isOptional(ref.Optional) {
				return "", false, nil
			}
			return "", false, fmt.Errorf("secret %s/%s: %w", ns, ref.Name, err)
		}
		v, found := s.Data[ref.Key]
		if !found {
			if isOptional(ref.Optional) {
				return "", false, nil
			}
			return "", false, fmt.Errorf("secret %s/%s has no key %q", ns, ref.Name, ref.Key)
		}
		return string(v), true, nil
	case src.FileKeyRef != nil:
		return r.fileKey(src.FileKeyRef)
	}
	return "", false, fmt.Errorf("valueFrom names no source")
}

// field resolves a fieldRef. Pods of the process provider share the host's
// network, so the pod IPs are the host IPs.
func (r *resolver) field(path string) (string, error) {
	switch path {
	case "spec.nodeName":
		if r.pod.Spec.NodeName != "" {
			return r.pod.Spec.NodeName, nil
		}
		return r.node.NodeName, nil
	case "spec.serviceAccountName":
		return r.pod.Spec.ServiceAccountName, nil
	case "status.hostIP":
		return r.hostIPs()[0], nil
	case "status.hostIPs":
		return strings.Join(r.hostIPs(), ","), nil
	case "status.podIP":
		return r.podIPs()[0], nil
	case "status.podIPs":
		return strings.Join(r.podIPs(), ","), nil
	}
	v, err := MetadataField(r.pod, path)
	if err != nil {
		return "", fmt.Errorf("fieldRef: %w", err)
	}
	return v, nil
}

// hostIPs returns the node's IPs, primary first; never empty.
func (r *resolver) hostIPs() []string {
	ips := []string{}
	if r.node.HostIP != "" {
		ips = append(ips, r.node.HostIP)
	}
	for _, ip := range r.pod.Status.HostIPs {
		if ip.IP != "" && ip.IP != r.node.HostIP {
			ips = append(ips, ip.IP)
		}
	}
	if len(ips) == 0 && r.pod.Status.HostIP != "" {
		ips = append(ips, r.pod.Status.HostIP)
	}
	if len(ips) == 0 {
		ips = append(ips, "")
	}
	return ips
}

// podIPs returns the pod's IPs, primary first: the host's when it has none
// of its own; never empty.
func (r *resolver) podIPs() []string {
	if len(r.node.PodIPs) > 0 {
		return r.node.PodIPs
	}
	return r.hostIPs()
}

// FindContainer returns the pod's container (or init container) of that
// name, or nil.
func FindContainer(pod *corev1.Pod, name string) *corev1.Container {
	for _, list := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	return nil
}
