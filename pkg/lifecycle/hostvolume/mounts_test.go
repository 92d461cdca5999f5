package hostvolume

import (
	"context"
	"os"
	"path/filepath"
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
