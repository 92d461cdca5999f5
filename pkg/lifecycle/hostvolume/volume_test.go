package hostvolume

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
)

func ptr[T any](v T) *T { return &v }

var t0 = time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)

type fixture struct {
	m      *Manager
	client *fake.Clientset
	clock  *clocktesting.FakeClock
	root   string
	tokens atomic.Int32 // TokenRequests served
	lastTR atomic.Pointer[authenticationv1.TokenRequest]
}

func newFixture(t *testing.T, objs ...runtime.Object) *fixture {
	t.Helper()
	f := &fixture{
		client: fake.NewClientset(objs...),
		clock:  clocktesting.NewFakeClock(t0),
		root:   t.TempDir(),
	}
	f.client.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "token" {
			return false, nil, nil
		}
		req := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenRequest)
		f.lastTR.Store(req.DeepCopy())
		n := f.tokens.Add(1)
		return true, &authenticationv1.TokenRequest{
			Spec: req.Spec,
			Status: authenticationv1.TokenRequestStatus{
				Token:               fmt.Sprintf("token-%d", n),
				ExpirationTimestamp: metav1.NewTime(f.clock.Now().Add(time.Duration(*req.Spec.ExpirationSeconds) * time.Second)),
			},
		}, nil
	})
	f.m = NewManager(f.client, Options{RootDir: f.root, Clock: f.clock, Allocatable: func() corev1.ResourceList {
		return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3"), corev1.ResourceMemory: resource.MustParse("4Gi")}
	}})
	t.Cleanup(func() {
		// Unmount whatever a failing test left behind.
		_ = filepath.Walk(f.root, func(p string, info os.FileInfo, err error) error {
			if err == nil && info.IsDir() {
				_ = unmountIfMounted(p)
			}
			return nil
		})
	})
	return f
}

func pod(volumes ...corev1.Volume) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "app", Name: "web", UID: "uid-1",
			Labels:      map[string]string{"tier": "front", "app": "web"},
			Annotations: map[string]string{"note": "hi"},
		},
		Spec: corev1.PodSpec{
			ServiceAccountName: "robot",
			Volumes:            volumes,
			Containers: []corev1.Container{{
				Name: "main",
				Resources: corev1.ResourceRequirements{
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")},
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")},
				},
			}},
		},
	}
}

func cm(name string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: name}, Data: data}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func mode(t *testing.T, p string) os.FileMode {
	t.Helper()
	info, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return info.Mode().Perm()
}

// visible lists the names a container sees in a volume directory.
func visible(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "..") {
			names = append(names, e.Name())
		}
	}
	return strings.Join(names, ",")
}

