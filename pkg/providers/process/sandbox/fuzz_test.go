package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodelet/nodelet/internal/fuzzcheck"
)

// FuzzSandboxRecords puts arbitrary bytes in the records of a pod's
// sandbox and of one attempt of a container (start and exit), as a crash
// or another hand may leave them, and adopts the sandboxes as a restarted
// agent does. Nothing may panic; an adopted sandbox is the pod's whose
// directory it is in, and names no cgroup but that pod's own (the agent
// kills every process of those cgroups and removes them with the pod); its
// record encodes to what loads as the same; the attempt, with no shim
// running, reads as exited with the exit record's figures, or, with
// neither a start nor an exit recorded, is no attempt; and adopting
// costs memory in proportion to the records.
func FuzzSandboxRecords(f *testing.F) {
	good, err := json.Marshal(sandboxRecord{
		Spec: SandboxSpec{UID: "uid-1", Namespace: "ns", Name: "web", Resources: Resources{MemoryLimitBytes: 1 << 20}},
		PID:  1 << 30, StartTime: 42,
		Cgroups: []string{filepath.Join(cgroupRoot, "nodelet", "poduid-1")}, CgroupV2: true,
	})
	if err != nil {
		f.Fatal(err)
	}
	start, _ := json.Marshal(startRecord{PID: 7, StartedAt: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)})
	exit, _ := json.Marshal(exitRecord{ExitCode: 1, Reason: ReasonError, FinishedAt: time.Date(2026, 1, 1, 0, 1, 0, 0, time.UTC)})
	for _, seed := range [][3]string{
		{string(good), string(start), string(exit)},
		{string(good), string(start), ""},
		{string(good), "", ""},
		{string(good[:len(good)/2]), string(start[:3]), string(exit[:5])},
		{`{"spec":{"UID":"uid-1"},"pid":-1}`, `{"pid":-5}`, `{"exitCode":-1,"signal":300}`},
		{`{"spec":{"UID":"uid-2"}}`, "", ""},
		{`{"spec":{"UID":"uid-1"},"cgroups":["/sys/fs/cgroup/system.slice"]}`, "", ""},
		{`{"spec":{"UID":"uid-1"},"cgroups":["/sys/fs/cgroup/../../home/poduid-1"]}`, "", ""},
		{"null", "null", "null"},
		{"", "", ""},
	} {
		f.Add([]byte(seed[0]), []byte(seed[1]), []byte(seed[2]))
	}
	root := f.TempDir()
	podDir := filepath.Join(root, "pods", "uid-1")
	attempt := filepath.Join(podDir, containersDir, "c", "0")
	f.Fuzz(func(t *testing.T, record, start, exit []byte) {
		if err := os.RemoveAll(podDir); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(attempt, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, data := range map[string][]byte{filepath.Join(podDir, sandboxFile): record, filepath.Join(attempt, stateFile): start, filepath.Join(attempt, exitFile): exit} {
			if len(data) == 0 {
				continue // the record was never written
			}
			if err := os.WriteFile(name, data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		// An attempt with neither a start nor an exit that reads never
		// started: it is no attempt.
		neverStarted := len(start) == 0 && !exitRecorded(attempt)
		m, err := NewManager(Options{RootDir: root, Exe: "/nonexistent"})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()

		var sandboxes []*Sandbox
		n := fuzzcheck.Allocated(func() { sandboxes, err = m.Sandboxes(ctx) })
		if err != nil {
			t.Fatalf("Sandboxes: %v", err)
		}
		if limit := fuzzcheck.Slack + 64*uint64(len(record)+len(start)+len(exit)); n > limit {
			t.Errorf("adopting records of %d bytes allocated %d bytes", len(record)+len(start)+len(exit), n)
		}
		if len(sandboxes) == 0 {
			return
		}
		s := sandboxes[0]
		if s.Spec().UID != "uid-1" {
			t.Fatalf("the sandbox in %s is adopted as pod %q's", podDir, s.Spec().UID)
		}
		for _, cg := range s.rec.Cgroups {
			if rel, err := filepath.Rel(cgroupRoot, cg); err != nil || strings.HasPrefix(rel, "..") || filepath.Base(cg) != "poduid-1" {
				t.Fatalf("the sandbox of pod uid-1 names cgroup %q, not its own", cg)
			}
		}
		encoded, err := json.Marshal(s.rec)
		if err != nil {
			t.Fatalf("an adopted record does not encode: %v", err)
		}
		var again sandboxRecord
		if err := json.Unmarshal(encoded, &again); err != nil {
			t.Fatalf("record %s does not decode: %v", encoded, err)
		}
		if reencoded, _ := json.Marshal(again); !bytes.Equal(reencoded, encoded) {
			t.Fatalf("record %s decodes as %s", encoded, reencoded)
		}

		st, ok := s.Container("c")
		if neverStarted {
			if ok {
				t.Fatalf("an attempt that never started reads as %+v; want none", st)
			}
			return
		}
		if !ok || st.State != StateExited || st.PID != 0 || st.Attempt != 0 {
			t.Fatalf("an attempt with no shim reads as %+v, %v; want exited", st, ok)
		}
		var want exitRecord
		if err := json.Unmarshal(exit, &want); err == nil && (st.ExitCode != want.ExitCode || st.Reason != want.Reason || !st.FinishedAt.Equal(want.FinishedAt)) {
			t.Fatalf("exit record %s reads as %+v", exit, st)
		}
	})
}
