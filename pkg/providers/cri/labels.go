package cri

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/pkg/podrules"
)

// Labels and annotations on the runtime's sandboxes and containers. The
// io.kubernetes.* keys are the kubelet's, so crictl and other tools show
// nodelet's pods as they show the kubelet's; the nodelet.io/* keys are
// nodelet's own. Labels identify (and are filtered on); annotations carry
// what a restarted agent needs to rebuild the status and to stop a container
// whose pod is gone, and that the runtime does not report.
const (
	labelPodName       = "io.kubernetes.pod.name"
	labelPodNamespace  = "io.kubernetes.pod.namespace"
	labelPodUID        = "io.kubernetes.pod.uid"
	labelContainerName = "io.kubernetes.container.name"
	// labelNode names the node whose agent owns the object, so that agents
	// (or several nodes of one agent) sharing a runtime never take each
	// other's pods.
	labelNode = "nodelet.io/node"

	annotationContainerHash            = "io.kubernetes.container.hash"
	annotationRestartCount             = "io.kubernetes.container.restartCount"
	annotationTerminationMessagePath   = "io.kubernetes.container.terminationMessagePath"
	annotationTerminationMessagePolicy = "io.kubernetes.container.terminationMessagePolicy"
	annotationPreStopHandler           = "io.kubernetes.container.preStopHandler"
	annotationContainerPorts           = "io.kubernetes.container.ports"
	annotationTerminationGracePeriod   = "io.kubernetes.pod.terminationGracePeriod"
	annotationDeletionGracePeriod      = "io.kubernetes.pod.deletionGracePeriod"
	// annotationContainerType says which list of the pod spec the container
	// comes from (see containerType).
	annotationContainerType = "nodelet.io/container-type"
	// annotationSpecImage is the image as the pod spec names it; the runtime
	// reports the image it resolved, which the pod status must not show.
	annotationSpecImage = "nodelet.io/image"
	// annotationTerminationMessageFile is the host file mounted at the
	// container's terminationMessagePath, read once the container exits.
	annotationTerminationMessageFile = "nodelet.io/termination-message-file"
)

// containerType is the list of the pod spec a container comes from.
type containerType string

const (
	containerTypeInit      containerType = "init"
	containerTypeSidecar   containerType = "sidecar" // an init container with restartPolicy Always
	containerTypeRegular   containerType = "regular"
	containerTypeEphemeral containerType = "ephemeral"
)

// containerTypeOf finds the container named name in the pod's spec and says
// which kind it is; false if the pod has no such container.
func containerTypeOf(pod *corev1.Pod, name string) (containerType, bool) {
	for _, c := range pod.Spec.InitContainers {
		if c.Name == name {
			if podrules.IsSidecar(&c) {
				return containerTypeSidecar, true
			}
			return containerTypeInit, true
		}
	}
	for _, c := range pod.Spec.Containers {
		if c.Name == name {
			return containerTypeRegular, true
		}
	}
	for _, c := range pod.Spec.EphemeralContainers {
		if c.Name == name {
			return containerTypeEphemeral, true
		}
	}
	return "", false
}

// nodeSelector is the label selector of every sandbox and container that
// the agent of node owns, for ListPodSandbox and ListContainers filters.
func nodeSelector(node string) map[string]string {
	return map[string]string{labelNode: node}
}

// podSelector is the label selector of the sandboxes and containers of one
// pod of node.
func podSelector(node string, uid types.UID) map[string]string {
	return map[string]string{labelNode: node, labelPodUID: string(uid)}
}

// sandboxLabels are the labels of a pod's sandbox: the pod's own labels,
// then the pod's identity and the owning node, which win over pod labels
// with the same keys.
func sandboxLabels(pod *corev1.Pod, node string) map[string]string {
	labels := make(map[string]string, len(pod.Labels)+4)
	maps.Copy(labels, pod.Labels)
	labels[labelPodName] = pod.Name
	labels[labelPodNamespace] = pod.Namespace
	labels[labelPodUID] = string(pod.UID)
	labels[labelNode] = node
	return labels
}

// sandboxAnnotations are the annotations of a pod's sandbox: a copy of the
// pod's annotations, as the kubelet passes them.
func sandboxAnnotations(pod *corev1.Pod) map[string]string {
	return maps.Clone(pod.Annotations)
}

// containerLabels are the labels of a container: the pod's identity, the
// container's name and the owning node. Pod labels stay on the sandbox.
func containerLabels(pod *corev1.Pod, c *corev1.Container, node string) map[string]string {
	return map[string]string{
		labelPodName:       pod.Name,
		labelPodNamespace:  pod.Namespace,
		labelPodUID:        string(pod.UID),
		labelContainerName: c.Name,
		labelNode:          node,
	}
}