func TestSetUp(t *testing.T) {
	hostDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(hostDir, "file"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(hostDir, "sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	hp := func(p string, typ corev1.HostPathType) corev1.VolumeSource {
		return corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: p, Type: &typ}}
	}

	tests := []struct {
		name    string
		vol     corev1.VolumeSource
		objs    []runtime.Object
		check   func(t *testing.T, f *fixture, dir string)
		wantErr string
	}{
		{
			name: "emptyDir on disk",
			vol:  corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}},
			check: func(t *testing.T, f *fixture, dir string) {
				if want := filepath.Join(f.root, "pods/uid-1/volumes/kubernetes.io~empty-dir/v"); dir != want {
					t.Errorf("path = %s, want %s", dir, want)
				}
				if m := mode(t, dir); m != 0o777 {
					t.Errorf("mode = %v", m)
				}
			},
		},
		{
			name:    "emptyDir hugepages",
			vol:     corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumHugePages}},
			wantErr: `volume "v": emptyDir medium "HugePages" is not supported by the process provider`,
		},
		{
			name: "configMap all keys, binary data, default mode",
			vol:  corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, DefaultMode: ptr[int32](0o600)}},
			objs: []runtime.Object{&corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "cfg"},
				Data:       map[string]string{"a.conf": "A", "b.conf": "B"},
				BinaryData: map[string][]byte{"bin": {0, 1, 2}},
			}},
			check: func(t *testing.T, f *fixture, dir string) {
				if got := visible(t, dir); got != "a.conf,b.conf,bin" {
					t.Errorf("files = %s", got)
				}
				if got := readFile(t, filepath.Join(dir, "a.conf")); got != "A" {
					t.Errorf("a.conf = %q", got)
				}
				if got := readFile(t, filepath.Join(dir, "bin")); got != "\x00\x01\x02" {
					t.Errorf("bin = %q", got)
				}
				if m := mode(t, filepath.Join(dir, "b.conf")); m != 0o600 {
					t.Errorf("mode = %v", m)
				}
				if target, _ := os.Readlink(filepath.Join(dir, "a.conf")); target != "..data/a.conf" {
					t.Errorf("a.conf links to %q", target)
				}
			},
		},
		{
			name: "configMap items with paths and modes",
			vol: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"},
				Items: []corev1.KeyToPath{
					{Key: "a", Path: "conf/app.yaml", Mode: ptr[int32](0o400)},
					{Key: "b", Path: "b.txt"},
				},
			}},
			objs: []runtime.Object{cm("cfg", map[string]string{"a": "A", "b": "B", "c": "C"})},
			check: func(t *testing.T, f *fixture, dir string) {
				if got := visible(t, dir); got != "b.txt,conf" {
					t.Errorf("files = %s", got)
				}
				if got := readFile(t, filepath.Join(dir, "conf/app.yaml")); got != "A" {
					t.Errorf("app.yaml = %q", got)
				}
				if m := mode(t, filepath.Join(dir, "conf/app.yaml")); m != 0o400 {
					t.Errorf("mode = %v", m)
				}
				if m := mode(t, filepath.Join(dir, "b.txt")); m != 0o644 {
					t.Errorf("mode = %v", m)
				}
			},
		},
		{
			name:    "configMap missing",
			vol:     corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "app"}}},
			wantErr: `volume "v": configmap app/app not found`,
		},
		{
			name: "configMap missing key",
			vol: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"},
				Items:                []corev1.KeyToPath{{Key: "nope", Path: "x"}},
			}},
			objs:    []runtime.Object{cm("cfg", map[string]string{"a": "A"})},
			wantErr: `volume "v": configmap app/cfg has no key "nope"`,
		},
		{
			name: "configMap item escaping",
			vol: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"},
				Items:                []corev1.KeyToPath{{Key: "a", Path: "x/../../y"}},
			}},
			objs:    []runtime.Object{cm("cfg", map[string]string{"a": "A"})},
			wantErr: `volume "v": configmap app/cfg: file path "x/../../y" contains '..'`,
		},
		{
			name: "optional configMap missing gives an empty directory",
			vol:  corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "gone"}, Optional: ptr(true)}},
			check: func(t *testing.T, f *fixture, dir string) {
				if got := visible(t, dir); got != "" {
					t.Errorf("files = %q", got)
				}
			},
		},
		{
			name: "optional secret missing gives an empty directory",
			vol:  corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "gone", Optional: ptr(true)}},
			check: func(t *testing.T, f *fixture, dir string) {
				if got := visible(t, dir); got != "" {
					t.Errorf("files = %q", got)
				}
			},
		},
		{
			name: "secret",
			vol:  corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "sec"}},
			objs: []runtime.Object{&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "sec"}, Data: map[string][]byte{"password": []byte("hunter2")}}},
			check: func(t *testing.T, f *fixture, dir string) {
				if want := filepath.Join(f.root, "pods/uid-1/volumes/kubernetes.io~secret/v"); dir != want {
					t.Errorf("path = %s, want %s", dir, want)
				}
				if got := readFile(t, filepath.Join(dir, "password")); got != "hunter2" {
					t.Errorf("password = %q", got)
				}
				if os.Geteuid() == 0 {
					if mounted, _ := isMountPoint(dir); !mounted {
						t.Error("secret volume is not on tmpfs")
					}
				}
			},
		},
		{
			name:    "secret missing",
			vol:     corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "sec"}},
			wantErr: `volume "v": secret app/sec not found`,
		},
		{
			name: "downwardAPI",
			vol: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
				{Path: "name", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}},
				{Path: "ns", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}},
				{Path: "uid", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.uid"}},
				{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
				{Path: "annotations", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations"}},
				{Path: "mem", ResourceFieldRef: &corev1.ResourceFieldSelector{ContainerName: "main", Resource: "limits.memory", Divisor: resource.MustParse("1Mi")}},
				{Path: "cpu", ResourceFieldRef: &corev1.ResourceFieldSelector{ContainerName: "main", Resource: "requests.cpu", Divisor: resource.MustParse("1m")}},
				{Path: "cpulimit", ResourceFieldRef: &corev1.ResourceFieldSelector{ContainerName: "main", Resource: "limits.cpu"}},
			}}},
			check: func(t *testing.T, f *fixture, dir string) {
				for file, want := range map[string]string{
					"name": "web", "ns": "app", "uid": "uid-1",
					"labels": "app=\"web\"\ntier=\"front\"", "annotations": `note="hi"`,
					"mem": "128", "cpu": "250", "cpulimit": "3", // unset: the node's allocatable
				} {
					if got := readFile(t, filepath.Join(dir, file)); got != want {
						t.Errorf("%s = %q, want %q", file, got, want)
					}
				}
			},
		},
		{
			name: "kube-api-access projected volume",
			vol: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				DefaultMode: ptr[int32](0o644),
				Sources: []corev1.VolumeProjection{
					{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr[int64](3607)}},
					{ConfigMap: &corev1.ConfigMapProjection{
						LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
						Items:                []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}},
					}},
					{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{
						{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}},
					}}},
				},
			}},
			objs: []runtime.Object{cm("kube-root-ca.crt", map[string]string{"ca.crt": "CERT"})},
			check: func(t *testing.T, f *fixture, dir string) {
				if want := filepath.Join(f.root, "pods/uid-1/volumes/kubernetes.io~projected/v"); dir != want {
					t.Errorf("path = %s, want %s", dir, want)
				}
				for file, want := range map[string]string{"token": "token-1", "ca.crt": "CERT", "namespace": "app"} {
					if got := readFile(t, filepath.Join(dir, file)); got != want {
						t.Errorf("%s = %q, want %q", file, got, want)
					}
				}
				tr := f.lastTR.Load()
				if tr == nil || *tr.Spec.ExpirationSeconds != 3607 || tr.Spec.BoundObjectRef.Kind != "Pod" ||
					tr.Spec.BoundObjectRef.Name != "web" || tr.Spec.BoundObjectRef.UID != "uid-1" || len(tr.Spec.Audiences) != 0 {
					t.Errorf("token request = %+v", tr)
				}
			},
		},
		{
			name: "projected token with audience and default expiry",
			vol: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "vault/token", Audience: "vault"}},
			}}},
			check: func(t *testing.T, f *fixture, dir string) {
				if got := readFile(t, filepath.Join(dir, "vault/token")); got != "token-1" {
					t.Errorf("token = %q", got)
				}
				tr := f.lastTR.Load()
				if *tr.Spec.ExpirationSeconds != 3600 || len(tr.Spec.Audiences) != 1 || tr.Spec.Audiences[0] != "vault" {
					t.Errorf("token request = %+v", tr.Spec)
				}
			},
		},
		{
			name: "projected cluster trust bundle",
			vol: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ClusterTrustBundle: &corev1.ClusterTrustBundleProjection{Name: ptr("b"), Path: "ca"}},
			}}},
			wantErr: `volume "v": clusterTrustBundle projections are not supported by the process provider`,
		},
		{
			name:    "persistentVolumeClaim",
			vol:     corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}},
			wantErr: `volume "v": type persistentVolumeClaim is not supported by the process provider`,
		},
		{
			name:    "csi",
			vol:     corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "x"}},
			wantErr: `volume "v": type csi is not supported by the process provider`,
		},
		{
			name: "hostPath DirectoryOrCreate",
			vol:  hp(filepath.Join(hostDir, "made/here"), corev1.HostPathDirectoryOrCreate),
			check: func(t *testing.T, f *fixture, dir string) {
				if dir != filepath.Join(hostDir, "made/here") {
					t.Errorf("path = %s", dir)
				}
				if info, err := os.Stat(dir); err != nil || !info.IsDir() {
					t.Errorf("not created: %v", err)
				}
			},
		},
		{
			name: "hostPath FileOrCreate",
			vol:  hp(filepath.Join(hostDir, "new-file"), corev1.HostPathFileOrCreate),
			check: func(t *testing.T, f *fixture, dir string) {
				if info, err := os.Stat(dir); err != nil || !info.Mode().IsRegular() {
					t.Errorf("not created: %v", err)
				}
			},
		},
		{name: "hostPath unchecked", vol: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/does/not/exist"}}},
		{name: "hostPath Directory", vol: hp(hostDir, corev1.HostPathDirectory)},
		{name: "hostPath File", vol: hp(filepath.Join(hostDir, "file"), corev1.HostPathFile)},
		{name: "hostPath Socket", vol: hp(sock, corev1.HostPathSocket)},
		{name: "hostPath CharDevice", vol: hp("/dev/null", corev1.HostPathCharDev)},
		{
			name:    "hostPath Directory missing",
			vol:     hp(filepath.Join(hostDir, "nope"), corev1.HostPathDirectory),
			wantErr: fmt.Sprintf(`volume "v": hostPath type check failed: %s/nope is not a directory`, hostDir),
		},
		{
			name:    "hostPath File is a directory",
			vol:     hp(hostDir, corev1.HostPathFile),
			wantErr: fmt.Sprintf(`volume "v": hostPath type check failed: %s is not a file`, hostDir),
		},
		{
			name:    "hostPath Socket is a file",
			vol:     hp(filepath.Join(hostDir, "file"), corev1.HostPathSocket),
			wantErr: fmt.Sprintf(`volume "v": hostPath type check failed: %s/file is not a socket`, hostDir),
		},
		{
			name:    "hostPath BlockDevice is a char device",
			vol:     hp("/dev/null", corev1.HostPathBlockDev),
			wantErr: `volume "v": hostPath type check failed: /dev/null is not a block device`,
		},
		{
			name:    "hostPath FileOrCreate without parent",
			vol:     hp(filepath.Join(hostDir, "no/parent"), corev1.HostPathFileOrCreate),
			wantErr: fmt.Sprintf(`volume "v": hostPath %s/no/parent: create file: open %s/no/parent: no such file or directory`, hostDir, hostDir),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, tt.objs...)
			p := pod(corev1.Volume{Name: "v", VolumeSource: tt.vol})
			paths, err := f.m.SetUp(context.Background(), p)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("error = %v\nwant %s", err, tt.wantErr)
				}
				if err := f.m.TearDown(context.Background(), p); err != nil {
					t.Fatal(err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.check != nil {
				tt.check(t, f, paths["v"])
			}
			// Idempotent: the same paths again, no new token.
			tokens := f.tokens.Load()
			again, err := f.m.SetUp(context.Background(), p)
			if err != nil {
				t.Fatal(err)
			}
			if again["v"] != paths["v"] || f.tokens.Load() != tokens {
				t.Errorf("second SetUp: %v (tokens %d → %d)", again, tokens, f.tokens.Load())
			}
			if err := f.m.TearDown(context.Background(), p); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(f.root, "pods/uid-1/volumes")); !os.IsNotExist(err) {
				t.Errorf("volumes directory left after TearDown: %v", err)
			}
		})
	}
}

