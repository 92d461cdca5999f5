package env

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestParseEnvFile(t *testing.T) {
	const file = `# settings
  CONFIG_1='value one'
EMPTY= 'ignored'
MULTI='line 1
line 2' # a comment
`
	for _, tc := range []struct {
		key, want string
		found     bool
	}{
		{"CONFIG_1", "value one", true},
		{"EMPTY", "", true},
		{"MULTI", "line 1\nline 2", true},
		{"MISSING", "", false},
	} {
		got, found, err := parseEnvFile(strings.NewReader(file), tc.key)
		if err != nil || got != tc.want || found != tc.found {
			t.Errorf("%s: %q %v %v, want %q %v", tc.key, got, found, err, tc.want, tc.found)
		}
	}
	for _, bad := range []string{"NOEQUALS\n", "A = 'x'\n", "A=unquoted\n", "A='open\n", "A='x' trailing\n"} {
		if _, _, err := parseEnvFile(strings.NewReader(bad), "A"); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// A fileKeyRef reads its key from the env file in the pod's volume (the
// node e2e suite's "MirrorPod with EnvFiles"), leaves an optional missing
// key out, and refuses a file a container linked elsewhere.
func TestFileKeyRef(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.env"), []byte("CONFIG_1='v1'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(t.TempDir(), "secret.env")
	if err := os.WriteFile(secret, []byte("CONFIG_1='host secret'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(dir, "link.env")); err != nil {
		t.Fatal(err)
	}
	r := &resolver{node: NodeInfo{Volumes: map[string]string{"config": dir}}}
	if v, ok, err := r.fileKey(&corev1.FileKeySelector{VolumeName: "config", Path: "config.env", Key: "CONFIG_1"}); v != "v1" || !ok || err != nil {
		t.Errorf("CONFIG_1 = %q %v %v", v, ok, err)
	}
	if _, ok, err := r.fileKey(&corev1.FileKeySelector{VolumeName: "config", Path: "config.env", Key: "NOPE", Optional: ptr(true)}); ok || err != nil {
		t.Errorf("optional missing key: %v %v", ok, err)
	}
	if _, _, err := r.fileKey(&corev1.FileKeySelector{VolumeName: "config", Path: "config.env", Key: "NOPE"}); err == nil {
		t.Error("a missing key that is not optional was accepted")
	}
	if v, _, err := r.fileKey(&corev1.FileKeySelector{VolumeName: "config", Path: "link.env", Key: "CONFIG_1"}); err == nil {
		t.Errorf("a symbolic link was followed: %q", v)
	}
	if _, _, err := r.fileKey(&corev1.FileKeySelector{VolumeName: "other", Path: "config.env", Key: "CONFIG_1"}); err == nil {
		t.Error("an unknown volume was accepted")
	}
}
