package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

func writeFile(path, content string) error { return os.WriteFile(path, []byte(content), 0o600) }

func TestBadInputExits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unreadable kubeconfig", []string{"--kubeconfig", "/nonexistent/kc", "--node-name", "n"}, "/nonexistent/kc"},
		{"invalid node name", []string{"--kubeconfig", kubeconfig, "--node-name", "Bad_Name"}, "nodeName"},
		{"unknown provider", []string{"--kubeconfig", kubeconfig, "--node-name", "n", "--provider", "nope"}, "provider"},
		{"negative lease duration", []string{"--kubeconfig", kubeconfig, "--node-name", "n", "--node-lease-duration-seconds", "-1"}, "nodeLeaseDurationSeconds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := exec.Command(filepath.Join(root, "bin/nodelet"), tt.args...).CombinedOutput()
			if err == nil {
				t.Fatalf("nodelet %v exited 0, want an error", tt.args)
			}
			if !strings.Contains(string(out), tt.want) {
				t.Errorf("nodelet %v said %q, want it to name %q", tt.args, out, tt.want)
			}
		})
	}
}

func TestBadConfigFileNamesFieldAndFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "nodelet.yaml")
	if err := writeFile(path, "apiVersion: nodelet.io/v1alpha1\nkind: NodeletConfiguration\nnodeName: n\npingIntervall: 5s\n"); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(root, "bin/nodelet"), "--kubeconfig", kubeconfig, "--config", path).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "pingIntervall") || !strings.Contains(string(out), path) {
		t.Errorf("unknown config field: err %v, output %q; want an error naming the field and the file", err, out)
	}
}

func TestAPIServerDownIsRetried(t *testing.T) {
	t.Parallel()
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		c.Server = "https://127.0.0.1:1"
	}
	path := filepath.Join(t.TempDir(), "down.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	a := startNodelet(t, uniqueName(t), "--kubeconfig", path)
	eventually(t, 30*time.Second, "retries logged", func() (bool, string) {
		return strings.Count(a.logText(), "connection refused") >= 2, lastLines(a.logText(), 5)
	})
	select {
	case err := <-a.done:
		t.Fatalf("nodelet exited while the API server was down: %v", err)
	default:
	}
}
