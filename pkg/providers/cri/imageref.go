package cri

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/flowcontrol"
	crierrors "k8s.io/cri-api/pkg/errors"
	"k8s.io/utils/clock"
)

// Reasons a container waits for its image, as the kubelet reports them;
// errors.Is finds them in the errors of this file.
var (
	errInvalidImageName = errors.New("InvalidImageName")
	errImageNeverPull   = errors.New("ErrImageNeverPull")
	errImagePull        = errors.New("ErrImagePull")
	errImagePullBackOff = errors.New("ImagePullBackOff")
)

// Image pull back-off, as the kubelet's: 10s after a failed pull, doubling
// up to 5 minutes.
const (
	imageBackOffInitial = 10 * time.Second
	imageBackOffMax     = 5 * time.Minute
)

// Docker Hub, where images without a registry come from.
const (
	dockerHubDomain       = "docker.io"
	dockerHubLegacyDomain = "index.docker.io"
	dockerHubLibrary      = "library/"
	maxRepositoryPathLen  = 255
)

// The grammar of image references (the OCI distribution reference
// grammar): a name of an optional registry host and slash-separated path
// components, an optional tag and an optional digest.
var (
	refPathComponent = `[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*`
	refHostLabel     = `(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])`
	refDomain        = `(?:` + refHostLabel + `(?:\.` + refHostLabel + `)*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?`
	refTag           = `[\w][\w.-]{0,127}`
	refDigest        = `[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}`
	referenceRE      = regexp.MustCompile(`^` + refDomain + `/(` + refPathComponent + `(?:/` + refPathComponent + `)*)` +
		`(?::(` + refTag + `))?(?:@(` + refDigest + `))?$`)
	imageIDRE = regexp.MustCompile(`^[a-f0-9]{64}$`)
)

// digestHexLen are the digest algorithms images use, by hex length.
var digestHexLen = map[string]int{"sha256": 64, "sha384": 96, "sha512": 128}

// imageRef is an image reference in its normalized form: images without a
// registry are on docker.io, official ones under library/.
type imageRef struct {
	Domain string // docker.io, registry.k8s.io, localhost:5000
	Path   string // library/busybox
	Tag    string // "" when none
	Digest string // sha256:…, "" when none
}

// Name is the repository: registry and path.
func (r imageRef) Name() string { return r.Domain + "/" + r.Path }

// String is the whole normalized reference.
func (r imageRef) String() string {
	s := r.Name()
	if r.Tag != "" {
		s += ":" + r.Tag
	}
	if r.Digest != "" {
		s += "@" + r.Digest
	}
	return s
}

// parseImageRef parses and normalizes an image reference as container
// runtimes (and the kubelet) do: "busybox" is docker.io/library/busybox,
// "index.docker.io/x/y" is docker.io/x/y. Errors say what is wrong the way
// the reference library the kubelet uses says it.
func parseImageRef(s string) (imageRef, error) {
	if imageIDRE.MatchString(s) {
		return imageRef{}, fmt.Errorf("invalid repository name (%s), cannot specify 64-byte hexadecimal strings", s)
	}
	domain, rest := splitRegistry(s)
	remote := rest
	if i := strings.IndexByte(rest, ':'); i >= 0 {
		remote = rest[:i]
	}
	if strings.ToLower(remote) != remote {
		return imageRef{}, fmt.Errorf("invalid reference format: repository name (%s) must be lowercase", remote)
	}
	full := domain + "/" + rest
	m := referenceRE.FindStringSubmatch(full)
	if m == nil {
		switch {
		case s == "":
			return imageRef{}, errors.New("repository name must have at least one component")
		case referenceRE.MatchString(strings.ToLower(full)):
			return imageRef{}, errors.New("repository name must be lowercase")
		}
		return imageRef{}, errors.New("invalid reference format")
	}
	ref := imageRef{Domain: domain, Path: m[1], Tag: m[2], Digest: m[3]}
	if len(ref.Path) > maxRepositoryPathLen {
		return imageRef{}, fmt.Errorf("repository name must not be more than %d characters", maxRepositoryPathLen)
	}
	if ref.Digest != "" {
		algorithm, hex, _ := strings.Cut(ref.Digest, ":")
		n, ok := digestHexLen[algorithm]
		switch {
		case !ok:
			return imageRef{}, errors.New("unsupported digest algorithm")
		case len(hex) != n:
			return imageRef{}, errors.New("invalid checksum digest length")
		case strings.ToLower(hex) != hex:
			return imageRef{}, errors.New("invalid checksum digest format")
		}
	}
	return ref, nil
}