func TestSetUpReportsEveryFailingVolume(t *testing.T) {
	f := newFixture(t)
	p := pod(
		corev1.Volume{Name: "a", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "x"}}}},
		corev1.Volume{Name: "b", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		corev1.Volume{Name: "c", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{}}},
	)
	_, err := f.m.SetUp(context.Background(), p)
	want := "volume \"a\": configmap app/x not found\nvolume \"c\": type ephemeral is not supported by the process provider"
	if err == nil || err.Error() != want {
		t.Fatalf("error = %v, want %s", err, want)
	}
}

// TestRefreshIsAtomic changes a ConfigMap, runs a refresh round and checks
// that the file changed through a new ..data while a reader of the old file
// keeps its contents.
func TestRefreshIsAtomic(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, cm("cfg", map[string]string{"app.conf": "v1", "old": "x"}))
	p := pod(corev1.Volume{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}})
	paths, err := f.m.SetUp(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	dir := paths["config"]
	before, err := os.Readlink(filepath.Join(dir, dataLink))
	if err != nil {
		t.Fatal(err)
	}
	reader, err := os.Open(filepath.Join(dir, "app.conf"))
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()

	// Nothing changed: no swap.
	f.m.syncAll(ctx)
	if now, _ := os.Readlink(filepath.Join(dir, dataLink)); now != before {
		t.Fatalf("..data swapped without a change: %s → %s", before, now)
	}

	if _, err := f.client.CoreV1().ConfigMaps("app").Update(ctx, cm("cfg", map[string]string{"app.conf": "v2", "new": "y"}), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.clock.Step(10 * time.Second)
	f.m.syncAll(ctx)

	after, err := os.Readlink(filepath.Join(dir, dataLink))
	if err != nil {
		t.Fatal(err)
	}
	if after == before {
		t.Fatalf("..data still points at %s", before)
	}
	if _, err := os.Stat(filepath.Join(dir, before)); !os.IsNotExist(err) {
		t.Errorf("old version %s not removed: %v", before, err)
	}
	if got := readFile(t, filepath.Join(dir, "app.conf")); got != "v2" {
		t.Errorf("app.conf = %q, want v2", got)
	}
	if got := visible(t, dir); got != "app.conf,new" {
		t.Errorf("files = %s", got)
	}
	old, err := io.ReadAll(reader)
	if err != nil || string(old) != "v1" {
		t.Errorf("open reader read %q, %v; want v1", old, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 4 { // ..data, one version, two links
		t.Errorf("directory holds %d entries, want 4", len(entries))
	}
}

// TestRunRefreshes drives Run with the fake clock and polls for the change.
func TestRunRefreshes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	f := newFixture(t, cm("cfg", map[string]string{"k": "v1"}))
	p := pod(corev1.Volume{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}})
	paths, err := f.m.SetUp(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- f.m.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	if _, err := f.client.CoreV1().ConfigMaps("app").Update(ctx, cm("cfg", map[string]string{"k": "v2"}), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if b, _ := os.ReadFile(filepath.Join(paths["config"], "k")); string(b) == "v2" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("volume not refreshed before the deadline")
		}
		if f.clock.HasWaiters() {
			f.clock.Step(DefaultSyncPeriod)
		}
		time.Sleep(5 * time.Millisecond) // polling interval, not synchronisation
	}
}

func TestTokenRefresh(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	p := pod(corev1.Volume{Name: "kube-api-access", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
		{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr[int64](3600)}},
	}}}})
	paths, err := f.m.SetUp(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(paths["kube-api-access"], "token")
	steps := []struct {
		advance time.Duration
		want    string
	}{
		{10 * time.Minute, "token-1"},
		{37 * time.Minute, "token-1"}, // 47 min: under 80% of an hour
		{1 * time.Minute, "token-2"},  // 48 min: renewed
		{40 * time.Minute, "token-2"},
		{8 * time.Minute, "token-3"},
	}
	for _, s := range steps {
		f.clock.Step(s.advance)
		f.m.syncAll(ctx)
		if got := readFile(t, tokenFile); got != s.want {
			t.Fatalf("at %v token = %q, want %q", f.clock.Since(t0), got, s.want)
		}
	}

	// A day-long token is renewed after at most 24h.
	if got := (&token{issued: t0, expires: t0.Add(7 * 24 * time.Hour)}).due(t0.Add(24 * time.Hour)); !got {
		t.Error("a week-long token is not due after a day")
	}
}

