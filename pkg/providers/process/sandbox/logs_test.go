package sandbox

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodelet/nodelet/pkg/nofollow"
)

// fixedClock steps one second per record, so that Since can be tested.
func steppingClock(start time.Time) func() time.Time {
	var n atomic.Int64
	return func() time.Time { return start.Add(time.Duration(n.Add(1)-1) * time.Second) }
}

func TestLogWriterAndReader(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	path := filepath.Join(t.TempDir(), "0.log")
	w, err := openLogWriter(path, 200, 4)
	if err != nil {
		t.Fatal(err)
	}
	w.now = steppingClock(start)
	long := strings.Repeat("x", maxLogLine+10)
	in := "a\nb\n" + long + "\nc\nd\ne\nf\ng\nh\ni\nj"
	pumpLog(strings.NewReader(in), "stdout", w, nil)
	w.Close()

	raw, _ := os.ReadFile(rotatedLogs(path)[0])
	if !bytes.Contains(raw, []byte(" stdout P xxx")) {
		// The long line is split, so its first record may be in any file.
		all := raw
		for _, f := range append(rotatedLogs(path), path) {
			b, _ := os.ReadFile(f)
			all = append(all, b...)
		}
		if !bytes.Contains(all, []byte(" stdout P xxx")) {
			t.Errorf("no partial record for the long line")
		}
	}
	read := func(opts LogOptions) string {
		t.Helper()
		var b bytes.Buffer
		if err := ReadLogs(context.Background(), filepath.Dir(path), path, opts, nil, &b); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	// 4 files of ~200 bytes keep the newest lines only: the long line
	// rotated out with its neighbours, "j" (no newline) is complete at EOF.
	got := read(LogOptions{TailLines: -1})
	if !strings.HasSuffix(got, "h\ni\nj\n") {
		t.Errorf("all = %q", got)
	}
	if got := read(LogOptions{TailLines: 2}); got != "i\nj\n" {
		t.Errorf("tail 2 = %q", got)
	}
	if got := read(LogOptions{TailLines: 0}); got != "" {
		t.Errorf("tail 0 = %q", got)
	}
	// Records are one second apart: a b long(P) long(F) c d e f g h i j at 0..11 s.
	if got := read(LogOptions{TailLines: -1, Since: start.Add(10 * time.Second)}); got != "i\nj\n" {
		t.Errorf("since = %q", got)
	}
	if got := read(LogOptions{TailLines: 1, Timestamps: true}); got != start.Add(11*time.Second).Format(time.RFC3339Nano)+" j\n" {
		t.Errorf("timestamps = %q", got)
	}
	if got := read(LogOptions{TailLines: 2, LimitBytes: 3}); got != "i\nj" {
		t.Errorf("limit = %q", got)
	}

	// A line longer than the record limit reads back whole.
	path2 := filepath.Join(t.TempDir(), "0.log")
	w2, _ := openLogWriter(path2, 0, 1)
	pumpLog(strings.NewReader(long+"\nend\n"), "stderr", w2, nil)
	w2.Close()
	var b bytes.Buffer
	if err := ReadLogs(context.Background(), filepath.Dir(path2), path2, LogOptions{TailLines: -1}, nil, &b); err != nil || b.String() != long+"\nend\n" {
		t.Errorf("long line read back wrong (%d bytes, %v)", b.Len(), err)
	}
}

func TestReadLogsFollowAcrossRotation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	w, err := openLogWriter(path, 120, 10) // two lines a file
	if err != nil {
		t.Fatal(err)
	}
	var running atomic.Bool
	running.Store(true)
	var out syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- ReadLogs(context.Background(), filepath.Dir(path), path, LogOptions{Follow: true, TailLines: -1}, running.Load, &out)
	}()
	var want strings.Builder
	for i := 0; i < 20; i++ {
		line := strings.Repeat(string(rune('a'+i)), 10)
		want.WriteString(line + "\n")
		w.record("stdout", false, []byte(line))
		if i == 5 {
			eventually(t, 10*time.Second, "followed lines", func() bool { return strings.Contains(out.String(), "ffff") })
		}
	}
	running.Store(false)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("follow did not end after the container stopped")
	}
	w.Close()
	if out.String() != want.String() {
		t.Errorf("followed\n%q\nwant\n%q", out.String(), want.String())
	}

	// Follow ends with ctx.
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		done <- ReadLogs(ctx, filepath.Dir(path), path, LogOptions{Follow: true, TailLines: 1}, func() bool { return true }, &bytes.Buffer{})
	}()
	cancel()
	select {
	case err := <-done:
		if err == nil {
			t.Error("follow ended by ctx returned no error")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("follow did not end with ctx")
	}
}

// TestLogSymlinksRefused plants the links a container that can write to its
// log directory could: the reader refuses them, and the writer appends to
// no file outside.
func TestLogSymlinksRefused(t *testing.T) {
	logs, outside := t.TempDir(), t.TempDir()
	secret := filepath.Join(outside, "0.log")
	const secretLine = "2025-01-01T00:00:00Z stdout F outside-secret\n"
	if err := os.WriteFile(secret, []byte(secretLine), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"file", "rotated"} {
		if err := os.MkdirAll(filepath.Join(logs, dir), 0o755); err != nil {
			t.Fatal(err)
		}
		w, err := openLogWriter(filepath.Join(logs, dir, "0.log"), 1<<20, 2)
		if err != nil {
			t.Fatal(err)
		}
		w.record("stdout", false, []byte("own line"))
		w.Close()
	}
	mustLink := func(target, path string) {
		t.Helper()
		if err := os.Symlink(target, path); err != nil {
			t.Fatal(err)
		}
	}
	// The current file, a rotated one, and the directory of another.
	if err := os.Remove(filepath.Join(logs, "file", "0.log")); err != nil {
		t.Fatal(err)
	}
	mustLink(secret, filepath.Join(logs, "file", "0.log"))
	mustLink(secret, filepath.Join(logs, "rotated", "0.log.1"))
	mustLink(outside, filepath.Join(logs, "dir"))

	for _, c := range []string{"file", "rotated", "dir"} {
		var b bytes.Buffer
		err := ReadLogs(context.Background(), logs, filepath.Join(logs, c, "0.log"), LogOptions{TailLines: -1}, nil, &b)
		if !errors.Is(err, nofollow.ErrSymlink) {
			t.Errorf("reading %s's log: %v, want %v", c, err, nofollow.ErrSymlink)
		}
		if strings.Contains(b.String(), "outside-secret") {
			t.Errorf("reading %s's log gave the other file: %q", c, b.String())
		}
	}
	// The shim reopens its log (on rotation, or a restarted container).
	if _, err := openLogWriter(filepath.Join(logs, "file", "0.log"), 1<<20, 2); !errors.Is(err, nofollow.ErrSymlink) {
		t.Errorf("opening a linked log to write: %v, want %v", err, nofollow.ErrSymlink)
	}
	if _, err := openLogWriter(filepath.Join(logs, "dir", "1.log"), 1<<20, 2); !errors.Is(err, nofollow.ErrSymlink) {
		t.Errorf("opening a log in a linked directory to write: %v, want %v", err, nofollow.ErrSymlink)
	}
	if data, _ := os.ReadFile(secret); string(data) != secretLine {
		t.Errorf("the file outside was written: %q", data)
	}
	if _, err := os.Stat(filepath.Join(outside, "1.log")); err == nil {
		t.Error("a log was created in the linked directory")
	}
}
