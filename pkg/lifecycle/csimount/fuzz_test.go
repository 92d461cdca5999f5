package csimount

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/internal/fuzzcheck"
)

// FuzzRecordLoad puts arbitrary bytes in the record of a published volume
// and in that of a staged volume, as a crash or another hand may leave
// them, and loads them as a restarted agent does. Nothing may panic; a
// record that loads names, as its target or staging path, the one in its
// own directory, and a staged volume's directory is the one of its driver
// and handle: the agent asks the driver to unmount those paths and removes
// them and the record's directory, so a record must never point elsewhere.
// A loaded record encodes to what loads as the same, and loading costs
// memory in proportion to the records.
func FuzzRecordLoad(f *testing.F) {
	// The records name paths under the root directory, which differs
	// from one fuzzing process to the next: the inputs say @ROOT@.
	const placeholder = "/@ROOT@"
	seeds := &Manager{opts: Options{RootDir: placeholder}}
	publish, _ := json.Marshal(publishRecord{
		Driver: "driver.example.com", VolumeHandle: "handle-1", UniqueName: "kubernetes.io/csi/driver.example.com^handle-1",
		PersistentVolume: "pv-1", TargetPath: filepath.Join(seeds.volumeDir("uid-1", "vol"), targetName),
	})
	stage, _ := json.Marshal(stageRecord{
		Driver: "driver.example.com", VolumeHandle: "handle-1", UniqueName: "kubernetes.io/csi/driver.example.com^handle-1",
		StagingPath: filepath.Join(seeds.stagingDir("driver.example.com", "handle-1"), stagingName),
	})
	f.Add(publish, stage)
	f.Add(publish[:len(publish)/2], stage[:len(stage)-1])
	f.Add(bytes.Replace(publish, []byte(`/mount"`), []byte(`/../../../../../../../etc"`), 1), bytes.Replace(stage, []byte("handle-1"), []byte("handle-2"), 1))
	f.Add([]byte(`{"uniqueName":"u","targetPath":"/"}`), []byte(`{"uniqueName":"u","stagingPath":"/var/lib"}`))
	f.Add([]byte("null"), []byte("[]"))
	root := f.TempDir()
	volDir := (&Manager{opts: Options{RootDir: root}}).volumeDir("uid-1", "vol")
	stageDir := (&Manager{opts: Options{RootDir: root}}).stagingDir("driver.example.com", "handle-1")
	for _, dir := range []string{volDir, stageDir} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			f.Fatal(err)
		}
	}
	f.Fuzz(func(t *testing.T, publish, stage []byte) {
		// Loading creates nothing: each run only rewrites the two records.
		publish = bytes.ReplaceAll(publish, []byte(placeholder), []byte(root))
		stage = bytes.ReplaceAll(stage, []byte(placeholder), []byte(root))
		for dir, data := range map[string][]byte{volDir: publish, stageDir: stage} {
			if err := os.WriteFile(filepath.Join(dir, recordName), data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		m := &Manager{
			opts: Options{RootDir: root}, logger: klog.Logger{}, // discards
			pods: map[types.UID]*podVolumes{}, staged: map[corev1.UniqueVolumeName]*stageRecord{},
		}
		if n := fuzzcheck.Allocated(m.load); n > fuzzcheck.Slack+64*uint64(len(publish)+len(stage)) {
			t.Errorf("loading records of %d bytes allocated %d bytes", len(publish)+len(stage), n)
		}
		for uid, pv := range m.pods {
			for name, rec := range pv.published {
				if want := filepath.Join(m.volumeDir(uid, name), targetName); filepath.Clean(rec.TargetPath) != want {
					t.Fatalf("the record in %s has target %q, not %q", m.volumeDir(uid, name), rec.TargetPath, want)
				}
				checkRoundTrip(t, rec, &publishRecord{})
			}
		}
		for _, rec := range m.staged {
			if want := filepath.Join(m.stagingDir(rec.Driver, rec.VolumeHandle), stagingName); filepath.Clean(rec.StagingPath) != want {
				t.Fatalf("a staged record of driver %q and handle %q has staging path %q, not %q", rec.Driver, rec.VolumeHandle, rec.StagingPath, want)
			}
			if filepath.Dir(filepath.Clean(rec.StagingPath)) != stageDir {
				t.Fatalf("the record in %s is loaded as the one in %s", stageDir, filepath.Dir(rec.StagingPath))
			}
			checkRoundTrip(t, rec, &stageRecord{})
		}
	})
}

// checkRoundTrip fails t unless rec encodes to what decodes, into empty,
// as the same encoding.
func checkRoundTrip(t *testing.T, rec, empty any) {
	t.Helper()
	encoded, err := json.Marshal(rec)
	if err != nil {
		t.Fatalf("a loaded record does not encode: %v", err)
	}
	if err := json.Unmarshal(encoded, empty); err != nil {
		t.Fatalf("record %s does not decode: %v", encoded, err)
	}
	if again, _ := json.Marshal(empty); !bytes.Equal(again, encoded) {
		t.Fatalf("record %s decodes as %s", encoded, again)
	}
}
