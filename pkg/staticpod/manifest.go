package staticpod

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/nodelet/nodelet/pkg/podrules"
)

// The sources of static pods, as their ConfigSourceAnnotation says.
const (
	SourceFile = "file"
	SourceHTTP = "http"
)

// manifest is one static pod as read from its source: the pod ready to
// run, or why the manifest cannot be run.
type manifest struct {
	// origin is where it was read: the file's path or the URL.
	origin string
	pod    *corev1.Pod
	err    error
}

// decodePods decodes a manifest's bytes, YAML or JSON: one Pod or, when
// list is set (the http source), a PodList or List of pods. Unknown and
// duplicate fields are errors naming the field.
func decodePods(data []byte, list bool) ([]*corev1.Pod, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, errors.New("empty manifest")
	}
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("decode manifest: %w", err)
	}
	var meta metav1.TypeMeta
	if err := kjson.UnmarshalCaseSensitivePreserveInts(js, &meta); err != nil {
		return nil, fmt.Errorf("decode manifest: %w", err)
	}
	switch {
	case meta.APIVersion == "v1" && meta.Kind == "Pod":
		pod := &corev1.Pod{}
		if err := strictDecode(js, pod); err != nil {
			return nil, fmt.Errorf("decode pod: %w", err)
		}
		return []*corev1.Pod{pod}, nil
	case list && meta.APIVersion == "v1" && (meta.Kind == "PodList" || meta.Kind == "List"):
		var pods corev1.PodList
		if err := strictDecode(js, &pods); err != nil {
			return nil, fmt.Errorf("decode pod list: %w", err)
		}
		out := make([]*corev1.Pod, 0, len(pods.Items))
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.APIVersion != "" && p.APIVersion != "v1" || p.Kind != "" && p.Kind != "Pod" {
				return nil, fmt.Errorf("item %d: want a v1 Pod, got %s %s", i, p.APIVersion, p.Kind)
			}
			out = append(out, p)
		}
		return out, nil
	}
	want := "a v1 Pod"
	if list {
		want = "a v1 Pod or PodList"
	}
	return nil, fmt.Errorf("want %s, got apiVersion %q kind %q", want, meta.APIVersion, meta.Kind)
}

