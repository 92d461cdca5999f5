package cri

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	criapitesting "k8s.io/cri-api/pkg/apis/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/pkg/lifecycle"
)

// idImages is an image service whose images have IDs of their own, as a
// runtime's (id:<name>), and which records each pull with its credentials.
type idImages struct {
	*criapitesting.FakeImageService
	pulls []pullRecord
}

type pullRecord struct {
	image string
	auth  *runtimeapi.AuthConfig
}

func newIDImages(present ...string) *idImages {
	is := criapitesting.NewFakeImageService()
	is.SetFakeImages(present)
	return &idImages{FakeImageService: is}
}

func (s *idImages) PullImage(ctx context.Context, spec *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig, cfg *runtimeapi.PodSandboxConfig) (string, error) {
	if _, err := s.FakeImageService.PullImage(ctx, spec, auth, cfg); err != nil {
		return "", err
	}
	s.pulls = append(s.pulls, pullRecord{image: spec.Image, auth: auth})
	return "id:" + spec.Image, nil
}

func (s *idImages) ImageStatus(ctx context.Context, spec *runtimeapi.ImageSpec, verbose bool) (*runtimeapi.ImageStatusResponse, error) {
	resp, err := s.FakeImageService.ImageStatus(ctx, spec, verbose)
	if err != nil || resp.Image == nil {
		return resp, err
	}
	img := proto.Clone(resp.Image).(*runtimeapi.Image)
	img.Id = "id:" + img.Id
	return &runtimeapi.ImageStatusResponse{Image: img}, nil
}

func (s *idImages) pulled() []string {
	var out []string
	for _, p := range s.pulls {
		out = append(out, p.image)
	}
	return out
}

// testImageManager is an image manager over is, whose pods' pull secrets
// are secrets.
func testImageManager(is *idImages, secrets ...corev1.Secret) (*imageManager, *record.FakeRecorder) {
	rec := record.NewFakeRecorder(100)
	secret := func(_ context.Context, namespace, name string) (*corev1.Secret, error) {
		for i := range secrets {
			if secrets[i].Namespace == namespace && secrets[i].Name == name {
				return &secrets[i], nil
			}
		}
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, name)
	}
	conn := &connection{runtime: criapitesting.NewFakeRuntimeService(), images: is}
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC))
	return newImageManager(conn, secret, rec, clk), rec
}

func imageVolumePod(volumes ...corev1.Volume) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-0", UID: "uid-1"},
		Spec: corev1.PodSpec{
			Volumes:    volumes,
			Containers: []corev1.Container{{Name: "app", Image: "busybox:1.37", ImagePullPolicy: corev1.PullIfNotPresent}},
		},
	}
}

func imageVolume(name, reference string, policy corev1.PullPolicy) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: reference, PullPolicy: policy}}}
}

// imageMount is the lifecycle's mount of an image volume.
func imageMount(v corev1.Volume, at, subPath string) lifecycle.Mount {
	return lifecycle.Mount{Destination: at, ReadOnly: true, Image: v.Image, ImageSubPath: subPath}
}

