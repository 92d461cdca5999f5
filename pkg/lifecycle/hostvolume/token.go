package hostvolume

import (
	"context"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

const (
	// defaultTokenSeconds is the token lifetime asked for when the
	// projection does not say.
	defaultTokenSeconds = 3600
	// maxTokenAge renews a token after a day whatever its lifetime.
	maxTokenAge = 24 * time.Hour
)

// token is a service account token issued for one projection of one pod.
type token struct {
	value   string
	issued  time.Time // by our clock, when the request was made
	expires time.Time
}

// due reports whether the token should be renewed: past 80% of its lifetime
// or older than a day, as the kubelet renews.
func (t *token) due(now time.Time) bool {
	life := t.expires.Sub(t.issued)
	return !now.Before(t.issued.Add(life*8/10)) || !now.Before(t.issued.Add(maxTokenAge))
}

// token returns the projection's token, requesting a new one through the
// TokenRequest API when there is none or it is due. A failed renewal keeps
// a token that has not expired yet.
func (m *Manager) token(ctx context.Context, st *podState, pod *corev1.Pod, volume string, p *corev1.ServiceAccountTokenProjection) (string, error) {
	key := volume + "/" + p.Path
	now := m.opts.Clock.Now()
	cur := st.tokens[key]
	if cur != nil && !cur.due(now) {
		return cur.value, nil
	}

	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	seconds := int64(defaultTokenSeconds)
	if p.ExpirationSeconds != nil && *p.ExpirationSeconds > 0 {
		seconds = *p.ExpirationSeconds
	}
	req := &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: &seconds,
			BoundObjectRef: &authenticationv1.BoundObjectReference{
				APIVersion: "v1",
				Kind:       "Pod",
				Name:       pod.Name,
				UID:        pod.UID,
			},
		},
	}
	if p.Audience != "" {
		req.Spec.Audiences = []string{p.Audience}
	}
	resp, err := m.client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, req, metav1.CreateOptions{})
	if err == nil && (resp == nil || resp.Status.Token == "") {
		err = fmt.Errorf("empty token in response")
	}
	if err != nil {
		err = fmt.Errorf("request token for service account %s/%s: %w", pod.Namespace, sa, err)
		if cur != nil && now.Before(cur.expires) {
			klog.FromContext(ctx).Error(err, "Token renewal failed, keeping the current token", "pod", klog.KObj(pod), "volume", volume, "expires", cur.expires)
			return cur.value, nil
		}
		return "", err
	}

	// The server may change the lifetime; trust the one it answers with,
	// measured on our own clock so that clock skew does not matter.
	if s := resp.Spec.ExpirationSeconds; s != nil && *s > 0 {
		seconds = *s
	}
	t := &token{value: resp.Status.Token, issued: now, expires: now.Add(time.Duration(seconds) * time.Second)}
	st.tokens[key] = t
	return t.value, nil
}