func TestTokenRenewalFailureKeepsValidToken(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	p := pod(corev1.Volume{Name: "t", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
		{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}},
	}}}})
	paths, err := f.m.SetUp(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	f.client.PrependReactor("create", "serviceaccounts", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, fmt.Errorf("apiserver down")
	})
	f.clock.Step(50 * time.Minute)
	f.m.syncAll(ctx)
	if got := readFile(t, filepath.Join(paths["t"], "token")); got != "token-1" {
		t.Errorf("token = %q, want the old one kept", got)
	}
}

func TestTearDown(t *testing.T) {
	ctx := context.Background()
	host := t.TempDir()
	keep := filepath.Join(host, "keep")
	if err := os.WriteFile(keep, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, cm("cfg", map[string]string{"k": "v"}))
	p := pod(
		corev1.Volume{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: host}}},
		corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		corev1.Volume{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}},
	)
	paths, err := f.m.SetUp(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(paths["scratch"], "data"), []byte("d"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A link in the emptyDir to the host path must be removed, not followed.
	if err := os.Symlink(host, filepath.Join(paths["scratch"], "link")); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := f.m.TearDown(ctx, p); err != nil {
			t.Fatalf("TearDown #%d: %v", i+1, err)
		}
	}
	if got := readFile(t, keep); got != "precious" {
		t.Errorf("hostPath file = %q", got)
	}
	if _, err := os.Stat(filepath.Join(f.root, "pods/uid-1/volumes")); !os.IsNotExist(err) {
		t.Errorf("volumes left: %v", err)
	}
	// Unregistered: a refresh round does not recreate anything.
	f.m.syncAll(ctx)
	if _, err := os.Stat(filepath.Join(f.root, "pods/uid-1/volumes")); !os.IsNotExist(err) {
		t.Errorf("refresh recreated volumes of a torn down pod: %v", err)
	}
	// A pod this manager never saw tears down cleanly too.
	other := pod()
	other.UID = "never-seen"
	if err := f.m.TearDown(ctx, other); err != nil {
		t.Error(err)
	}
}

