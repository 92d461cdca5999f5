package checkpoint

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// FuzzCheckpointLoad puts arbitrary bytes where the store's files are: the
// checkpoint's config, its metadata and the assigned record. Nothing may
// panic, Load may return only bytes that match the recorded checksum, and a
// record may only point to a source that stays inside the store.
func FuzzCheckpointLoad(f *testing.F) {
	s, err := Open(f.TempDir())
	if err != nil {
		f.Fatal(err)
	}
	if err := s.Save(srcA, configA); err != nil {
		f.Fatal(err)
	}
	if err := s.SetAssigned(&srcA); err != nil {
		f.Fatal(err)
	}
	dir := filepath.Join(s.Dir(), CheckpointsDir, string(srcA.UID), srcA.ResourceVersion)
	read := func(p string) []byte {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		return data
	}
	goodData, goodMeta, goodRecord := read(filepath.Join(dir, DataFile)), read(filepath.Join(dir, MetaFile)), read(filepath.Join(s.Dir(), AssignedFile))
	otherMeta, _ := encodeEnvelope(meta{Source: srcA, Size: int64(len(configB)), Checksum: Checksum(configB)})
	unsafeRecord, _ := encodeEnvelope(Record{Source: &Source{Namespace: "a", Name: "b", UID: "..", ResourceVersion: "1"}})

	f.Add(goodData, goodMeta, goodRecord)
	f.Add(configB, goodMeta, goodRecord)
	f.Add(configB, otherMeta, goodRecord)                                       // consistent, but not what was saved
	f.Add(goodData[:len(goodData)/2], goodMeta, goodRecord)                     // truncated
	f.Add(goodData, goodMeta[:len(goodMeta)-5], goodRecord[:len(goodRecord)/2]) // truncated
	f.Add(goodData, []byte("null"), []byte("{}"))
	f.Add(goodData, []byte(`{"checksum":"","payload":""}`), unsafeRecord)
	f.Add([]byte{}, []byte{}, []byte{})
	f.Add([]byte("\x00\xff\xfe garbage"), []byte(`{"payload":[1,2,3]}`), []byte(`{"checksum":1}`))

	f.Fuzz(func(t *testing.T, data, metaFile, record []byte) {
		// One store for every run, its files written directly, not with
		// Save: each run then costs few fsyncs, and minimizing an input
		// takes seconds, not the whole fuzz time. Each run writes every
		// file it reads.
		dir := filepath.Join(s.Dir(), CheckpointsDir, string(srcA.UID), srcA.ResourceVersion)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		for path, content := range map[string][]byte{
			filepath.Join(dir, DataFile):         data,
			filepath.Join(dir, MetaFile):         metaFile,
			filepath.Join(s.Dir(), AssignedFile): record,
		} {
			if err := os.WriteFile(path, content, 0o600); err != nil {
				t.Fatal(err)
			}
		}

		got, err := s.Load(srcA)
		if err == nil {
			// What Load returns is the file's content and matches the
			// checksum the metadata records.
			if !bytes.Equal(got, data) {
				t.Fatalf("Load returned %q, the file holds %q", got, data)
			}
			var env struct {
				Payload struct {
					Checksum string `json:"checksum"`
				} `json:"payload"`
			}
			if jerr := json.Unmarshal(metaFile, &env); jerr != nil || env.Payload.Checksum != Checksum(got) {
				t.Fatalf("Load returned %q, whose checksum %s is not the recorded one (%q, %v)", got, Checksum(got), env.Payload.Checksum, jerr)
			}
		}

		r, err := s.Assigned()
		if err == nil && r.Source != nil {
			if verr := r.Source.Validate(); verr != nil {
				t.Fatalf("Assigned returned an invalid source: %v", verr)
			}
			// Following it must not panic either.
			_, _ = s.Load(*r.Source)
		}
		_ = s.GC()
	})
}
