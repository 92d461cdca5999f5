package csimount

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func TestRemoveDirAfterAnInterruptedRecordWrite(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "vol")
	if err := writeRecord(dir, stageRecord{Driver: "d", VolumeHandle: "h"}); err != nil {
		t.Fatal(err)
	}
	// What a crash in the middle of the next write leaves: the fixed
	// temporary file beside the record.
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 1 || entries[0].Name() != recordName {
		t.Fatalf("after a write %s holds %v, %v; want only %s", dir, entries, err, recordName)
	}
	if err := os.WriteFile(filepath.Join(dir, recordName+".tmp"), []byte(`{"dri`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := removeDir(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s still there: %v", dir, err)
	}
}
