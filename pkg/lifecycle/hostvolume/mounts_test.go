package hostvolume

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestContainerMounts(t *testing.T) {
	ctx := context.Background()
	outside := t.TempDir()
	host := t.TempDir()
	if err := os.MkdirAll(filepath.Join(host, "logs/web"), 0o755); err != nil {
		t.Fatal(err)
	}

	f := newFixture(t, []runtime.Object{cm("cfg", map[string]string{"app.conf": "A"})}...)
	p := pod(
		corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		corev1.Volume{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}},
		corev1.Volume{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: host}}},
	)
	paths, err := f.m.SetUp(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	scratch := paths["scratch"]
	// Traps a container could have planted in a writable volume.
	for name, target := range map[string]string{
		"escape-abs": outside,
		"escape-rel": "../../../../../../..",
		"inside":     "real",
	} {
		if err := os.Symlink(target, filepath.Join(scratch, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(scratch, "real"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(scratch, "real", "deeper")); err != nil {
		t.Fatal(err)
	}
	configFile, err := filepath.EvalSymlinks(filepath.Join(paths["config"], "app.conf"))
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"POD_NAME": "web", "EVIL": "../x"}

	tests := []struct {
		name    string
		vm      corev1.VolumeMount
		want    Mount
		wantErr string
	}{
		{
			name: "whole volume",
			vm:   corev1.VolumeMount{Name: "scratch", MountPath: "/scratch"},
			want: Mount{Source: scratch, Destination: "/scratch"},
		},
		{
			name: "readOnly honoured",
			vm:   corev1.VolumeMount{Name: "host", MountPath: "/host", ReadOnly: true},
			want: Mount{Source: host, Destination: "/host", ReadOnly: true},
		},
		{
			name: "recursiveReadOnly carried for the runtime to resolve",
			vm: corev1.VolumeMount{Name: "host", MountPath: "/host", ReadOnly: true,
				RecursiveReadOnly: ptr(corev1.RecursiveReadOnlyIfPossible)},
			want: Mount{Source: host, Destination: "/host", ReadOnly: true, RecursiveReadOnly: corev1.RecursiveReadOnlyIfPossible},
		},
		{
			name: "configMap always read-only",
			vm:   corev1.VolumeMount{Name: "config", MountPath: "/etc/app"},
			want: Mount{Source: paths["config"], Destination: "/etc/app", ReadOnly: true},
		},
		{
			name: "subPath to a configMap key resolves to the current file",
			vm:   corev1.VolumeMount{Name: "config", MountPath: "/etc/app.conf", SubPath: "app.conf"},
			want: Mount{Source: configFile, Destination: "/etc/app.conf", ReadOnly: true},
		},
		{
			name: "missing subPath directories are created",
			vm:   corev1.VolumeMount{Name: "scratch", MountPath: "/cache", SubPath: "a/b/c"},
			want: Mount{Source: filepath.Join(scratch, "a/b/c"), Destination: "/cache"},
		},
		{
			name: "subPathExpr",
			vm:   corev1.VolumeMount{Name: "host", MountPath: "/logs", SubPathExpr: "logs/$(POD_NAME)"},
			want: Mount{Source: filepath.Join(host, "logs/web"), Destination: "/logs"},
		},
		{
			name: "symbolic link inside the volume",
			vm:   corev1.VolumeMount{Name: "scratch", MountPath: "/in", SubPath: "inside"},
			want: Mount{Source: filepath.Join(scratch, "real"), Destination: "/in"},
		},
		{
			name:    "dot-dot",
			vm:      corev1.VolumeMount{Name: "scratch", MountPath: "/x", SubPath: "a/../../etc"},
			wantErr: `container "main": volumeMount "scratch" at /x: subPath "a/../../etc" contains '..'`,
		},
		{
			name:    "dot-dot through subPathExpr",
			vm:      corev1.VolumeMount{Name: "scratch", MountPath: "/x", SubPathExpr: "$(EVIL)"},
			wantErr: `container "main": volumeMount "scratch" at /x: subPath "../x" contains '..'`,
		},
		{
			name:    "absolute",
			vm:      corev1.VolumeMount{Name: "scratch", MountPath: "/x", SubPath: "/etc"},
			wantErr: `container "main": volumeMount "scratch" at /x: subPath "/etc" is absolute`,
		},
		{
			name:    "absolute symbolic link",
			vm:      corev1.VolumeMount{Name: "scratch", MountPath: "/x", SubPath: "escape-abs"},
			wantErr: `container "main": volumeMount "scratch" at /x: subPath "escape-abs" escapes the volume through a symbolic link`,
		},
		{
			name:    "relative symbolic link",
			vm:      corev1.VolumeMount{Name: "scratch", MountPath: "/x", SubPath: "escape-rel/etc"},
			wantErr: `container "main": volumeMount "scratch" at /x: subPath "escape-rel/etc" escapes the volume through a symbolic link`,
		},
		{
			name:    "nested symbolic link",
			vm:      corev1.VolumeMount{Name: "scratch", MountPath: "/x", SubPath: "inside/deeper/new"},
			wantErr: `container "main": volumeMount "scratch" at /x: subPath "inside/deeper/new" escapes the volume through a symbolic link`,
		},
		{
			name:    "unknown volume",
			vm:      corev1.VolumeMount{Name: "nope", MountPath: "/x"},
			wantErr: `container "main": volumeMount "nope" at /x: the pod has no volume "nope"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := p.Spec.Containers[0].DeepCopy()
			c.VolumeMounts = []corev1.VolumeMount{tt.vm}
			got, err := ContainerMounts(p, c, paths, env)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("error = %v\nwant %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 1 || got[0] != tt.want {
				t.Fatalf("mounts = %+v, want %+v", got, tt.want)
			}
			if info, err := os.Stat(got[0].Source); err != nil {
				t.Errorf("source: %v", err)
			} else if strings.HasSuffix(tt.vm.SubPath, "c") && !info.IsDir() {
				t.Errorf("created subPath is not a directory")
			}
		})
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("something was created outside the volume: %v", entries)
	}
}

func TestContainerMountsVolumeNotSetUp(t *testing.T) {
	p := pod(corev1.Volume{Name: "v", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	c := &corev1.Container{Name: "main", VolumeMounts: []corev1.VolumeMount{{Name: "v", MountPath: "/v"}}}
	_, err := ContainerMounts(p, c, map[string]string{}, nil)
	if want := `container "main": volumeMount "v" at /v: volume "v" is not set up`; err == nil || err.Error() != want {
		t.Fatalf("error = %v, want %s", err, want)
	}
}

// An image volume is the runtime's: SetUp leaves it alone (no path, nothing
// on disk), and each volumeMount of it is a read-only Mount of its source
// with the subPath (subPathExpr expanded) checked but left for the runtime
// to resolve inside the image.
func TestContainerMountsImageVolume(t *testing.T) {
	f := newFixture(t)
	src := corev1.ImageVolumeSource{Reference: "busybox:1.37", PullPolicy: corev1.PullIfNotPresent}
	p := pod(
		corev1.Volume{Name: "tools", VolumeSource: corev1.VolumeSource{Image: &src}},
		corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	)
	paths, err := f.m.SetUp(context.Background(), p)
	if err != nil {
		t.Fatalf("SetUp of a pod with an image volume: %v", err)
	}
	if _, ok := paths["tools"]; ok || len(paths) != 1 {
		t.Errorf("paths = %v, want the emptyDir's alone", paths)
	}
	if _, err := os.Stat(filepath.Join(f.root, "pods/uid-1/volumes/kubernetes.io~image")); !os.IsNotExist(err) {
		t.Errorf("a directory was made for the image volume: %v", err)
	}
	h2c := corev1.MountPropagationHostToContainer
	tests := []struct {
		name    string
		vm      corev1.VolumeMount
		want    Mount
		wantErr string
	}{
		{
			name: "whole image, read-only though the mount does not say so",
			vm:   corev1.VolumeMount{Name: "tools", MountPath: "/vol"},
			want: Mount{Destination: "/vol", ReadOnly: true, Image: &src},
		},
		{
			name: "subPath",
			vm:   corev1.VolumeMount{Name: "tools", MountPath: "/etc-of-image", SubPath: "etc", ReadOnly: true},
			want: Mount{Destination: "/etc-of-image", ReadOnly: true, Image: &src, ImageSubPath: "etc"},
		},
		{
			name: "subPathExpr and propagation",
			vm:   corev1.VolumeMount{Name: "tools", MountPath: "/x", SubPathExpr: "usr/$(DIR)", MountPropagation: &h2c},
			want: Mount{Destination: "/x", ReadOnly: true, Propagation: h2c, Image: &src, ImageSubPath: "usr/bin"},
		},
		{
			name:    "dot-dot",
			vm:      corev1.VolumeMount{Name: "tools", MountPath: "/x", SubPath: "etc/../../host"},
			wantErr: `container "main": volumeMount "tools" at /x: subPath "etc/../../host" contains '..'`,
		},
		{
			name:    "absolute",
			vm:      corev1.VolumeMount{Name: "tools", MountPath: "/x", SubPath: "/etc"},
			wantErr: `container "main": volumeMount "tools" at /x: subPath "/etc" is absolute`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := p.Spec.Containers[0].DeepCopy()
			c.VolumeMounts = []corev1.VolumeMount{tt.vm}
			got, err := ContainerMounts(p, c, paths, map[string]string{"DIR": "bin"})
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("error = %v\nwant %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 1 || !reflect.DeepEqual(got[0], tt.want) {
				t.Fatalf("mounts = %+v, want %+v", got, tt.want)
			}
			if got[0].Image == p.Spec.Volumes[0].Image {
				t.Errorf("the mount shares the pod's image volume source")
			}
		})
	}
}
