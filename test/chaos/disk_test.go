package chaos

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/nodelet/nodelet/test/fault"
)

// TestRootDirFull: the process agent's root directory (a 64 MiB tmpfs)
// fills up. Writes fail with a clear error and an Event; the agent keeps
// serving the pods it runs, restarts on the full disk without reading
// anything half-written, and recovers once space is freed.
func TestRootDirFull(t *testing.T) {
	r := begin(t, "root directory full (64 MiB tmpfs)")
	if !isRoot() {
		t.Skip("mounting a tmpfs and the process provider need root")
	}
	rootDir := t.TempDir()
	small, err := fault.MountSmallFS(rootDir, 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := small.Unmount(); err != nil {
			t.Error(err)
		}
	})
	// Disk-pressure eviction is off (startAgent's thresholds are memory
	// only): a kubelet would evict the pods of a full disk, and the
	// scenario is about the agent's own writes.
	prefix := name("disk")
	a := startAgent(t, prefix, agentOptions{provider: "process", rootDir: rootDir, extra: []string{"--address", "127.0.0.1"}})
	waitReady(t, time.Minute, a)
	ns := newNamespace(t, "disk")
	r.observe(ns, prefix, nil)
	out := t.TempDir()
	create(t, processPod(ns, "before", a.name, out))
	waitRunning(t, ns, time.Minute, "before")
	pods, _, err := running(ns)
	if err != nil {
		t.Fatal(err)
	}
	ids := containerIDs(pods, "before")

	if _, err := small.Fill(); err != nil {
		t.Fatal(err)
	}
	create(t, processPod(ns, "during", a.name, out))
	var warning string
	eventually(t, time.Minute, "a Warning Event on the pod that cannot start naming the full disk", func() (bool, string) {
		list, err := client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("involvedObject.name", "during").String()})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range list.Items {
			seen = append(seen, e.Type+" "+e.Reason+": "+e.Message)
			if e.Type == "Warning" && strings.Contains(e.Message, "no space left on device") {
				warning = e.Reason + ": " + e.Message
				return true, ""
			}
		}
		return false, fmt.Sprint(seen)
	})
	// The agent still serves the pod it ran, and a restart on the full
	// disk neither loses nor restarts it.
	a.Kill()
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "the restarted agent runs on the full disk", func() (bool, string) {
		if exited, err := a.Exited(); exited {
			t.Fatalf("the agent exited on a full disk: %v\n%s", err, lastLines(a.LogText(), 20))
		}
		return strings.Contains(a.LogText(), `"Nodes registered"`), "not registered yet"
	})
	waitReady(t, time.Minute, a)
	if len(hostPIDs(token(ns, "before"))) == 0 {
		t.Fatal("the pod that ran before the disk filled has no process")
	}

	if pods, _, err := running(ns); err == nil && pods["during"] != nil && isRunning(pods["during"]) {
		avail, _ := small.Available()
		t.Fatalf("the pod created on the full disk runs before space was freed (%d bytes available)", avail)
	}
	if err := small.Free(); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	waitRunning(t, ns, 2*time.Minute, "before", "during")
	recovered := time.Since(freed)
	pods, _, err = running(ns)
	if err != nil {
		t.Fatal(err)
	}
	if now := containerIDs(pods, "before"); now["before"] != ids["before"] {
		t.Errorf("the pod that ran before the disk filled has container %s, was %s", now["before"], ids["before"])
	}
	for _, n := range []string{"before", "during"} {
		if s := starts(t, out, n); s != 1 {
			t.Errorf("pod %s started %d times, want once", n, s)
		}
	}
	// Nothing half-written is left to be read back.
	_ = filepath.WalkDir(rootDir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.Contains(d.Name(), ".tmp") {
			t.Errorf("temporary file left in the root directory: %s", path)
		}
		return nil
	})
	if _, err := os.Stat(filepath.Join(rootDir, "fill")); err == nil {
		t.Error("the fill file is still there")
	}
	r.finish(limits{}, fmt.Sprintf(
		"%q; agent restarted on the full disk; the waiting pod ran %s after space was freed", warning, recovered.Round(time.Second)))
}
