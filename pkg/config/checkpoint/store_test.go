package checkpoint

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testclock "k8s.io/utils/clock/testing"
)

var (
	t0   = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	srcA = Source{Namespace: "kube-system", Name: "nodelet", UID: "0b1c2d3e-aaaa-4bbb-8ccc-000000000001", ResourceVersion: "100"}
	srcB = Source{Namespace: "kube-system", Name: "nodelet", UID: srcA.UID, ResourceVersion: "101"}
	srcC = Source{Namespace: "default", Name: "other", UID: "0b1c2d3e-aaaa-4bbb-8ccc-000000000002", ResourceVersion: "7"}

	configA = []byte("apiVersion: nodelet.io/v1alpha1\nkind: NodeletConfiguration\npingInterval: 5s\n")
	configB = []byte("apiVersion: nodelet.io/v1alpha1\nkind: NodeletConfiguration\npingInterval: 6s\n")
)

func openTest(t *testing.T) (*Store, *testclock.FakePassiveClock) {
	t.Helper()
	clk := testclock.NewFakePassiveClock(t0)
	s, err := Open(t.TempDir(), WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	return s, clk
}

func mustSave(t *testing.T, s *Store, src Source, data []byte) {
	t.Helper()
	if err := s.Save(src, data); err != nil {
		t.Fatalf("Save(%s): %v", src, err)
	}
}

func TestOpenCreatesLocalRecords(t *testing.T) {
	root := t.TempDir()
	s, err := Open(root, WithClock(testclock.NewFakePassiveClock(t0)))
	if err != nil {
		t.Fatal(err)
	}
	if s.Dir() != filepath.Join(root, "config") {
		t.Errorf("Dir() = %s", s.Dir())
	}
	for _, get := range []func() (Record, error){s.Assigned, s.LastKnownGood} {
		r, err := get()
		if err != nil || r.Source != nil || !r.Time.Equal(t0) {
			t.Errorf("fresh record = %+v, %v; want the local config at %s", r, err, t0)
		}
	}
	if fi, err := os.Stat(filepath.Join(root, "config", "checkpoints")); err != nil || !fi.IsDir() {
		t.Errorf("checkpoints directory: %v", err)
	}
	entries, _ := os.ReadDir(root)
	if len(entries) != 1 {
		t.Errorf("root holds %d entries, want only config/", len(entries))
	}

	// Opening again keeps what is there.
	mustSave(t, s, srcA, configA)
	if err := s.SetAssigned(&srcA); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(root)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := s2.Assigned(); err != nil || r.Source == nil || *r.Source != srcA {
		t.Errorf("assigned after reopening = %+v, %v; want %s", r, err, srcA)
	}
}

func TestOpenRemovesAnInterruptedCreate(t *testing.T) {
	root := t.TempDir()
	leftover := filepath.Join(root, ".config.tmp-123")
	if err := os.MkdirAll(filepath.Join(leftover, "checkpoints"), 0o700); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(root, "pods")
	if err := os.Mkdir(other, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(root); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(leftover); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("leftover of an interrupted create still there: %v", err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("Open touched %s: %v", other, err)
	}
}

func TestSaveLoad(t *testing.T) {
	s, _ := openTest(t)
	mustSave(t, s, srcA, configA)
	mustSave(t, s, srcB, configB)
	for src, want := range map[Source][]byte{srcA: configA, srcB: configB} {
		got, err := s.Load(src)
		if err != nil || string(got) != string(want) {
			t.Errorf("Load(%s) = %q, %v; want %q", src, got, err, want)
		}
	}
	dir := filepath.Join(s.Dir(), "checkpoints", string(srcA.UID), srcA.ResourceVersion)
	if raw, err := os.ReadFile(filepath.Join(dir, DataFile)); err != nil || string(raw) != string(configA) {
		t.Errorf("%s holds %q, %v; want the config byte for byte", DataFile, raw, err)
	}
	meta, err := os.ReadFile(filepath.Join(dir, MetaFile))
	if err != nil || !strings.Contains(string(meta), Checksum(configA)) || !strings.Contains(string(meta), string(srcA.UID)) {
		t.Errorf("%s = %s, %v; want the source and the checksum", MetaFile, meta, err)
	}

	// The same bytes again: nothing is rewritten.
	before, _ := os.Stat(filepath.Join(dir, MetaFile))
	mustSave(t, s, srcA, configA)
	after, _ := os.Stat(filepath.Join(dir, MetaFile))
	if !os.SameFile(before, after) {
		t.Error("saving the same bytes again rewrote the checkpoint")
	}
	// Other bytes for the same source replace it.
	mustSave(t, s, srcA, configB)
	if got, err := s.Load(srcA); err != nil || string(got) != string(configB) {
		t.Errorf("after replacing, Load = %q, %v", got, err)
	}
	// An empty config is a config.
	mustSave(t, s, srcC, nil)
	if got, err := s.Load(srcC); err != nil || len(got) != 0 {
		t.Errorf("empty config: Load = %q, %v", got, err)
	}
	assertNoTemporaries(t, s.Dir())
}

func TestSaveRejects(t *testing.T) {
	s, _ := openTest(t)
	bad := srcA
	bad.UID = "../../etc"
	if err := s.Save(bad, configA); err == nil || !strings.Contains(err.Error(), "uid") {
		t.Errorf("Save with uid %q: %v, want an error naming the uid", bad.UID, err)
	}
	if err := s.Save(srcA, make([]byte, MaxSize+1)); err == nil {
		t.Error("Save of more than MaxSize bytes succeeded")
	}
	if _, err := s.Load(bad); err == nil {
		t.Error("Load of an invalid source succeeded")
	}
}

func TestSourceValidate(t *testing.T) {
	for _, tt := range []struct {
		src  Source
		want string // in the error; "" for valid
	}{
		{srcA, ""},
		{Source{Namespace: "ns", Name: "n", UID: "u", ResourceVersion: "1.2_3-x"}, ""},
		{Source{Name: "n", UID: "u", ResourceVersion: "1"}, "namespace"},
		{Source{Namespace: "ns", UID: "u", ResourceVersion: "1"}, "name"},
		{Source{Namespace: "ns", Name: "n", ResourceVersion: "1"}, "uid is empty"},
		{Source{Namespace: "ns", Name: "n", UID: "u"}, "resourceVersion is empty"},
		{Source{Namespace: "ns", Name: "n", UID: "..", ResourceVersion: "1"}, "uid starts with '.'"},
		{Source{Namespace: "ns", Name: "n", UID: "a/b", ResourceVersion: "1"}, "uid has '/'"},
		{Source{Namespace: "ns", Name: "n", UID: "u", ResourceVersion: "1\x00"}, "resourceVersion has"},
		{Source{Namespace: "ns", Name: "n", UID: "u", ResourceVersion: strings.Repeat("9", 254)}, "longer"},
	} {
		err := tt.src.Validate()
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("Validate(%+v) = %v, want %q", tt.src, err, tt.want)
		}
	}
}

func TestSourceOf(t *testing.T) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm", UID: "u-1", ResourceVersion: "42"}}
	if got := SourceOf(cm); got != (Source{Namespace: "ns", Name: "cm", UID: "u-1", ResourceVersion: "42"}) {
		t.Errorf("SourceOf = %+v", got)
	}
}

