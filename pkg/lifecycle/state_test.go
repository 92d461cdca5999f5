package lifecycle

import (
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A save cut short by the end of an earlier agent (killed, or the disk
// full) leaves its temporary file; the next agent's load removes it, and
// only it.
func TestLoadRemovesTheTempFilesOfCutSaves(t *testing.T) {
	dir := t.TempDir()
	store := stateStore{dir: dir}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-1"}}
	if err := store.save(&podState{Pod: pod}); err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(dir, ".uid-2.json.tmp3273976542")
	other := filepath.Join(dir, "notes.txt")
	for _, f := range []string{cut, other} {
		if err := os.WriteFile(f, []byte("{"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	states, err := store.load(func(path string, err error) { t.Errorf("skipped %s: %v", path, err) })
	if err != nil {
		t.Fatal(err)
	}
	if len(states) != 1 || states[0].Pod.UID != "uid-1" {
		t.Errorf("loaded %d states, want the one of uid-1", len(states))
	}
	if _, err := os.Stat(cut); !os.IsNotExist(err) {
		t.Errorf("the temporary file of a cut save is still there (stat: %v)", err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("a file that is not a temporary one was touched: %v", err)
	}
}
