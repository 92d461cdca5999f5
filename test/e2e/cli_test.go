package e2e

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

// runNodelet runs bin/nodelet to completion (at most 30 s) and returns its
// standard error.
func runNodelet(t *testing.T, args ...string) (stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(root, "bin/nodelet"), args...)
	var buf bytes.Buffer
	cmd.Stderr = &buf
	err = cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("nodelet %v still running after 30s, want it to exit at once:\n%s", args, buf.String())
	}
	return buf.String(), err
}

func TestBadInputExits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want string // what stderr must name
	}{
		{"unreadable kubeconfig", []string{"--kubeconfig", "/nonexistent/kc", "--node-name", "n"}, "/nonexistent/kc"},
		{"invalid node name", []string{"--kubeconfig", kubeconfig, "--node-name", "Bad_Name"}, "nodeName"},
		{"unknown provider", []string{"--kubeconfig", kubeconfig, "--node-name", "n", "--provider", "nope"}, "provider"},
		{"negative lease duration", []string{"--kubeconfig", kubeconfig, "--node-name", "n", "--node-lease-duration-seconds", "-1"}, "nodeLeaseDurationSeconds"},
		{"unknown flag", []string{"--kubeconfig", kubeconfig, "--node-name", "n", "--no-such-flag"}, "no-such-flag"},
		{"bad annotation selector", []string{"--kubeconfig", kubeconfig, "--manage-nodes-with-annotation-selector", "a==b=c"}, "--manage-nodes-with-annotation-selector"},
		{"all nodes and a selector", []string{"--kubeconfig", kubeconfig, "--manage-all-nodes", "--manage-nodes-with-label-selector", "a=b"}, "--manage-all-nodes conflicts"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			stderr, err := runNodelet(t, tt.args...)
			if err == nil {
				t.Fatalf("nodelet %v exited 0, want an error", tt.args)
			}
			if !strings.Contains(stderr, tt.want) {
				t.Errorf("nodelet %v said %q on stderr, want it to name %q", tt.args, stderr, tt.want)
			}
		})
	}
}

func TestBadConfigFileNamesFieldAndFile(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "nodelet.yaml", "apiVersion: nodelet.io/v1alpha1\nkind: NodeletConfiguration\nnodeName: n\npingIntervall: 5s\n")
	stderr, err := runNodelet(t, "--kubeconfig", kubeconfig, "--config", path)
	if err == nil || !strings.Contains(stderr, "pingIntervall") || !strings.Contains(stderr, path) {
		t.Errorf("unknown config field: err %v, stderr %q; want an error naming the field and the file", err, stderr)
	}
}

var retryLine = regexp.MustCompile(`(?i)retry|backoff|connection refused`)

// retryLines counts the log lines that tell of a failed attempt.
func retryLines(log string) int {
	n := 0
	for _, line := range strings.Split(log, "\n") {
		if retryLine.MatchString(line) {
			n++
		}
	}
	return n
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
	eventually(t, 60*time.Second, "two retries logged", func() (bool, string) {
		if done, err := a.exited(); done {
			t.Fatalf("nodelet exited while the API server was down: %v\n%s", err, lastLines(a.logText(), 20))
		}
		return retryLines(a.logText()) >= 2, lastLines(a.logText(), 5)
	})
	if done, err := a.exited(); done {
		t.Fatalf("nodelet exited while the API server was down: %v", err)
	}
	a.stop() // fails the test unless it exits 0
}
