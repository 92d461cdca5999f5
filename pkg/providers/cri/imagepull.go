package cri

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/lifecycle"
)

// imageManager gets containers their images, and the images of the image
// volumes they mount, as the kubelet's image manager does: the pull policy
// decides, the pod's imagePullSecrets authenticate, failures back off per
// pod and image, and every step is an Event.
type imageManager struct {
	conn     *connection
	secret   func(ctx context.Context, namespace, name string) (*corev1.Secret, error)
	recorder record.EventRecorder
	clock    clock.Clock
	backoff  *pullBackoff
}

func newImageManager(conn *connection, secret func(ctx context.Context, namespace, name string) (*corev1.Secret, error),
	recorder record.EventRecorder, clk clock.Clock) *imageManager {
	return &imageManager{conn: conn, secret: secret, recorder: recorder, clock: clk, backoff: newPullBackoff(clk)}
}

// pulledImage is an image the runtime has: its ID, and the user it runs
// as when it names one.
type pulledImage struct {
	ref      string
	uid      *int64
	username string
}

// How soon a container whose image could not be pulled looks again: at
// once after a failure (to show the back-off), then while it backs off.
const (
	retryAfterPullFailure = time.Second
	retryDuringBackOff    = 2 * time.Second
)

// ensure returns the image a pod names (a container's image or an image
// volume's reference, as the pod spells it), pulled if policy (as
// pullPolicy gives it) says so. A container that cannot have it waits with
// the kubelet's reason (InvalidImageName, ErrImageNeverPull, ErrImagePull,
// ImagePullBackOff).
func (m *imageManager) ensure(ctx context.Context, pod *corev1.Pod, named string, policy corev1.PullPolicy, sbCfg *runtimeapi.PodSandboxConfig) (pulledImage, error) {
	image, err := applyDefaultImageTag(named)
	if err != nil {
		m.recorder.Eventf(pod, corev1.EventTypeWarning, "InspectFailed", "%v", err)
		return pulledImage{}, imageWait(err, 0)
	}
	_, is, err := m.conn.services(ctx)
	if err != nil {
		return pulledImage{}, &lifecycle.WaitError{Reason: "ErrImagePull", Message: err.Error(), Retry: retryDuringBackOff}
	}
	spec := &runtimeapi.ImageSpec{Image: image, UserSpecifiedImage: named}
	status, err := is.ImageStatus(ctx, spec, false)
	if err != nil {
		m.recorder.Eventf(pod, corev1.EventTypeWarning, "InspectFailed", "Failed to inspect image %q: %v", image, err)
		return pulledImage{}, &lifecycle.WaitError{Reason: "ImageInspectError", Message: err.Error(), Retry: retryDuringBackOff}
	}
	present := status.GetImage() != nil
	pull, err := shouldPull(image, policy, present)
	if err != nil {
		m.recorder.Eventf(pod, corev1.EventTypeWarning, "ErrImageNeverPull", "%v", err)
		return pulledImage{}, imageWait(err, 0)
	}
	if !pull {
		m.recorder.Eventf(pod, corev1.EventTypeNormal, "Pulled", "Container image %q already present on machine", named)
		return imageOf(status.GetImage()), nil
	}
	if err := m.backoff.check(pod.UID, image); err != nil {
		m.recorder.Eventf(pod, corev1.EventTypeNormal, "BackOff", "Back-off pulling image %q", named)
		return pulledImage{}, imageWait(err, retryDuringBackOff)
	}
	auths, err := m.auths(ctx, pod, image)
	if err != nil {
		return pulledImage{}, &lifecycle.WaitError{Reason: "ErrImagePull", Message: err.Error(), Retry: retryAfterPullFailure, Warn: true}
	}
	m.recorder.Eventf(pod, corev1.EventTypeNormal, "Pulling", "Pulling image %q", named)
	start := m.clock.Now()
	var ref string
	for _, auth := range auths {
		if ref, err = is.PullImage(ctx, spec, auth, sbCfg); err == nil {
			break
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			return pulledImage{}, ctx.Err()
		}
		perr := pullError(image, err)
		m.backoff.failed(pod.UID, image, perr)
		m.recorder.Eventf(pod, corev1.EventTypeWarning, "Failed", "Failed to pull image %q: %v", named, perr)
		return pulledImage{}, imageWait(perr, retryAfterPullFailure)
	}
	m.backoff.succeeded(pod.UID, image)
	m.recorder.Eventf(pod, corev1.EventTypeNormal, "Pulled", "Successfully pulled image %q in %s", named, m.clock.Since(start).Round(time.Millisecond))
	pulled := pulledImage{ref: ref}
	if st, err := is.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: ref}, false); err == nil && st.GetImage() != nil {
		pulled = imageOf(st.GetImage())
		pulled.ref = ref
	}
	return pulled, nil
}

// auths are the credentials to try for image, in order: those of the
// pod's image pull secrets that match its registry, then none. A secret
// that is missing is skipped with a Warning Event, as the kubelet does.
func (m *imageManager) auths(ctx context.Context, pod *corev1.Pod, image string) ([]*runtimeapi.AuthConfig, error) {
	var secrets []corev1.Secret
	for _, ref := range pod.Spec.ImagePullSecrets {
		s, err := m.secret(ctx, pod.Namespace, ref.Name)
		switch {
		case apierrors.IsNotFound(err):
			m.recorder.Eventf(pod, corev1.EventTypeWarning, "FailedToRetrieveImagePullSecret",
				"Unable to retrieve some image pull secrets (%s); attempting to pull the image may not succeed.", ref.Name)
			continue
		case err != nil:
			return nil, fmt.Errorf("image pull secret %s/%s: %w", pod.Namespace, ref.Name, err)
		}
		secrets = append(secrets, *s)
	}
	k, err := keyringFromSecrets(secrets)
	if err != nil {
		return nil, err
	}
	return append(k.lookup(image), nil), nil
}

// imageOf is what the container needs of an image the runtime has.
func imageOf(img *runtimeapi.Image) pulledImage {
	p := pulledImage{ref: img.Id, username: img.Username}
	if img.Uid != nil {
		uid := img.Uid.Value
		p.uid = &uid
	}
	return p
}

// imageWait is the wait of a container whose image it cannot have.
func imageWait(err error, retry time.Duration) error {
	var ie *imageError
	if errors.As(err, &ie) {
		return &lifecycle.WaitError{Reason: ie.Reason(), Message: ie.Error(), Retry: retry}
	}
	return &lifecycle.WaitError{Reason: "ErrImagePull", Message: err.Error(), Retry: retry}
}
