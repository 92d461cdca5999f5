package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The `nodelet config` commands and a bad --config: they need no cluster.

// runNodeletOutput runs bin/nodelet to completion (at most 30 s) and
// returns its standard output and standard error.
func runNodeletOutput(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(root, "bin/nodelet"), args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("nodelet %v still running after 30s, want it to exit at once:\n%s", args, errOut.String())
	}
	return out.String(), errOut.String(), err
}

func TestConfigDefaultsCommand(t *testing.T) {
	t.Parallel()
	out, stderr, err := runNodeletOutput(t, "config", "defaults")
	if err != nil {
		t.Fatalf("nodelet config defaults: %v\n%s", err, stderr)
	}
	for _, want := range []string{"apiVersion: nodelet.io/v1alpha1", "kind: NodeletConfiguration", "configTrialDuration: 10m0s", "nodeLeaseDurationSeconds: 40"} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("nodelet config defaults does not print %q:\n%s", want, out)
		}
	}
	// What it prints is a config file the agent takes, given a node name.
	path := writeFile(t, "defaults.yaml", out)
	if out, stderr, err := runNodeletOutput(t, "config", "validate", "--node-name", "n", path); err != nil || !strings.Contains(out, "valid") {
		t.Errorf("the printed defaults do not validate: %v, stdout %q, stderr %q", err, out, stderr)
	}
}

func TestConfigValidateCommand(t *testing.T) {
	t.Parallel()
	const header = "apiVersion: nodelet.io/v1alpha1\nkind: NodeletConfiguration\n"
	good := writeFile(t, "good.yaml", header+"nodeName: node-1\nconfigTrialDuration: 2m\n")
	out, stderr, err := runNodeletOutput(t, "config", "validate", good)
	if err != nil || !strings.Contains(out, good+" is valid") {
		t.Errorf("valid file: %v, stdout %q, stderr %q; want exit 0 saying it is valid", err, out, stderr)
	}

	tests := []struct {
		name    string
		content string
		want    []string // every one on standard error
	}{
		{"invalid values", header + "nodeName: node-1\nnodeStatusReportFrequency: -1m\nport: 70000\nconfigTrialDuration: -1s\n",
			[]string{"nodeStatusReportFrequency: Invalid value", "port: Invalid value", "configTrialDuration: Invalid value"}},
		{"unknown fields", header + "nodeName: node-1\nnodeLables: {}\nsim:\n  startDelays: 1s\n",
			[]string{`unknown field "nodeLables"`, `unknown field "sim.startDelays"`}},
		{"other version", "apiVersion: nodelet.io/v1beta9\nkind: NodeletConfiguration\n",
			[]string{"apiVersion: Unsupported value", "nodelet.io/v1beta9"}},
		{"mistyped value", header + "nodeName: node-1\npingInterval: often\n",
			[]string{`pingInterval: Invalid value: "often"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := writeFile(t, "bad.yaml", tt.content)
			out, stderr, err := runNodeletOutput(t, "config", "validate", path)
			if err == nil {
				t.Fatalf("nodelet config validate exited 0 for\n%s\nstdout %q", tt.content, out)
			}
			for _, w := range append(tt.want, path) {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %q does not say %q", stderr, w)
				}
			}
		})
	}
}

func TestConfigInvalidFileWritesNothing(t *testing.T) {
	t.Parallel()
	rootDir := t.TempDir()
	path := writeFile(t, "nodelet.yaml", "apiVersion: nodelet.io/v1alpha1\nkind: NodeletConfiguration\nnodeName: node-1\npingInterval: -5s\n")
	stderr, err := runNodelet(t, "--kubeconfig", kubeconfig, "--config", path, "--root-dir", rootDir)
	if err == nil || !strings.Contains(stderr, "pingInterval") || !strings.Contains(stderr, path) {
		t.Errorf("invalid value: err %v, stderr %q; want an error naming the field and the file", err, stderr)
	}
	if entries, err := os.ReadDir(rootDir); err != nil || len(entries) != 0 {
		t.Errorf("the agent wrote %v under its root dir (%v) before refusing its config", entries, err)
	}
}
