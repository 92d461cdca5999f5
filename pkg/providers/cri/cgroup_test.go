package cri

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nodelet/nodelet/pkg/mountinfo"
)

// A pod cgroup that still holds a container the runtime lost (killed while
// it started it) is emptied and removed with what is below it: the pod's
// deletion once stayed stuck on "device or resource busy".
func TestRemoveCgroupTreeKillsWhatTheRuntimeLost(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("creating cgroups needs root")
	}
	hierarchies, err := mountinfo.CgroupHierarchies()
	if err != nil || len(hierarchies) == 0 {
		t.Skipf("no cgroup hierarchy: %v", err)
	}
	var h string
	for _, c := range hierarchies {
		if _, err := os.Stat(filepath.Join(c, "cgroup.procs")); err == nil {
			h = c
			break
		}
	}
	if h == "" {
		t.Skip("no writable cgroup hierarchy")
	}
	pod := filepath.Join(h, "nodelet-test-"+strconv.Itoa(os.Getpid()), "pod")
	lost := filepath.Join(pod, "lost-container")
	if err := os.MkdirAll(lost, 0o755); err != nil {
		t.Skipf("cannot create a cgroup: %v", err)
	}
	defer os.Remove(filepath.Dir(pod))
	sleep := exec.Command("sleep", "600")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- sleep.Wait() }()
	defer sleep.Process.Kill()
	if err := os.WriteFile(filepath.Join(lost, "cgroup.procs"), []byte(strconv.Itoa(sleep.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(pod); err == nil {
		t.Fatal("a cgroup with a process below it was removed by rmdir alone; the test proves nothing")
	}
	if err := removeCgroupTree(pod); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(pod); !os.IsNotExist(err) {
		t.Errorf("pod cgroup still there: %v", err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Error("the process of the lost container still runs")
	}
}