// corruptions damage a file the way disks and people do.
var corruptions = []struct {
	name    string
	damage  func(t *testing.T, path string)
	wantErr error
}{
	{"flipped byte", func(t *testing.T, p string) { flipByte(t, p, -1) }, ErrCorrupt},
	{"flipped first byte", func(t *testing.T, p string) { flipByte(t, p, 0) }, ErrCorrupt},
	{"truncated", func(t *testing.T, p string) { truncate(t, p, 0.5) }, ErrCorrupt},
	{"emptied", func(t *testing.T, p string) { truncate(t, p, 0) }, ErrCorrupt},
	{"appended to", func(t *testing.T, p string) { appendTo(t, p, "\nextra: 1\n") }, ErrCorrupt},
	{"deleted", func(t *testing.T, p string) { remove(t, p) }, fs.ErrNotExist},
}

func TestLoadDetectsCorruption(t *testing.T) {
	for _, file := range []string{DataFile, MetaFile} {
		for _, c := range corruptions {
			t.Run(file+" "+c.name, func(t *testing.T) {
				s, _ := openTest(t)
				mustSave(t, s, srcA, configA)
				path := filepath.Join(s.Dir(), "checkpoints", string(srcA.UID), srcA.ResourceVersion, file)
				c.damage(t, path)
				data, err := s.Load(srcA)
				if err == nil {
					t.Fatalf("Load of a checkpoint whose %s was %s returned %q", file, c.name, data)
				}
				if !errors.Is(err, c.wantErr) || !strings.Contains(err.Error(), path) {
					t.Errorf("error %q: want %v naming %s", err, c.wantErr, path)
				}
				// Nothing points to a damaged checkpoint.
				if err := s.SetAssigned(&srcA); err == nil {
					t.Error("SetAssigned to a damaged checkpoint succeeded")
				}
				// Saving it again repairs it.
				mustSave(t, s, srcA, configA)
				if got, err := s.Load(srcA); err != nil || string(got) != string(configA) {
					t.Errorf("after saving again: %q, %v", got, err)
				}
			})
		}
	}
}

