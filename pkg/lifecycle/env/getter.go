package env

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/nodelet/nodelet/pkg/cachetrim"
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

// NewGetter returns a Getter that reads ConfigMaps and Secrets from the API
// server and Services from a cluster-wide Service informer (as the kubelet
// does), started on first use and kept for the life of the process: a
// burst of pod starts costs the API server no list of services.
func NewGetter(client kubernetes.Interface) Getter {
	return &clientGetter{client: client}
}

type clientGetter struct {
	client kubernetes.Interface

	once     sync.Once
	informer cache.SharedIndexInformer
	services corelisters.ServiceLister
}

func (g *clientGetter) ConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error) {
	return g.client.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
}

func (g *clientGetter) Secret(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
	return g.client.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
}

func (g *clientGetter) Services(ctx context.Context, namespace string) ([]corev1.Service, error) {
	g.once.Do(func() {
		g.informer = coreinformers.NewServiceInformer(g.client, metav1.NamespaceAll, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
		_ = g.informer.SetTransform(cachetrim.Transform) // fails only once started
		g.services = corelisters.NewServiceLister(g.informer.GetIndexer())
		go g.informer.RunWithContext(context.Background())
	})
	if !cache.WaitForCacheSync(ctx.Done(), g.informer.HasSynced) {
		return nil, fmt.Errorf("list services in %s: the service cache did not sync: %w", namespace, ctx.Err())
	}
	list, err := g.services.Services(namespace).List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("list services in %s: %w", namespace, err)
	}
	services := make([]corev1.Service, 0, len(list)+1)
	for _, s := range list {
		services = append(services, *s)
	}
	if namespace == metav1.NamespaceDefault {
		return services, nil
	}
	if master, err := g.services.Services(metav1.NamespaceDefault).Get(masterService); err == nil {
		services = append(services, *master)
	}
	return services, nil
}
