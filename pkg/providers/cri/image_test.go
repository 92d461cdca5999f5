package cri

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	crierrors "k8s.io/cri-api/pkg/errors"
	clocktesting "k8s.io/utils/clock/testing"
)

var (
	hex64 = strings.Repeat("0123456789abcdef", 4)
	dgst  = "sha256:" + hex64
)

func TestParseImageRef(t *testing.T) {
	tests := []struct {
		in   string
		want imageRef
	}{
		{"busybox", imageRef{Domain: "docker.io", Path: "library/busybox"}},
		{"busybox:1.36", imageRef{Domain: "docker.io", Path: "library/busybox", Tag: "1.36"}},
		{"library/busybox", imageRef{Domain: "docker.io", Path: "library/busybox"}},
		{"user/app:v1", imageRef{Domain: "docker.io", Path: "user/app", Tag: "v1"}},
		{"docker.io/busybox", imageRef{Domain: "docker.io", Path: "library/busybox"}},
		{"index.docker.io/user/app", imageRef{Domain: "docker.io", Path: "user/app"}},
		{"registry.k8s.io/pause:3.10", imageRef{Domain: "registry.k8s.io", Path: "pause", Tag: "3.10"}},
		{"localhost/app", imageRef{Domain: "localhost", Path: "app"}},
		{"localhost:5000/a/b__c-d.e:T_1", imageRef{Domain: "localhost:5000", Path: "a/b__c-d.e", Tag: "T_1"}},
		{"127.0.0.1:5000/x", imageRef{Domain: "127.0.0.1:5000", Path: "x"}},
		{"[::1]:5000/x:tag", imageRef{Domain: "[::1]:5000", Path: "x", Tag: "tag"}},
		{"Registry/bar", imageRef{Domain: "Registry", Path: "bar"}},
		{"busybox@" + dgst, imageRef{Domain: "docker.io", Path: "library/busybox", Digest: dgst}},
		{"quay.io/a/b:1.0@" + dgst, imageRef{Domain: "quay.io", Path: "a/b", Tag: "1.0", Digest: dgst}},
	}
	for _, tt := range tests {
		got, err := parseImageRef(tt.in)
		if err != nil {
			t.Errorf("parseImageRef(%q): %v", tt.in, err)
			continue
		}
		if got != tt.want {
			t.Errorf("parseImageRef(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
	}
}

func TestParseImageRefErrors(t *testing.T) {
	tests := []struct{ in, err string }{
		{"", "repository name must have at least one component"},
		{"BusyBox", "invalid reference format: repository name (library/BusyBox) must be lowercase"},
		{"docker.io/library/Busybox:1", "invalid reference format: repository name (library/Busybox) must be lowercase"},
		{"busybox:", "invalid reference format"},
		{"busybox:bad tag", "invalid reference format"},
		{"-busybox", "invalid reference format"},
		{"my_registry:5000/x", "invalid reference format"},
		{"busybox@sha256:abc", "invalid reference format"},
		{"busybox@md5:" + hex64[:32], "unsupported digest algorithm"},
		{"busybox@sha256:" + hex64[:63], "invalid checksum digest length"},
		{"busybox@sha256:" + strings.ToUpper(hex64), "invalid checksum digest format"},
		{hex64, "cannot specify 64-byte hexadecimal strings"},
		{"example.com/" + strings.Repeat("a", 256), "must not be more than 255 characters"},
	}
	for _, tt := range tests {
		_, err := parseImageRef(tt.in)
		if err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("parseImageRef(%q) err = %v, want %q", tt.in, err, tt.err)
		}
	}
}

func TestApplyDefaultImageTagAndNormalize(t *testing.T) {
	tests := []struct{ in, tagged, normalized string }{
		{"busybox", "busybox:latest", "docker.io/library/busybox:latest"},
		{"busybox:1.36", "busybox:1.36", "docker.io/library/busybox:1.36"},
		{"registry.k8s.io/pause:3.10", "registry.k8s.io/pause:3.10", "registry.k8s.io/pause:3.10"},
		{"index.docker.io/user/app", "index.docker.io/user/app:latest", "docker.io/user/app:latest"},
		{"busybox@" + dgst, "busybox@" + dgst, "docker.io/library/busybox@" + dgst},
	}
	for _, tt := range tests {
		if got, err := applyDefaultImageTag(tt.in); err != nil || got != tt.tagged {
			t.Errorf("applyDefaultImageTag(%q) = %q, %v; want %q", tt.in, got, err, tt.tagged)
		}
		if got, err := normalizeImage(tt.in); err != nil || got != tt.normalized {
			t.Errorf("normalizeImage(%q) = %q, %v; want %q", tt.in, got, err, tt.normalized)
		}
	}
	for _, f := range []func(string) (string, error){applyDefaultImageTag, normalizeImage} {
		_, err := f("bad image")
		want := `Failed to apply default image tag "bad image": couldn't parse image name "bad image": invalid reference format`
		if err == nil || err.Error() != want || !errors.Is(err, errInvalidImageName) {
			t.Errorf("err = %v, want %q (InvalidImageName)", err, want)
		}
		var ie *imageError
		if !errors.As(err, &ie) || ie.Reason() != "InvalidImageName" {
			t.Errorf("reason of %v is not InvalidImageName", err)
		}
	}
}

func TestPullPolicy(t *testing.T) {
	tests := []struct {
		image  string
		policy corev1.PullPolicy
		want   corev1.PullPolicy
	}{
		{"busybox", "", corev1.PullAlways},
		{"busybox:latest", "", corev1.PullAlways},
		{"busybox:latest@" + dgst, "", corev1.PullAlways},
		{"busybox:1.36", "", corev1.PullIfNotPresent},
		{"busybox@" + dgst, "", corev1.PullIfNotPresent},
		{"Bad Image", "", corev1.PullIfNotPresent},
		{"busybox", corev1.PullNever, corev1.PullNever},
		{"busybox:1", corev1.PullAlways, corev1.PullAlways},
	}
	for _, tt := range tests {
		if got := pullPolicy(tt.image, tt.policy); got != tt.want {
			t.Errorf("pullPolicy(%q, %q) = %s, want %s", tt.image, tt.policy, got, tt.want)
		}
	}
}

func TestShouldPull(t *testing.T) {
	tests := []struct {
		policy  corev1.PullPolicy
		present bool
		want    bool
		never   bool
	}{
		{corev1.PullAlways, true, true, false},
		{corev1.PullAlways, false, true, false},
		{corev1.PullIfNotPresent, true, false, false},
		{corev1.PullIfNotPresent, false, true, false},
		{corev1.PullNever, true, false, false},
		{corev1.PullNever, false, false, true},
	}
	for _, tt := range tests {
		got, err := shouldPull("busybox", tt.policy, tt.present)
		if got != tt.want || (err != nil) != tt.never {
			t.Errorf("shouldPull(%s, present=%v) = %v, %v", tt.policy, tt.present, got, err)
		}
		if tt.never {
			if !errors.Is(err, errImageNeverPull) || err.Error() != `Container image "busybox" is not present with pull policy of Never` {
				t.Errorf("err = %v", err)
			}
		}
	}
}

func TestPullError(t *testing.T) {
	tests := []struct {
		err    error
		reason error
		msg    string
	}{
		{errors.New("RegistryUnavailable: dial tcp: refused"), crierrors.ErrRegistryUnavailable,
			"image pull failed for busybox because the registry is unavailable: dial tcp: refused"},
		{errors.New("SignatureValidationFailed"), crierrors.ErrSignatureValidationFailed,
			"image pull failed for busybox because the signature validation failed"},
		{errors.New("rpc error: not found"), errImagePull, "rpc error: not found"},
	}
	for _, tt := range tests {
		got := pullError("busybox", tt.err)
		if !errors.Is(got, tt.reason) || got.Error() != tt.msg || !errors.Is(got, tt.err) {
			t.Errorf("pullError(%v) = %v, want %v with %q", tt.err, got, tt.reason, tt.msg)
		}
	}
}

func TestPullBackoff(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	b := newPullBackoff(clk)
	if err := b.check("pod-a", "busybox"); err != nil {
		t.Fatalf("fresh back-off: %v", err)
	}
	b.failed("pod-a", "busybox", pullError("busybox", errors.New("boom")))
	err := b.check("pod-a", "busybox")
	want := `Back-off pulling image "busybox": ErrImagePull: boom`
	if !errors.Is(err, errImagePullBackOff) || err.Error() != want {
		t.Fatalf("err = %v, want %q", err, want)
	}
	if err := b.check("pod-b", "busybox"); err != nil {
		t.Errorf("another pod's pull is held back: %v", err)
	}
	if err := b.check("pod-a", "nginx"); err != nil {
		t.Errorf("another image's pull is held back: %v", err)
	}
	for _, step := range []struct {
		after time.Duration
		held  bool
	}{{9 * time.Second, true}, {2 * time.Second, false}} {
		clk.Step(step.after)
		if got := b.check("pod-a", "busybox") != nil; got != step.held {
			t.Fatalf("after %v: held = %v, want %v", step.after, got, step.held)
		}
	}
	b.failed("pod-a", "busybox", errors.New("plain"))
	clk.Step(19 * time.Second)
	if err := b.check("pod-a", "busybox"); err == nil || !strings.HasSuffix(err.Error(), ": plain") {
		t.Fatalf("second back-off not 20s or message lost: %v", err)
	}
	clk.Step(2 * time.Second)
	if err := b.check("pod-a", "busybox"); err != nil {
		t.Fatalf("held after 21s: %v", err)
	}
	for range 10 {
		b.failed("pod-a", "busybox", errors.New("again"))
	}
	if got := b.backoff.Get(pullBackoffKey("pod-a", "busybox")); got != 5*time.Minute {
		t.Errorf("back-off = %v, want the 5m cap", got)
	}

	b.failed("pod-b", "old", errors.New("x"))
	clk.Step(11 * time.Minute) // twice the cap without a failure: forgotten
	b.succeeded("pod-a", "busybox")
	if len(b.lastErr) != 0 {
		t.Errorf("messages kept after success and expiry: %v", b.lastErr)
	}
	if err := b.check("pod-b", "old"); err != nil {
		t.Errorf("expired back-off still holds: %v", err)
	}
}
