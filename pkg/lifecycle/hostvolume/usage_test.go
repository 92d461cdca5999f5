package hostvolume

import (
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// An emptyDir's usage is the blocks and inodes of what the pod wrote in it.
func TestEmptyDirUsage(t *testing.T) {
	root := t.TempDir()
	m := NewManager(fake.NewClientset(), Options{RootDir: root})
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "u1"}, Spec: corev1.PodSpec{Volumes: []corev1.Volume{
		{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "unset", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}}}
	dir := filepath.Join(root, "pods", "u1", "volumes", pluginEmptyDir, "scratch")
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sub", "data"), make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	got := m.Usage(pod)
	if len(got) != 2 || got[0].Name != "scratch" || got[0].Bytes < 1<<20 || got[0].Inodes != 3 {
		t.Fatalf("usage %+v, want scratch with at least 1 MiB in 3 inodes", got)
	}
	if got[1].Bytes != 0 || got[1].Inodes != 0 || got[1].Fs != nil {
		t.Errorf("a volume not set up counts %+v, want nothing", got[1])
	}
	// The filesystem the volume is on, as the summary reports it beside
	// the usage.
	fs := got[0].Fs
	if fs == nil || fs.CapacityBytes == 0 || fs.AvailableBytes > fs.CapacityBytes || fs.Inodes == 0 || fs.InodesFree > fs.Inodes {
		t.Errorf("volume filesystem %+v, want the size of the one under %s", fs, root)
	}
}
