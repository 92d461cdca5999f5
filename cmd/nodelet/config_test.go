package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/nodelet/nodelet/pkg/config"
)

func TestConfigDefaultsLoadsBack(t *testing.T) {
	var out bytes.Buffer
	if err := runConfig([]string{"defaults"}, &out); err != nil {
		t.Fatal(err)
	}
	c, err := config.Decode(out.Bytes(), "config defaults")
	if err != nil {
		t.Fatalf("the printed defaults do not decode: %v\n%s", err, out.String())
	}
	again, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if string(again) != out.String() {
		t.Errorf("the printed defaults changed in a round trip:\n%s\nbecame\n%s", out.String(), again)
	}
	c.NodeName = "n"
	if errs := c.Validate(); len(errs) > 0 {
		t.Errorf("the printed defaults with a node name are invalid: %v", errs)
	}
	for _, want := range []string{"apiVersion: nodelet.io/v1alpha1", "kind: NodeletConfiguration", "configTrialDuration: 10m0s"} {
		if !strings.Contains(out.String(), want+"\n") {
			t.Errorf("defaults do not say %q:\n%s", want, out.String())
		}
	}
}

func TestConfigValidate(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	const header = "apiVersion: nodelet.io/v1alpha1\nkind: NodeletConfiguration\n"
	good := write("good.yaml", header+"nodeName: a\nconfigTrialDuration: 1m\n")
	fleet := write("fleet.yaml", header+"nodes: 100\nnodeStatusReportFrequency: 1m\n")
	unknown := write("unknown.yaml", header+"nodeName: a\npingIntervall: 5s\nsim:\n  foo: 1\n")
	invalid := write("invalid.yaml", header+"nodeName: Bad_Name\nport: 70000\npingInterval: -1s\nconfigTrialDuration: -1m\n")

	tests := []struct {
		name    string
		args    []string
		wantOut string   // in stdout, on success
		wantErr []string // each in the error; nil for success
		lines   int      // lines of the error, if not 0
	}{
		{"valid", []string{good}, "config file " + good + " is valid", nil, 0},
		{"flags over the file", []string{"--node-name", "n-1", fleet}, "is valid", nil, 0},
		{"file without its flags", []string{fleet}, "", []string{fleet, "nodeName: Required value"}, 2},
		{"unknown fields", []string{unknown}, "", []string{unknown, `unknown field "pingIntervall"`, `unknown field "sim.foo"`}, 3},
		{"invalid values, every one", []string{invalid}, "", []string{invalid + " is invalid", "nodeName: Invalid value", "port: Invalid value",
			"pingInterval: Invalid value", "configTrialDuration: Invalid value"}, 5},
		{"flag makes it invalid", []string{"--port", "0", good}, "", []string{"port: Invalid value"}, 2},
		{"missing file", []string{filepath.Join(dir, "missing.yaml")}, "", []string{"missing.yaml"}, 0},
		{"no file", nil, "", []string{"want one FILE"}, 0},
		{"two files", []string{good, good}, "", []string{"want one FILE"}, 0},
		{"--config", []string{"--config", good, good}, "", []string{"not with --config"}, 0},
		{"unknown flag", []string{"--no-such-flag", good}, "", []string{"no-such-flag"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			err := runConfig(append([]string{"validate"}, tt.args...), &out)
			if tt.wantErr == nil {
				if err != nil || !strings.Contains(out.String(), tt.wantOut) {
					t.Errorf("validate %v = %v, %q; want success saying %q", tt.args, err, out.String(), tt.wantOut)
				}
				return
			}
			if err == nil {
				t.Fatalf("validate %v succeeded: %q", tt.args, out.String())
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if n := strings.Count(err.Error(), "\n") + 1; tt.lines != 0 && n != tt.lines {
				t.Errorf("error has %d lines, want %d (a header and one a problem):\n%v", n, tt.lines, err)
			}
		})
	}
}

func TestConfigCommandErrors(t *testing.T) {
	var out bytes.Buffer
	for _, args := range [][]string{nil, {"nope"}, {"defaults", "extra"}} {
		if err := runConfig(args, &out); err == nil {
			t.Errorf("config %v succeeded", args)
		}
	}
	if err := runConfig([]string{"help"}, &out); err != nil || !strings.Contains(out.String(), "nodelet config validate") {
		t.Errorf("config help = %v, %q", err, out.String())
	}
}
