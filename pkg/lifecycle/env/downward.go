package env

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// MetadataField returns the downward API value of a pod metadata field:
// metadata.name, metadata.namespace, metadata.uid, metadata.labels,
// metadata.annotations, and metadata.labels['key'] or
// metadata.annotations['key']. A whole map is rendered as sorted
// key="quoted value" lines, as the downward API volume shows it.
func MetadataField(pod *corev1.Pod, fieldPath string) (string, error) {
	if base, key, ok := splitSubscript(fieldPath); ok {
		switch base {
		case "metadata.labels":
			return pod.Labels[key], nil
		case "metadata.annotations":
			return pod.Annotations[key], nil
		}
		return "", fmt.Errorf("field path %q does not take a subscript", fieldPath)
	}
	switch fieldPath {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "metadata.labels":
		return formatMap(pod.Labels), nil
	case "metadata.annotations":
		return formatMap(pod.Annotations), nil
	}
	return "", fmt.Errorf("unsupported field path %q", fieldPath)
}

// splitSubscript splits "path['key']" into path and key.
func splitSubscript(fieldPath string) (base, key string, ok bool) {
	rest, found := strings.CutSuffix(fieldPath, "']")
	if !found {
		return "", "", false
	}
	base, key, found = strings.Cut(rest, "['")
	if !found || base == "" {
		return "", "", false
	}
	return base, key, true
}

func formatMap(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	lines := make([]string, 0, len(keys))
	for _, k := range keys {
		lines = append(lines, k+"="+strconv.Quote(m[k]))
	}
	return strings.Join(lines, "\n")
}

// ResourceValue returns the downward API value of a container resource
// (limits.cpu, requests.memory, limits.hugepages-2Mi, ...) divided by the
// selector's divisor (default 1) and rounded up. A limit the container does
// not set is taken from allocatable, which may be nil; a missing request is 0.
func ResourceValue(c *corev1.Container, ref *corev1.ResourceFieldSelector, allocatable corev1.ResourceList) (string, error) {
	kind, name, ok := strings.Cut(ref.Resource, ".")
	if !ok || (kind != "limits" && kind != "requests") {
		return "", fmt.Errorf("unsupported resource %q", ref.Resource)
	}
	rn := corev1.ResourceName(name)
	switch {
	case rn == corev1.ResourceCPU, rn == corev1.ResourceMemory, rn == corev1.ResourceEphemeralStorage:
	case strings.HasPrefix(name, corev1.ResourceHugePagesPrefix):
	default:
		return "", fmt.Errorf("unsupported resource %q", ref.Resource)
	}

	var q resource.Quantity
	if kind == "requests" {
		q = c.Resources.Requests[rn]
	} else if v, set := c.Resources.Limits[rn]; set {
		q = v
	} else {
		q = allocatable[rn]
	}

	divisor := ref.Divisor
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	var num, den int64
	if rn == corev1.ResourceCPU {
		num, den = q.MilliValue(), divisor.MilliValue()
	} else {
		num, den = q.Value(), divisor.Value()
	}
	if den <= 0 {
		return "", fmt.Errorf("divisor %s of %s is too small", divisor.String(), ref.Resource)
	}
	return strconv.FormatInt(ceilDiv(num, den), 10), nil
}

func ceilDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a > 0) == (b > 0) {
		q++
	}
	return q
}