// splitRegistry splits a reference into its registry and the rest: the
// first path element is a registry when it is localhost, has a '.' or a
// ':', or has an upper-case letter; otherwise the image is on Docker Hub.
func splitRegistry(s string) (domain, rest string) {
	first, after, found := strings.Cut(s, "/")
	switch {
	case !found:
		return dockerHubDomain, dockerHubLibrary + s
	case first == dockerHubLegacyDomain:
		domain, rest = dockerHubDomain, after
	case first == "localhost", strings.ContainsAny(first, ".:"), strings.ToLower(first) != first:
		domain, rest = first, after
	default:
		domain, rest = dockerHubDomain, s
	}
	if domain == dockerHubDomain && !strings.Contains(rest, "/") {
		rest = dockerHubLibrary + rest
	}
	return domain, rest
}

// imageError is why a container cannot get its image, as its waiting
// state shows it: a reason (errors.Is finds it) and the kubelet's message,
// which is all Error returns.
type imageError struct {
	reason  error
	message string
	cause   error
}

func (e *imageError) Error() string { return e.message }

func (e *imageError) Is(target error) bool { return target == e.reason }

func (e *imageError) Unwrap() error { return e.cause }

// Reason is the container's waiting reason: InvalidImageName,
// ErrImageNeverPull, ErrImagePull, ImagePullBackOff, RegistryUnavailable
// or SignatureValidationFailed.
func (e *imageError) Reason() string { return e.reason.Error() }

// invalidImageName is the error of a reference that cannot be parsed.
func invalidImageName(image string, err error) error {
	return &imageError{
		reason:  errInvalidImageName,
		message: fmt.Sprintf("Failed to apply default image tag %q: couldn't parse image name %q: %v", image, image, err),
		cause:   err,
	}
}

// applyDefaultImageTag adds the tag "latest" to an image reference that has
// neither tag nor digest, and keeps it as written otherwise, as the kubelet
// passes it to the runtime (which normalizes it). An invalid reference is
// an imageError with reason InvalidImageName.
func applyDefaultImageTag(image string) (string, error) {
	ref, err := parseImageRef(image)
	if err != nil {
		return "", invalidImageName(image, err)
	}
	if ref.Tag == "" && ref.Digest == "" {
		return image + ":latest", nil
	}
	return image, nil
}

// normalizeImage is the fully qualified form of an image reference, with
// the tag "latest" when it has neither tag nor digest:
// busybox → docker.io/library/busybox:latest.
func normalizeImage(image string) (string, error) {
	ref, err := parseImageRef(image)
	if err != nil {
		return "", invalidImageName(image, err)
	}
	if ref.Tag == "" && ref.Digest == "" {
		ref.Tag = "latest"
	}
	return ref.String(), nil
}

// pullPolicy is the pull policy of image (a container's image or an image
// volume's reference) as policy sets it, defaulted as the API server does
// when unset: Always for an image tagged "latest" or not tagged at all,
// IfNotPresent otherwise.
func pullPolicy(image string, policy corev1.PullPolicy) corev1.PullPolicy {
	if policy != "" {
		return policy
	}
	ref, err := parseImageRef(image)
	if err == nil && (ref.Tag == "latest" || ref.Tag == "" && ref.Digest == "") {
		return corev1.PullAlways
	}
	return corev1.PullIfNotPresent
}