func TestLoadDetectsSwappedCheckpoints(t *testing.T) {
	s, _ := openTest(t)
	mustSave(t, s, srcA, configA)
	mustSave(t, s, srcB, configB)
	dirA := filepath.Join(s.Dir(), "checkpoints", string(srcA.UID), srcA.ResourceVersion)
	dirB := filepath.Join(s.Dir(), "checkpoints", string(srcB.UID), srcB.ResourceVersion)
	// B's data and metadata under A's name: consistent with each other,
	// but not A.
	for _, f := range []string{DataFile, MetaFile} {
		data, err := os.ReadFile(filepath.Join(dirB, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dirA, f), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if data, err := s.Load(srcA); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), MetaFile) {
		t.Errorf("Load of A holding B = %q, %v; want ErrCorrupt naming %s", data, err, MetaFile)
	}
	// Only the data swapped: the checksum catches it.
	mustSave(t, s, srcA, configA)
	data, _ := os.ReadFile(filepath.Join(dirB, DataFile))
	if err := os.WriteFile(filepath.Join(dirA, DataFile), data, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Load(srcA); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "checksum") {
		t.Errorf("Load of A with B's data: %v; want a checksum mismatch", err)
	}
}

func TestRecords(t *testing.T) {
	for _, r := range []struct {
		name string
		get  func(*Store) (Record, error)
		set  func(*Store, *Source) error
	}{
		{"assigned", (*Store).Assigned, (*Store).SetAssigned},
		{"last-known-good", (*Store).LastKnownGood, (*Store).SetLastKnownGood},
	} {
		t.Run(r.name, func(t *testing.T) {
			s, clk := openTest(t)
			// It must point to a checkpoint that loads.
			if err := r.set(s, &srcA); err == nil || !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("set to a missing checkpoint: %v, want fs.ErrNotExist", err)
			}
			mustSave(t, s, srcA, configA)
			mustSave(t, s, srcB, configB)

			clk.SetTime(t0.Add(time.Minute))
			if err := r.set(s, &srcA); err != nil {
				t.Fatal(err)
			}
			got, err := r.get(s)
			if err != nil || got.Source == nil || *got.Source != srcA || !got.Time.Equal(t0.Add(time.Minute)) {
				t.Errorf("after set = %+v, %v; want %s at +1m", got, err, srcA)
			}
			// The same source again keeps the time (the trial's start).
			clk.SetTime(t0.Add(2 * time.Minute))
			if err := r.set(s, &srcA); err != nil {
				t.Fatal(err)
			}
			if got, _ := r.get(s); !got.Time.Equal(t0.Add(time.Minute)) {
				t.Errorf("setting the same source moved the time to %s", got.Time)
			}
			// A new version of the same ConfigMap is a new source.
			if err := r.set(s, &srcB); err != nil {
				t.Fatal(err)
			}
			if got, _ := r.get(s); got.Source == nil || *got.Source != srcB || !got.Time.Equal(t0.Add(2*time.Minute)) {
				t.Errorf("after setting B = %+v", got)
			}
			// nil is the local config.
			if err := r.set(s, nil); err != nil {
				t.Fatal(err)
			}
			if got, err := r.get(s); err != nil || got.Source != nil {
				t.Errorf("after clearing = %+v, %v; want the local config", got, err)
			}
			assertNoTemporaries(t, s.Dir())
		})
	}
}

func TestRecordsAreIndependent(t *testing.T) {
	s, _ := openTest(t)
	mustSave(t, s, srcA, configA)
	mustSave(t, s, srcC, configB)
	if err := s.SetAssigned(&srcA); err != nil {
		t.Fatal(err)
	}
	if err := s.SetLastKnownGood(&srcC); err != nil {
		t.Fatal(err)
	}
	a, _ := s.Assigned()
	l, _ := s.LastKnownGood()
	if *a.Source != srcA || *l.Source != srcC {
		t.Errorf("assigned %s, last-known-good %s", a.Source, l.Source)
	}
}