// A file system mounted inside a volume, as a container whose mount of it
// propagates to the host (Bidirectional) leaves one, is unmounted with the
// volume: it would keep the volume, and so the pod, from being removed
// (the node suite's recursive read-only mount spec mounts a tmpfs into an
// emptyDir). What was in it is not removed file by file: the tear-down
// never descends into a mount point.
func TestTearDownUnmountsWhatIsMountedInside(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount")
	}
	ctx := context.Background()
	f := newFixture(t)
	p := pod(corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	paths, err := f.m.SetUp(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	nested := filepath.Join(paths["scratch"], "nested")
	deeper := filepath.Join(nested, "deeper")
	if err := os.Mkdir(nested, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := ensureTmpfs(nested, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unmountIfMounted(deeper); _ = unmountIfMounted(nested) })
	if err := os.Mkdir(deeper, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := ensureTmpfs(deeper, "size=1m"); err != nil {
		t.Fatal(err)
	}
	if err := f.m.TearDown(ctx, p); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{deeper, nested} {
		if mounted, err := isMountPoint(d); err != nil || mounted {
			t.Errorf("%s still mounted (%v)", d, err)
		}
	}
	if _, err := os.Stat(paths["scratch"]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the volume is still there: %v", err)
	}
}

func TestMemoryEmptyDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount tmpfs")
	}
	ctx := context.Background()
	f := newFixture(t)
	p := pod(corev1.Volume{Name: "mem", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
		Medium: corev1.StorageMediumMemory, SizeLimit: ptr(resource.MustParse("1Mi")),
	}}})
	paths, err := f.m.SetUp(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	dir := paths["mem"]
	if mounted, err := isMountPoint(dir); err != nil || !mounted {
		t.Fatalf("not mounted: %v", err)
	}
	if info, err := os.Stat(dir); err != nil || info.Mode()&os.ModeSticky == 0 || info.Mode().Perm() != 0o777 {
		t.Errorf("tmpfs root mode %v (%v), want 1777 as the kubelet's", info.Mode(), err)
	}
	if _, err := f.m.SetUp(ctx, p); err != nil { // no second mount
		t.Fatal(err)
	}
	mountinfo := readFile(t, "/proc/self/mountinfo")
	if n := strings.Count(mountinfo, " "+dir+" "); n != 1 {
		t.Errorf("%s mounted %d times", dir, n)
	}
	// The size limit holds.
	if err := os.WriteFile(filepath.Join(dir, "big"), make([]byte, 2<<20), 0o644); err == nil {
		t.Error("wrote 2 MiB into a 1 MiB tmpfs")
	}
	if m := mode(t, dir); m != 0o777 {
		t.Errorf("mode = %v", m)
	}
	if err := f.m.TearDown(ctx, p); err != nil {
		t.Fatal(err)
	}
	if mounted, _ := isMountPoint(dir); mounted {
		t.Error("still mounted")
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("directory left: %v", err)
	}
}