// shouldPull says whether to pull image under policy (as pullPolicy gives
// it) when the runtime has it (present) or not: always with Always, when
// absent with IfNotPresent, never with Never, where an absent image is an
// imageError with reason ErrImageNeverPull.
func shouldPull(image string, policy corev1.PullPolicy, present bool) (bool, error) {
	switch policy {
	case corev1.PullAlways:
		return true, nil
	case corev1.PullNever:
		if !present {
			return false, &imageError{
				reason:  errImageNeverPull,
				message: fmt.Sprintf("Container image %q is not present with pull policy of Never", image),
			}
		}
		return false, nil
	}
	return !present, nil
}

// pullError classifies an error of the runtime's PullImage as the kubelet
// does: an imageError with reason RegistryUnavailable, for a registry that
// cannot be reached, SignatureValidationFailed, for a signature that does
// not verify, or ErrImagePull, for any other failure.
func pullError(image string, err error) error {
	msg := err.Error()
	for _, known := range []struct {
		reason error
		what   string
	}{
		{crierrors.ErrRegistryUnavailable, "the registry is unavailable"},
		{crierrors.ErrSignatureValidationFailed, "the signature validation failed"},
	} {
		if rest, ok := strings.CutPrefix(msg, known.reason.Error()); ok {
			return &imageError{
				reason:  known.reason,
				message: fmt.Sprintf("image pull failed for %s because %s%s", image, known.what, rest),
				cause:   err,
			}
		}
	}
	return &imageError{reason: errImagePull, message: msg, cause: err}
}

// pullBackoff delays pulls of an image for a pod after failed ones, as the
// kubelet's image back-off: 10s, doubling up to 5 minutes, forgotten after
// twice that without a failure. It is safe for concurrent use.
type pullBackoff struct {
	backoff *flowcontrol.Backoff
	mu      sync.Mutex
	lastErr map[string]string // the failure each back-off repeats
}

// newPullBackoff makes an empty pull back-off on clk.
func newPullBackoff(clk clock.Clock) *pullBackoff {
	return &pullBackoff{
		backoff: flowcontrol.NewFakeBackOff(imageBackOffInitial, imageBackOffMax, clk),
		lastErr: map[string]string{},
	}
}

func pullBackoffKey(podUID types.UID, image string) string {
	return string(podUID) + "_" + image
}

// check says whether the pod may pull image now: nil, or an imageError
// with reason ImagePullBackOff and the kubelet's message, which repeats
// the failure that started the back-off.
func (b *pullBackoff) check(podUID types.UID, image string) error {
	key := pullBackoffKey(podUID, image)
	if !b.backoff.IsInBackOffSinceUpdate(key, b.backoff.Clock.Now()) {
		return nil
	}
	msg := fmt.Sprintf("Back-off pulling image %q", image)
	b.mu.Lock()
	last := b.lastErr[key]
	b.mu.Unlock()
	if last != "" {
		msg += ": " + last
	}
	return &imageError{reason: errImagePullBackOff, message: msg}
}

// failed records a failed pull of image for the pod (err as pullError
// gives it), which starts or lengthens its back-off.
func (b *pullBackoff) failed(podUID types.UID, image string, err error) {
	key := pullBackoffKey(podUID, image)
	b.backoff.Next(key, b.backoff.Clock.Now())
	last := err.Error()
	var ie *imageError
	if errors.As(err, &ie) {
		last = ie.Reason() + ": " + ie.message
	}
	b.mu.Lock()
	b.lastErr[key] = last
	b.mu.Unlock()
}

// succeeded records a successful pull: it drops back-offs that have not
// been extended for long, as the kubelet does after every pull.
func (b *pullBackoff) succeeded(podUID types.UID, image string) {
	b.backoff.GC()
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.lastErr, pullBackoffKey(podUID, image))
	for key := range b.lastErr {
		if b.backoff.Get(key) == 0 {
			delete(b.lastErr, key)
		}
	}
}
