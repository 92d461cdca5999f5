package hostvolume

import (
	"context"
	"fmt"
	"os"
	"path"
	"reflect"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	envvars "github.com/nodelet/nodelet/pkg/lifecycle/env"
)

// defaultFileMode is the mode of projected files when the volume does not
// say otherwise.
const defaultFileMode = 0o644

// file is one file of an API-derived volume.
type file struct {
	data []byte
	mode os.FileMode
}

// objectCache reads each ConfigMap and Secret at most once per SetUp or
// refresh round, so that volumes sharing a source cost one request.
type objectCache struct {
	client     kubernetes.Interface
	configMaps map[string]*corev1.ConfigMap
	secrets    map[string]*corev1.Secret
	errs       map[string]error
}

func newObjectCache(client kubernetes.Interface) *objectCache {
	return &objectCache{
		client:     client,
		configMaps: map[string]*corev1.ConfigMap{},
		secrets:    map[string]*corev1.Secret{},
		errs:       map[string]error{},
	}
}

func (c *objectCache) configMap(ctx context.Context, ns, name string) (*corev1.ConfigMap, error) {
	key := "configmap/" + ns + "/" + name
	if err, ok := c.errs[key]; ok {
		return nil, err
	}
	if cm, ok := c.configMaps[key]; ok {
		return cm, nil
	}
	cm, err := c.client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		c.errs[key] = err
		return nil, err
	}
	c.configMaps[key] = cm
	return cm, nil
}

func (c *objectCache) secret(ctx context.Context, ns, name string) (*corev1.Secret, error) {
	key := "secret/" + ns + "/" + name
	if err, ok := c.errs[key]; ok {
		return nil, err
	}
	if s, ok := c.secrets[key]; ok {
		return s, nil
	}
	s, err := c.client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		c.errs[key] = err
		return nil, err
	}
	c.secrets[key] = s
	return s, nil
}

// payload computes the files of a configMap, secret, downwardAPI or
// projected volume, keyed by their path in the volume.
func (m *Manager) payload(ctx context.Context, st *podState, objs *objectCache, pod *corev1.Pod, v *corev1.Volume) (map[string]file, error) {
	files := map[string]file{}
	switch src := &v.VolumeSource; {
	case src.ConfigMap != nil:
		return files, configMapFiles(ctx, objs, pod.Namespace, src.ConfigMap.Name, src.ConfigMap.Items,
			src.ConfigMap.Optional, modeOr(src.ConfigMap.DefaultMode), files)
	case src.Secret != nil:
		return files, secretFiles(ctx, objs, pod.Namespace, src.Secret.SecretName, src.Secret.Items,
			src.Secret.Optional, modeOr(src.Secret.DefaultMode), files)
	case src.DownwardAPI != nil:
		return files, m.downwardAPIFiles(pod, src.DownwardAPI.Items, modeOr(src.DownwardAPI.DefaultMode), files)
	case src.Projected != nil:
		mode := modeOr(src.Projected.DefaultMode)
		for i := range src.Projected.Sources {
			if err := m.projection(ctx, st, objs, pod, v.Name, &src.Projected.Sources[i], mode, files); err != nil {
				return nil, err
			}
		}
		return files, nil
	}
	return nil, fmt.Errorf("type %s has no contents", sourceType(&v.VolumeSource))
}

func (m *Manager) projection(ctx context.Context, st *podState, objs *objectCache, pod *corev1.Pod, volume string, p *corev1.VolumeProjection, mode os.FileMode, files map[string]file) error {
	switch {
	case p.ConfigMap != nil:
		return configMapFiles(ctx, objs, pod.Namespace, p.ConfigMap.Name, p.ConfigMap.Items, p.ConfigMap.Optional, mode, files)
	case p.Secret != nil:
		return secretFiles(ctx, objs, pod.Namespace, p.Secret.Name, p.Secret.Items, p.Secret.Optional, mode, files)
	case p.DownwardAPI != nil:
		return m.downwardAPIFiles(pod, p.DownwardAPI.Items, mode, files)
	case p.ServiceAccountToken != nil:
		if err := checkPath(p.ServiceAccountToken.Path); err != nil {
			return err
		}
		tok, err := m.token(ctx, st, pod, volume, p.ServiceAccountToken)
		if err != nil {
			return err
		}
		files[p.ServiceAccountToken.Path] = file{data: []byte(tok), mode: mode}
		return nil
	case p.ClusterTrustBundle != nil:
		return fmt.Errorf("clusterTrustBundle projections are not supported by the process provider")
	case p.PodCertificate != nil:
		return fmt.Errorf("podCertificate projections are not supported by the process provider")
	}
	return fmt.Errorf("projection names no source")
}

func modeOr(m *int32) os.FileMode {
	if m == nil {
		return defaultFileMode
	}
	return os.FileMode(*m) & os.ModePerm
}