// Each volumeMount of an image volume is a CRI mount of the image by the ID
// the runtime resolved, read-only, with its subPath as the image sub-path
// and no host path (containerd refuses one); host paths stay as they are.
func TestImageVolumeMounts(t *testing.T) {
	tools := imageVolume("tools", "busybox:1.37", corev1.PullIfNotPresent)
	data := imageVolume("data", "registry.example.com/data", "")
	refs := map[volumeImage]string{
		{"busybox:1.37", corev1.PullIfNotPresent}:        "sha256:aaa",
		{"registry.example.com/data", corev1.PullAlways}: "sha256:bbb",
	}
	userns := &runtimeapi.UserNamespace{
		Mode: runtimeapi.NamespaceMode_POD,
		Uids: []*runtimeapi.IDMapping{{HostId: 65536, Length: 65536}},
		Gids: []*runtimeapi.IDMapping{{HostId: 65536, Length: 65536}},
	}
	toolsSpec := &runtimeapi.ImageSpec{Image: "sha256:aaa", UserSpecifiedImage: "busybox:1.37"}
	tests := []struct {
		name   string
		mounts []lifecycle.Mount
		userns *runtimeapi.UserNamespace
		want   []*runtimeapi.Mount
	}{
		{
			name:   "whole image",
			mounts: []lifecycle.Mount{imageMount(tools, "/vol", "")},
			want:   []*runtimeapi.Mount{{ContainerPath: "/vol", Readonly: true, Image: toolsSpec}},
		},
		{
			name:   "subPath, and read-only whatever the volumeMount says",
			mounts: []lifecycle.Mount{{Destination: "/etc-of-image", Image: tools.Image, ImageSubPath: "etc"}},
			want:   []*runtimeapi.Mount{{ContainerPath: "/etc-of-image", Readonly: true, Image: toolsSpec, ImageSubPath: "etc"}},
		},
		{
			name: "two volumes, the same one twice, beside a host path",
			mounts: []lifecycle.Mount{
				{Source: "/var/lib/nodelet/pods/uid-1/volumes/kubernetes.io~empty-dir/scratch", Destination: "/scratch"},
				imageMount(tools, "/a", "bin"),
				imageMount(data, "/data", ""),
				imageMount(tools, "/b", ""),
			},
			want: []*runtimeapi.Mount{
				{HostPath: "/var/lib/nodelet/pods/uid-1/volumes/kubernetes.io~empty-dir/scratch", ContainerPath: "/scratch"},
				{ContainerPath: "/a", Readonly: true, Image: toolsSpec, ImageSubPath: "bin"},
				{ContainerPath: "/data", Readonly: true, Image: &runtimeapi.ImageSpec{Image: "sha256:bbb", UserSpecifiedImage: "registry.example.com/data"}},
				{ContainerPath: "/b", Readonly: true, Image: toolsSpec},
			},
		},
		{
			name:   "ID-mapped in a user namespace (the runtime maps the image's snapshot)",
			mounts: []lifecycle.Mount{imageMount(tools, "/vol", "")},
			userns: userns,
			want:   []*runtimeapi.Mount{{ContainerPath: "/vol", Readonly: true, Image: toolsSpec, UidMappings: userns.Uids, GidMappings: userns.Gids}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := containerParams{UserNamespace: tt.userns}
			for _, m := range tt.mounts {
				p.Mounts = append(p.Mounts, criMount(m, refs, false))
			}
			c := &corev1.Container{Name: "app"}
			got, err := runtimeMounts(&corev1.Pod{}, c, p)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// The image of an image volume is pulled by the volume's pull policy
// (defaulted by its tag as the API server defaults it), as a container's
// image: the same waiting reasons and back-off.
func TestImageVolumePullPolicy(t *testing.T) {
	tests := []struct {
		name      string
		reference string
		policy    corev1.PullPolicy
		present   []string
		pullErr   error
		wantPulls []string
		wantRef   string
		wantWait  string // the container's waiting reason
	}{
		{name: "Always pulls a present image", reference: "tools:1", policy: corev1.PullAlways, present: []string{"tools:1"},
			wantPulls: []string{"tools:1"}, wantRef: "id:tools:1"},
		{name: "IfNotPresent uses a present image", reference: "tools:1", policy: corev1.PullIfNotPresent, present: []string{"tools:1"},
			wantRef: "id:tools:1"},
		{name: "IfNotPresent pulls a missing image", reference: "tools:1", policy: corev1.PullIfNotPresent,
			wantPulls: []string{"tools:1"}, wantRef: "id:tools:1"},
		{name: "Never uses a present image", reference: "tools:1", policy: corev1.PullNever, present: []string{"tools:1"},
			wantRef: "id:tools:1"},
		{name: "Never with a missing image", reference: "tools:1", policy: corev1.PullNever, wantWait: "ErrImageNeverPull"},
		{name: "unset with a tag is IfNotPresent", reference: "tools:1", present: []string{"tools:1"}, wantRef: "id:tools:1"},
		{name: "unset with :latest is Always", reference: "tools:latest", present: []string{"tools:latest"},
			wantPulls: []string{"tools:latest"}, wantRef: "id:tools:latest"},
		{name: "unset without a tag is Always, with the tag latest", reference: "tools", present: []string{"tools:latest"},
			wantPulls: []string{"tools:latest"}, wantRef: "id:tools:latest"},
		{name: "a failed pull", reference: "tools:1", policy: corev1.PullAlways, pullErr: errors.New("manifest unknown"),
			wantWait: "ErrImagePull"},
		{name: "an invalid reference", reference: "Not An Image", policy: corev1.PullAlways, wantWait: "InvalidImageName"},
		{name: "an empty reference", reference: "", wantWait: "InvalidImageName"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := newIDImages(tt.present...)
			if tt.pullErr != nil {
				is.InjectError("PullImage", tt.pullErr)
			}
			m, _ := testImageManager(is)
			vol := imageVolume("tools", tt.reference, tt.policy)
			pod := imageVolumePod(vol)
			refs, err := m.ensureVolumes(context.Background(), pod, []lifecycle.Mount{imageMount(vol, "/vol", "")}, &runtimeapi.PodSandboxConfig{})
			if !slices.Equal(is.pulled(), tt.wantPulls) {
				t.Errorf("pulled %v, want %v", is.pulled(), tt.wantPulls)
			}
			if tt.wantWait != "" {
				var we *lifecycle.WaitError
				if !errors.As(err, &we) || we.Reason != tt.wantWait {
					t.Fatalf("err = %v, want the container to wait with %s", err, tt.wantWait)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := refs[volumeImageOf(vol.Image)]; got != tt.wantRef {
				t.Errorf("resolved to %q, want %q", got, tt.wantRef)
			}
		})
	}
}

// A failed pull of an image volume backs off as a container image's does,
// per pod and image, with the kubelet's Events.
func TestImageVolumePullBackOff(t *testing.T) {
	ctx := context.Background()
	is := newIDImages()
	is.InjectError("PullImage", errors.New("manifest unknown"))
	m, rec := testImageManager(is)
	vol := imageVolume("tools", "tools:no-such-tag", corev1.PullIfNotPresent)
	pod := imageVolumePod(vol)
	mounts := []lifecycle.Mount{imageMount(vol, "/vol", "")}
	wait := func() string {
		_, err := m.ensureVolumes(ctx, pod, mounts, &runtimeapi.PodSandboxConfig{})
		var we *lifecycle.WaitError
		if !errors.As(err, &we) {
			t.Fatalf("err = %v, want a wait", err)
		}
		return we.Reason + ": " + we.Message
	}
	if got := wait(); got != "ErrImagePull: manifest unknown" {
		t.Errorf("first wait %q", got)
	}
	if got := wait(); !strings.HasPrefix(got, `ImagePullBackOff: Back-off pulling image "tools:no-such-tag"`) {
		t.Errorf("second wait %q, want ImagePullBackOff", got)
	}
	pullCalls := 0
	for _, call := range is.Called {
		if call == "PullImage" {
			pullCalls++
		}
	}
	if pullCalls != 1 {
		t.Errorf("PullImage called %d times, want once: not again during the back-off", pullCalls)
	}
	close(rec.Events)
	var events []string
	for e := range rec.Events {
		events = append(events, e)
	}
	for _, want := range []string{
		`Normal Pulling Pulling image "tools:no-such-tag"`,
		`Warning Failed Failed to pull image "tools:no-such-tag": manifest unknown`,
		`Normal BackOff Back-off pulling image "tools:no-such-tag"`,
	} {
		if !slices.Contains(events, want) {
			t.Errorf("no Event %q in %q", want, events)
		}
	}
}

// The pod's image pull secrets authenticate the pull of an image volume.
func TestImageVolumePullSecrets(t *testing.T) {
	is := newIDImages()
	m, _ := testImageManager(is, dockerConfigJSONSecret("regcred", `{"registry.example.com": {"username": "reg", "password": "reg-pw"}}`))
	vol := imageVolume("data", "registry.example.com/data:1", corev1.PullIfNotPresent)
	pod := imageVolumePod(vol)
	pod.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "regcred"}}
	if _, err := m.ensureVolumes(context.Background(), pod, []lifecycle.Mount{imageMount(vol, "/data", "")}, &runtimeapi.PodSandboxConfig{}); err != nil {
		t.Fatal(err)
	}
	if len(is.pulls) != 1 || !proto.Equal(is.pulls[0].auth, user("reg")) {
		t.Errorf("pulls %+v, want one with the secret's credentials", is.pulls)
	}
}

// createRecorder is a runtime service that keeps the configurations of the
// containers it creates.
type createRecorder struct {
	*criapitesting.FakeRuntimeService
	created []*runtimeapi.ContainerConfig
}

func (r *createRecorder) CreateContainer(ctx context.Context, sandbox string, cfg *runtimeapi.ContainerConfig, sbCfg *runtimeapi.PodSandboxConfig) (string, error) {
	r.created = append(r.created, cfg)
	return r.FakeRuntimeService.CreateContainer(ctx, sandbox, cfg, sbCfg)
}

// A container that mounts an image volume is created once the volume's
// image is pulled (before its own image), with the image mounted by its
// ID; while the volume's image cannot be pulled the container is not
// created and waits with the pull's reason.
func TestStartContainerWithImageVolume(t *testing.T) {
	ctx := context.Background()
	vol := imageVolume("tools", "registry.example.com/tools:1", corev1.PullAlways)
	pod := imageVolumePod(vol)
	c := &pod.Spec.Containers[0]
	c.VolumeMounts = []corev1.VolumeMount{{Name: "tools", MountPath: "/vol", SubPath: "bin"}}
	spec := lifecycle.ContainerSpec{Pod: pod, Container: c, Command: []string{"sleep", "1d"},
		Mounts: []lifecycle.Mount{imageMount(vol, "/vol", "bin")}}

	rs := &createRecorder{FakeRuntimeService: criapitesting.NewFakeRuntimeService()}
	is := newIDImages("busybox:1.37")
	is.InjectError("PullImage", errors.New("registry.example.com: connection refused"))
	images, _ := testImageManager(is)
	images.conn = &connection{runtime: rs, images: is}
	rt := &criRuntime{conn: images.conn, node: testNode(), rootDir: t.TempDir(), recorder: record.NewFakeRecorder(100),
		images: images, containerLogsDir: t.TempDir(), sandboxes: map[types.UID]*criSandbox{}, relistNow: make(chan struct{}, 1)}
	sb := &criSandbox{rt: rt, uid: pod.UID, id: "sb1", logDir: t.TempDir(), config: &runtimeapi.PodSandboxConfig{}, ready: true,
		containers: map[string][]*criContainer{}}

	err := sb.StartContainer(ctx, spec)
	var we *lifecycle.WaitError
	if !errors.As(err, &we) || we.Reason != "ErrImagePull" {
		t.Fatalf("start with the volume's image not pullable: %v, want a wait with ErrImagePull", err)
	}
	if len(rs.created) != 0 {
		t.Fatalf("container created without its image volume: %v", rs.created)
	}

	images.backoff = newPullBackoff(images.clock) // the back-off is tested apart
	if err := sb.StartContainer(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if want := []string{"registry.example.com/tools:1"}; !slices.Equal(is.pulled(), want) {
		t.Errorf("pulled %v, want %v (the container's image is present)", is.pulled(), want)
	}
	if len(rs.created) != 1 {
		t.Fatalf("created %d containers, want 1", len(rs.created))
	}
	var got *runtimeapi.Mount
	for _, m := range rs.created[0].Mounts {
		if m.ContainerPath == "/vol" {
			got = m
		}
	}
	want := &runtimeapi.Mount{ContainerPath: "/vol", Readonly: true, ImageSubPath: "bin",
		Image: &runtimeapi.ImageSpec{Image: "id:registry.example.com/tools:1", UserSpecifiedImage: "registry.example.com/tools:1"}}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("the image volume's mount (-want +got):\n%s", diff)
	}
	if img := rs.created[0].Image; img.Image != "id:busybox:1.37" {
		t.Errorf("the container's image is %q, want its own", img.Image)
	}
}
