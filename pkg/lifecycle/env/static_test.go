package env

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/pkg/podrules"
)

// unreachable is a Getter whose API server does not answer: every call
// waits for its context.
type unreachable struct{}

func (unreachable) ConfigMap(ctx context.Context, _, _ string) (*corev1.ConfigMap, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (unreachable) Secret(ctx context.Context, _, _ string) (*corev1.Secret, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (unreachable) Services(ctx context.Context, _ string) ([]corev1.Service, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// A static pod's container gets its environment without the API server,
// with no service variables; an API pod's waits for the services.
func TestStaticPodEnvironmentWithoutTheAPI(t *testing.T) {
	c := &corev1.Container{Name: "c", Env: []corev1.EnvVar{{Name: "A", Value: "b"}}}
	static := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns",
		Annotations: map[string]string{podrules.ConfigSourceAnnotation: "file"}}}
	got, err := Environment(context.Background(), unreachable{}, static, c, NodeInfo{NodeName: "n", HostIP: "10.0.0.1"})
	if err != nil || len(got) != 1 || got[0] != "A=b" {
		t.Errorf("static pod: %v, %v; want [A=b]", got, err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*staticServiceWait)
	defer cancel()
	api := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}}
	start := time.Now()
	if _, err := Environment(ctx, unreachable{}, api, c, NodeInfo{NodeName: "n", HostIP: "10.0.0.1"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("API pod: %v after %s, want it to wait for the services until its context ends", err, time.Since(start))
	}
}