// strictDecode decodes JSON into v; a mistyped value, an unknown or a
// duplicate field is an error naming its path.
func strictDecode(js []byte, v any) error {
	strict, err := kjson.UnmarshalStrict(js, v, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	if len(strict) > 0 {
		msgs := make([]string, len(strict))
		for i, e := range strict {
			msgs[i] = e.Error()
		}
		return errors.New(strings.Join(msgs, "; "))
	}
	return nil
}

// prepare turns a decoded pod into the static pod the node runs, as the
// kubelet does: API defaults applied, validated, then named
// <name>-<nodeName> in its namespace (default "default"), bound to the node,
// tolerating every NoExecute taint, with a UID and hash derived from the
// source, origin, node and content (the same manifest gives the same pod on
// every run of the agent) and the source and hash annotations. The pod is
// modified in place.
func prepare(pod *corev1.Pod, source, origin, nodeName string) error {
	applyDefaults(pod)
	if err := validate(pod, nodeName); err != nil {
		return err
	}
	hash, err := podHash(pod, source, origin, nodeName)
	if err != nil {
		return err
	}
	pod.UID = types.UID(hash)
	pod.Name = pod.Name + "-" + nodeName
	if pod.Namespace == "" {
		pod.Namespace = metav1.NamespaceDefault
	}
	pod.Spec.NodeName = nodeName
	pod.Spec.Tolerations = append(pod.Spec.Tolerations, corev1.Toleration{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute})
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[podrules.ConfigSourceAnnotation] = source
	pod.Annotations[podrules.ConfigHashAnnotation] = hash
	pod.Status = corev1.PodStatus{Phase: corev1.PodPending}
	return nil
}

// podHash is the static pod's hash and UID: 32 hex digits of a SHA-256 of
// the defaulted pod as decoded (before it is named for the node), the
// node's name and where the pod came from.
func podHash(pod *corev1.Pod, source, origin, nodeName string) (string, error) {
	data, err := json.Marshal(pod) // struct fields in order, map keys sorted: stable
	if err != nil {
		return "", fmt.Errorf("hash pod: %w", err)
	}
	h := sha256.New()
	h.Write(data)
	fmt.Fprintf(h, "\x00node:%s\x00%s:%s", nodeName, source, origin)
	return hex.EncodeToString(h.Sum(nil)[:16]), nil
}

// applyDefaults fills in what the API server would default in a pod that
// the static pod's run reads, so that the node runs the pod the mirror pod
// shows. Status, UID and resource version of the manifest are dropped.
func applyDefaults(pod *corev1.Pod) {
	pod.UID, pod.ResourceVersion, pod.Generation = "", "", 0
	pod.CreationTimestamp = metav1.Time{}
	pod.Status = corev1.PodStatus{}
	s := &pod.Spec
	if s.RestartPolicy == "" {
		s.RestartPolicy = corev1.RestartPolicyAlways
	}
	if s.DNSPolicy == "" {
		s.DNSPolicy = corev1.DNSClusterFirst
	}
	if s.TerminationGracePeriodSeconds == nil {
		s.TerminationGracePeriodSeconds = ptr.To[int64](corev1.DefaultTerminationGracePeriodSeconds)
	}
	if s.SchedulerName == "" {
		s.SchedulerName = corev1.DefaultSchedulerName
	}
	if s.EnableServiceLinks == nil {
		s.EnableServiceLinks = ptr.To(corev1.DefaultEnableServiceLinks)
	}
	if s.SecurityContext == nil {
		s.SecurityContext = &corev1.PodSecurityContext{}
	}
	for _, list := range [][]corev1.Container{s.InitContainers, s.Containers} {
		for i := range list {
			c := &list[i]
			if c.TerminationMessagePath == "" {
				c.TerminationMessagePath = corev1.TerminationMessagePathDefault
			}
			if c.TerminationMessagePolicy == "" {
				c.TerminationMessagePolicy = corev1.TerminationMessageReadFile
			}
			if c.ImagePullPolicy == "" {
				c.ImagePullPolicy = defaultPullPolicy(c.Image)
			}
			for j := range c.Ports {
				if c.Ports[j].Protocol == "" {
					c.Ports[j].Protocol = corev1.ProtocolTCP
				}
			}
		}
	}
}

// defaultPullPolicy is the API's default: Always for an image without a
// tag or tagged latest, IfNotPresent otherwise.
func defaultPullPolicy(image string) corev1.PullPolicy {
	if strings.Contains(image, "@") {
		return corev1.PullIfNotPresent
	}
	name := image[strings.LastIndex(image, "/")+1:]
	if i := strings.LastIndex(name, ":"); i < 0 || name[i+1:] == "latest" {
		return corev1.PullAlways
	}
	return corev1.PullIfNotPresent
}

// validate checks what the node needs to run the pod and the API to take
// its mirror pod: names and containers.
func validate(pod *corev1.Pod, nodeName string) error {
	var errs []error
	if pod.Name == "" {
		errs = append(errs, errors.New("metadata.name is required"))
	} else {
		full := pod.Name + "-" + nodeName
		for _, msg := range utilvalidation.IsDNS1123Subdomain(full) {
			errs = append(errs, fmt.Errorf("metadata.name %q: as %q on this node: %s", pod.Name, full, msg))
		}
	}
	if pod.Namespace != "" {
		for _, msg := range utilvalidation.IsDNS1123Label(pod.Namespace) {
			errs = append(errs, fmt.Errorf("metadata.namespace %q: %s", pod.Namespace, msg))
		}
	}
	if len(pod.Spec.Containers) == 0 {
		errs = append(errs, errors.New("spec.containers: at least one container is required"))
	}
	names := map[string]bool{}
	for _, set := range []struct {
		field string
		list  []corev1.Container
	}{{"spec.initContainers", pod.Spec.InitContainers}, {"spec.containers", pod.Spec.Containers}} {
		for i, c := range set.list {
			path := fmt.Sprintf("%s[%d].name", set.field, i)
			switch {
			case c.Name == "":
				errs = append(errs, fmt.Errorf("%s is required", path))
			case names[c.Name]:
				errs = append(errs, fmt.Errorf("%s %q is used by another container", path, c.Name))
			default:
				for _, msg := range utilvalidation.IsDNS1123Label(c.Name) {
					errs = append(errs, fmt.Errorf("%s %q: %s", path, c.Name, msg))
				}
			}
			names[c.Name] = true
		}
	}
	if len(errs) == 0 {
		return nil
	}
	msgs := make([]string, len(errs))
	for i, err := range errs {
		msgs[i] = err.Error()
	}
	return fmt.Errorf("invalid pod: %s", strings.Join(msgs, "; "))
}