// containerAnnotations are the annotations of a container: what the status
// and a restarted agent need about it (see containerInfo). restartCount is
// the container's attempt; terminationMessageFile is the host file mounted
// at its terminationMessagePath ("" when none is).
func containerAnnotations(pod *corev1.Pod, c *corev1.Container, restartCount uint32, terminationMessageFile string) (map[string]string, error) {
	a := map[string]string{
		annotationContainerHash:            containerHash(c),
		annotationRestartCount:             strconv.FormatUint(uint64(restartCount), 10),
		annotationTerminationMessagePath:   c.TerminationMessagePath,
		annotationTerminationMessagePolicy: string(c.TerminationMessagePolicy),
		annotationSpecImage:                c.Image,
	}
	if t, ok := containerTypeOf(pod, c.Name); ok {
		a[annotationContainerType] = string(t)
	}
	if terminationMessageFile != "" {
		a[annotationTerminationMessageFile] = terminationMessageFile
	}
	if p := pod.Spec.TerminationGracePeriodSeconds; p != nil {
		a[annotationTerminationGracePeriod] = strconv.FormatInt(*p, 10)
	}
	if p := pod.DeletionGracePeriodSeconds; p != nil {
		a[annotationDeletionGracePeriod] = strconv.FormatInt(*p, 10)
	}
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil {
		raw, err := json.Marshal(c.Lifecycle.PreStop)
		if err != nil {
			return nil, fmt.Errorf("encode preStop handler of container %q: %w", c.Name, err)
		}
		a[annotationPreStopHandler] = string(raw)
	}
	if len(c.Ports) > 0 {
		raw, err := json.Marshal(c.Ports)
		if err != nil {
			return nil, fmt.Errorf("encode ports of container %q: %w", c.Name, err)
		}
		a[annotationContainerPorts] = string(raw)
	}
	return a, nil
}

// containerHash identifies the parts of a container's spec that a running
// container cannot follow: a container whose hash differs from its spec's
// must be restarted. Like the kubelet's, it covers the name and the image,
// the only fields of a pod's container that an update can change apart from
// resources, which are resized in place; so it also stays stable when new
// API fields appear.
func containerHash(c *corev1.Container) string {
	h := fnv.New64a()
	h.Write([]byte(c.Name))
	h.Write([]byte{0})
	h.Write([]byte(c.Image))
	return strconv.FormatUint(h.Sum64(), 16)
}

// podRef identifies the pod and node that a sandbox or container belongs
// to, as read back from its labels.
type podRef struct {
	Namespace string
	Name      string
	UID       types.UID
	Node      string
}

// podRefFromLabels reads the pod and node a sandbox or container belongs to
// from its labels; an error names every label that is missing.
func podRefFromLabels(labels map[string]string) (podRef, error) {
	var errs []error
	get := func(key string) string {
		v, ok := labels[key]
		if !ok || v == "" {
			errs = append(errs, fmt.Errorf("label %s missing", key))
		}
		return v
	}
	ref := podRef{
		Namespace: get(labelPodNamespace),
		Name:      get(labelPodName),
		UID:       types.UID(get(labelPodUID)),
		Node:      get(labelNode),
	}
	if len(errs) > 0 {
		return podRef{}, errors.Join(errs...)
	}
	return ref, nil
}

// containerRef identifies a container by its pod and name, as read back
// from its labels.
type containerRef struct {
	Pod  podRef
	Name string
}

// containerRefFromLabels reads the pod, node and container name from a
// container's labels; an error names every label that is missing.
func containerRefFromLabels(labels map[string]string) (containerRef, error) {
	pod, err := podRefFromLabels(labels)
	name := labels[labelContainerName]
	if name == "" {
		err = errors.Join(err, fmt.Errorf("label %s missing", labelContainerName))
	}
	if err != nil {
		return containerRef{}, err
	}
	return containerRef{Pod: pod, Name: name}, nil
}

// containerInfo is what a container's annotations record about it.
type containerInfo struct {
	Type                     containerType // "" when not recorded
	Hash                     string
	RestartCount             uint32
	SpecImage                string
	TerminationMessagePath   string
	TerminationMessagePolicy corev1.TerminationMessagePolicy
	TerminationMessageFile   string
	TerminationGracePeriod   *int64
	DeletionGracePeriod      *int64
	PreStop                  *corev1.LifecycleHandler
	Ports                    []corev1.ContainerPort
}

// containerInfoFromAnnotations reads back what containerAnnotations wrote.
// Missing annotations leave their fields zero (containers created by an
// older agent may lack some); a malformed one leaves its field zero too, and
// the error names every malformed annotation while the other fields are
// still filled in, so that a caller can log it and carry on.
func containerInfoFromAnnotations(a map[string]string) (containerInfo, error) {
	info := containerInfo{
		Type:                     containerType(a[annotationContainerType]),
		Hash:                     a[annotationContainerHash],
		SpecImage:                a[annotationSpecImage],
		TerminationMessagePath:   a[annotationTerminationMessagePath],
		TerminationMessagePolicy: corev1.TerminationMessagePolicy(a[annotationTerminationMessagePolicy]),
		TerminationMessageFile:   a[annotationTerminationMessageFile],
	}
	var errs []error
	bad := func(key string, err error) {
		errs = append(errs, fmt.Errorf("annotation %s: %w", key, err))
	}
	if v, ok := a[annotationRestartCount]; ok {
		if n, err := strconv.ParseUint(v, 10, 32); err != nil {
			bad(annotationRestartCount, err)
		} else {
			info.RestartCount = uint32(n)
		}
	}
	for _, f := range []struct {
		key string
		dst **int64
	}{
		{annotationTerminationGracePeriod, &info.TerminationGracePeriod},
		{annotationDeletionGracePeriod, &info.DeletionGracePeriod},
	} {
		if v, ok := a[f.key]; ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				bad(f.key, err)
				continue
			}
			*f.dst = &n
		}
	}
	if v, ok := a[annotationPreStopHandler]; ok {
		var h corev1.LifecycleHandler
		if err := json.Unmarshal([]byte(v), &h); err != nil {
			bad(annotationPreStopHandler, err)
		} else {
			info.PreStop = &h
		}
	}
	if v, ok := a[annotationContainerPorts]; ok {
		if err := json.Unmarshal([]byte(v), &info.Ports); err != nil {
			bad(annotationContainerPorts, err)
			info.Ports = nil
		}
	}
	return info, errors.Join(errs...)
}
