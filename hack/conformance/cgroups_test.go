package main

import (
	"os"
	"path/filepath"
	"testing"
)

// A cgroup made in a cpuset hierarchy takes its parent's CPUs and memory
// nodes; elsewhere, and where they are set, nothing is written.
func TestMakeCgroup(t *testing.T) {
	for _, tc := range []struct {
		name        string
		parent, own string // cpuset.cpus of the parent, and of the new cgroup as the kernel makes it ("-": no such file)
		wantCPUs    string
	}{
		{name: "cpuset hierarchy", parent: "0-1\n", own: "\n", wantCPUs: "0-1\n"},
		{name: "already set", parent: "0-1\n", own: "1\n", wantCPUs: "1\n"},
		{name: "no cpuset", parent: "-", own: "-"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			dir := "/run-1/system"
			if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
				t.Fatal(err)
			}
			for path, content := range map[string]string{"run-1/cpuset.cpus": tc.parent, "run-1/system/cpuset.cpus": tc.own} {
				if content == "-" {
					continue
				}
				if err := os.WriteFile(filepath.Join(root, path), []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := makeCgroup(root, dir); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(filepath.Join(root, dir, "cpuset.cpus"))
			if tc.own == "-" {
				if err == nil {
					t.Errorf("wrote cpuset.cpus %q in a hierarchy without cpusets", got)
				}
				return
			}
			if string(got) != tc.wantCPUs {
				t.Errorf("cpuset.cpus = %q, want %q", got, tc.wantCPUs)
			}
		})
	}
}

// The base cgroup hands its cgroup v2 controllers to its children; a
// hierarchy without any is left as it is.
func TestDelegateControllers(t *testing.T) {
	for _, tc := range []struct {
		name, controllers, want string
	}{
		{name: "cgroup v2", controllers: "cpu io memory pids\n", want: "+cpu +io +memory +pids"},
		{name: "hybrid unified hierarchy", controllers: "\n"},
		{name: "cgroup v1", controllers: "-"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.controllers != "-" {
				if err := os.WriteFile(filepath.Join(dir, "cgroup.controllers"), []byte(tc.controllers), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := delegateControllers(dir); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
			if tc.want == "" {
				if err == nil {
					t.Errorf("wrote %q", got)
				}
				return
			}
			if string(got) != tc.want {
				t.Errorf("subtree_control %q, want %q", got, tc.want)
			}
		})
	}
}