// With fsGroup, volumes belong to the group: secret files readable by it,
// an emptyDir writable by it and keeping new files in it.
func TestFSGroup(t *testing.T) {
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "sec"}, Data: map[string][]byte{"data-1": []byte("x")}}
	f := newFixture(t, sec)
	p := pod(
		corev1.Volume{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "sec", DefaultMode: ptr[int32](0o400)}}},
		corev1.Volume{Name: "e", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	)
	p.Spec.SecurityContext = &corev1.PodSecurityContext{FSGroup: ptr[int64](1234)}
	paths, err := f.m.SetUp(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.m.TearDown(context.Background(), p) })
	check := func(path string, wantPerm os.FileMode, wantSetgid bool) {
		t.Helper()
		info, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if gid := info.Sys().(*syscall.Stat_t).Gid; gid != 1234 {
			t.Errorf("%s: group %d, want 1234", path, gid)
		}
		if info.Mode().Perm() != wantPerm || (info.Mode()&os.ModeSetgid != 0) != wantSetgid {
			t.Errorf("%s: mode %v, want %v (setgid %v)", path, info.Mode(), wantPerm, wantSetgid)
		}
	}
	check(filepath.Join(paths["s"], "data-1"), 0o440, false)
	check(paths["e"], 0o777, true)

	// A subPath directory made for a container takes the volume's mode,
	// set-group-ID bit included.
	p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "e", MountPath: "/data", SubPath: "new/dir"}}
	mounts, err := ContainerMounts(p, &p.Spec.Containers[0], paths, nil)
	if err != nil {
		t.Fatal(err)
	}
	check(mounts[0].Source, 0o777, true)
}
