package env

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
)

// Getter reads the objects a container environment is built from. Errors for
// missing objects must satisfy apierrors.IsNotFound so that optional sources
// can be skipped.
type Getter interface {
	ConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error)
	Secret(ctx context.Context, namespace, name string) (*corev1.Secret, error)
	// Services returns the services of namespace and, when it exists, the
	// "kubernetes" service of the default namespace.
	Services(ctx context.Context, namespace string) ([]corev1.Service, error)
}

// NewGetter returns a Getter that reads straight from the API server.
func NewGetter(client kubernetes.Interface) Getter {
	return clientGetter{client: client}
}

type clientGetter struct {
	client kubernetes.Interface
}

func (g clientGetter) ConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error) {
	return g.client.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
}

func (g clientGetter) Secret(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
	return g.client.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
}

func (g clientGetter) Services(ctx context.Context, namespace string) ([]corev1.Service, error) {
	list, err := g.client.CoreV1().Services(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list services in %s: %w", namespace, err)
	}
	services := list.Items
	if namespace == metav1.NamespaceDefault {
		return services, nil
	}
	// A list by name rather than a get, so that "list services" is the
	// only permission service links need.
	masters, err := g.client.CoreV1().Services(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", masterService).String(),
	})
	if err != nil {
		return nil, fmt.Errorf("list services in %s: %w", metav1.NamespaceDefault, err)
	}
	for _, s := range masters.Items {
		if s.Name == masterService {
			services = append(services, s)
		}
	}
	return services, nil
}