// keyFiles maps the keys of a ConfigMap or Secret to files: every key under
// its own name, or only the listed items under their paths and modes.
func keyFiles(kind, ns, name string, data map[string][]byte, items []corev1.KeyToPath, optional bool, mode os.FileMode, files map[string]file) error {
	if len(items) == 0 {
		for k, v := range data {
			if err := checkPath(k); err != nil {
				return fmt.Errorf("%s %s/%s: %w", kind, ns, name, err)
			}
			files[k] = file{data: v, mode: mode}
		}
		return nil
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			if optional {
				continue
			}
			return fmt.Errorf("%s %s/%s has no key %q", kind, ns, name, it.Key)
		}
		if err := checkPath(it.Path); err != nil {
			return fmt.Errorf("%s %s/%s: %w", kind, ns, name, err)
		}
		f := file{data: v, mode: mode}
		if it.Mode != nil {
			f.mode = os.FileMode(*it.Mode) & os.ModePerm
		}
		files[it.Path] = f
	}
	return nil
}

func configMapFiles(ctx context.Context, objs *objectCache, ns, name string, items []corev1.KeyToPath, optional *bool, mode os.FileMode, files map[string]file) error {
	opt := optional != nil && *optional
	cm, err := objs.configMap(ctx, ns, name)
	if err != nil {
		if apierrors.IsNotFound(err) && opt {
			return nil
		}
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("configmap %s/%s not found", ns, name)
		}
		return fmt.Errorf("configmap %s/%s: %w", ns, name, err)
	}
	data := make(map[string][]byte, len(cm.Data)+len(cm.BinaryData))
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		data[k] = v
	}
	return keyFiles("configmap", ns, name, data, items, opt, mode, files)
}

func secretFiles(ctx context.Context, objs *objectCache, ns, name string, items []corev1.KeyToPath, optional *bool, mode os.FileMode, files map[string]file) error {
	opt := optional != nil && *optional
	s, err := objs.secret(ctx, ns, name)
	if err != nil {
		if apierrors.IsNotFound(err) && opt {
			return nil
		}
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("secret %s/%s not found", ns, name)
		}
		return fmt.Errorf("secret %s/%s: %w", ns, name, err)
	}
	return keyFiles("secret", ns, name, s.Data, items, opt, mode, files)
}

// downwardAPIFiles renders pod metadata and container resources. A limit
// the container does not set reads as the node's allocatable.
func (m *Manager) downwardAPIFiles(pod *corev1.Pod, items []corev1.DownwardAPIVolumeFile, mode os.FileMode, files map[string]file) error {
	var allocatable corev1.ResourceList
	if m.opts.Allocatable != nil {
		allocatable = m.opts.Allocatable()
	}
	for _, it := range items {
		if err := checkPath(it.Path); err != nil {
			return err
		}
		var (
			val string
			err error
		)
		switch {
		case it.FieldRef != nil:
			val, err = envvars.MetadataField(pod, it.FieldRef.FieldPath)
		case it.ResourceFieldRef != nil:
			c := envvars.FindContainer(pod, it.ResourceFieldRef.ContainerName)
			if c == nil {
				return fmt.Errorf("downward API file %q: no container %q in pod", it.Path, it.ResourceFieldRef.ContainerName)
			}
			val, err = envvars.ResourceValue(c, it.ResourceFieldRef, allocatable)
		default:
			err = fmt.Errorf("no fieldRef or resourceFieldRef")
		}
		if err != nil {
			return fmt.Errorf("downward API file %q: %w", it.Path, err)
		}
		f := file{data: []byte(val), mode: mode}
		if it.Mode != nil {
			f.mode = os.FileMode(*it.Mode) & os.ModePerm
		}
		files[it.Path] = f
	}
	return nil
}

// checkPath accepts a relative path inside a volume: not absolute, no ".."
// element, not starting with ".." once cleaned (names that begin so are the
// atomic writer's own: "./..x" would be written as "..x" and removed).
func checkPath(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("empty file path")
	case path.IsAbs(p):
		return fmt.Errorf("file path %q is absolute", p)
	case len(p) > 4096:
		return fmt.Errorf("file path %q is too long", p[:64]+"...")
	case strings.HasPrefix(p, ".."):
		return fmt.Errorf("file path %q starts with '..'", p)
	}
	for _, el := range strings.Split(p, "/") {
		if el == ".." {
			return fmt.Errorf("file path %q contains '..'", p)
		}
	}
	if clean := path.Clean(p); strings.HasPrefix(clean, "..") {
		return fmt.Errorf("file path %q is %q, which starts with '..'", p, clean)
	}
	return nil
}

// sourceType returns the API name of the volume source that is set, such as
// "persistentVolumeClaim".
func sourceType(src *corev1.VolumeSource) string {
	rv := reflect.ValueOf(src).Elem()
	rt := rv.Type()
	for i := 0; i < rt.NumField(); i++ {
		if f := rv.Field(i); f.Kind() == reflect.Pointer && !f.IsNil() {
			name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
			return name
		}
	}
	return "(none)"
}