func TestRecordCorruption(t *testing.T) {
	for _, name := range []string{AssignedFile, LastKnownGoodFile} {
		get := (*Store).Assigned
		set := (*Store).SetAssigned
		if name == LastKnownGoodFile {
			get, set = (*Store).LastKnownGood, (*Store).SetLastKnownGood
		}
		for _, c := range corruptions {
			t.Run(name+" "+c.name, func(t *testing.T) {
				s, _ := openTest(t)
				mustSave(t, s, srcA, configA)
				if err := set(s, &srcA); err != nil {
					t.Fatal(err)
				}
				path := filepath.Join(s.Dir(), name)
				c.damage(t, path)
				r, err := get(s)
				if err == nil {
					t.Fatalf("a record %s read as %+v", c.name, r)
				}
				if !errors.Is(err, c.wantErr) || !strings.Contains(err.Error(), path) {
					t.Errorf("error %q: want %v naming %s", err, c.wantErr, path)
				}
				if err := s.GC(); err == nil {
					t.Error("GC with an unreadable record succeeded")
				}
				if _, err := s.Load(srcA); err != nil {
					t.Errorf("GC with an unreadable record removed a checkpoint: %v", err)
				}
				// Setting it again repairs it.
				if err := set(s, &srcA); err != nil {
					t.Fatal(err)
				}
				if r, err := get(s); err != nil || *r.Source != srcA {
					t.Errorf("after setting again: %+v, %v", r, err)
				}
			})
		}
	}
}

func TestRecordWithUnsafeSourceIsCorrupt(t *testing.T) {
	s, _ := openTest(t)
	// A record with a valid checksum whose source would leave the store.
	data, err := encodeEnvelope(Record{Source: &Source{Namespace: "ns", Name: "n", UID: "..", ResourceVersion: "1"}, Time: t0})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(s.Dir(), AssignedFile)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Assigned(); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) {
		t.Errorf("Assigned() = %+v, %v; want ErrCorrupt naming %s", r, err, path)
	}
}

func TestGC(t *testing.T) {
	s, _ := openTest(t)
	srcD := Source{Namespace: "ns", Name: "d", UID: "uid-d", ResourceVersion: "1"}
	for src, data := range map[Source][]byte{srcA: configA, srcB: configB, srcC: configA, srcD: configB} {
		mustSave(t, s, src, data)
	}
	if err := s.SetAssigned(&srcB); err != nil {
		t.Fatal(err)
	}
	if err := s.SetLastKnownGood(&srcC); err != nil {
		t.Fatal(err)
	}
	cps := filepath.Join(s.Dir(), "checkpoints")
	// Leftovers of interrupted writes (a checkpoint's temporary directory
	// and the temporary files of atomicfile.Write), and a file that is not
	// ours.
	leftovers := []string{
		filepath.Join(cps, string(srcA.UID), ".102.tmp-456"),
		filepath.Join(s.Dir(), ".assigned.tmp-123"),
		filepath.Join(s.Dir(), ".last-known-good.tmp2718281828"),
		filepath.Join(s.Dir(), ".controller-state.json.tmp31415"),
	}
	if err := os.MkdirAll(leftovers[0], 0o700); err != nil {
		t.Fatal(err)
	}
	for _, l := range leftovers[1:] {
		if err := os.WriteFile(l, []byte("partial"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	notOurs := filepath.Join(cps, string(srcC.UID), "README")
	if err := os.WriteFile(notOurs, nil, 0o600); err != nil {
		t.Fatal(err)
	}

	if err := s.GC(); err != nil {
		t.Fatal(err)
	}
	for _, src := range []Source{srcB, srcC} {
		if _, err := s.Load(src); err != nil {
			t.Errorf("GC removed %s, which a record points to: %v", src, err)
		}
	}
	if _, err := s.Load(srcA); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("GC kept %s: %v", srcA, err)
	}
	if _, err := os.Stat(filepath.Join(cps, "uid-d")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("GC kept the directory of %s: %v", srcD, err)
	}
	for _, l := range leftovers {
		if _, err := os.Stat(l); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("GC kept leftover %s", l)
		}
	}
	if _, err := os.Stat(notOurs); err != nil {
		t.Errorf("GC removed %s, which is not the store's: %v", notOurs, err)
	}

	// Both records back to local: every checkpoint goes.
	if err := s.SetAssigned(nil); err != nil {
		t.Fatal(err)
	}
	if err := s.SetLastKnownGood(nil); err != nil {
		t.Fatal(err)
	}
	if err := s.GC(); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(cps)
	if len(entries) != 1 || entries[0].Name() != string(srcC.UID) { // kept for README
		t.Errorf("checkpoints after GC of everything: %v", entries)
	}
}

func assertNoTemporaries(t *testing.T, dir string) {
	t.Helper()
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && isTemporary(d.Name()) {
			t.Errorf("temporary left behind: %s", path)
		}
		return nil
	})
}

func flipByte(t *testing.T, path string, i int) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if i < 0 {
		i = len(data) / 2
	}
	data[i] ^= 0x01
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func truncate(t *testing.T, path string, keep float64) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, int64(float64(fi.Size())*keep)); err != nil {
		t.Fatal(err)
	}
}

func appendTo(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

func remove(t *testing.T, path string) {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
}
