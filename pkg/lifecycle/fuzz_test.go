package lifecycle

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/internal/fuzzcheck"
)

// FuzzStateLoad puts arbitrary bytes in a pod state file, as a crash, a
// full disk or another hand may leave it, and loads the states as a
// restarted agent does. Nothing may panic; a state that loads is the state
// of the pod its file is named for, so that saving and removing it touch
// that file and no other; it encodes to what loads as the same state; and
// loading costs memory in proportion to the file.
func FuzzStateLoad(f *testing.F) {
	good, err := json.Marshal(&podState{
		Pod: &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "uid-1"},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Command: []string{"sleep", "1"}}}},
		},
		StartTime:  time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		FailReason: "Evicted", FailMessage: "low on memory",
	})
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{
		string(good),
		string(good[:len(good)/2]),
		strings.Replace(string(good), `"uid-1"`, `"uid-2"`, 1),
		strings.Replace(string(good), `"uid-1"`, `"../../x"`, 1),
		strings.Replace(string(good), `"uid-1"`, `"x/../uid-1"`, 1),
		`{"pod":null}`,
		`{"pod":{}}`,
		`{"pod":{"metadata":{"uid":"uid-1"}},"startTime":"x"}`,
		`{"pod":{"metadata":{"uid":"uid-1"}},"startTime":"2026-01-01T00:00:00+01:00"}`,
		`[]`,
		"",
	} {
		f.Add([]byte(seed))
	}
	dir := f.TempDir()
	store := stateStore{dir: dir}
	file := store.path("uid-1")
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(file, data, 0o600); err != nil {
			t.Fatal(err)
		}
		var (
			states []*podState
			err    error
		)
		n := fuzzcheck.Allocated(func() { states, err = store.load(func(string, error) {}) })
		if err != nil {
			t.Fatalf("load: %v", err)
		}
		if n > fuzzcheck.Slack+64*uint64(len(data)) {
			t.Errorf("loading %d bytes allocated %d bytes", len(data), n)
		}
		if len(states) == 0 {
			return
		}
		st := states[0]
		if st.Pod == nil || string(st.Pod.UID) != "uid-1" {
			t.Fatalf("the state in %s is saved to %s", file, store.path(st.Pod.UID))
		}
		encoded, err := json.Marshal(st)
		if err != nil {
			t.Fatalf("a loaded state does not encode: %v", err)
		}
		if err := os.WriteFile(file, encoded, 0o600); err != nil {
			t.Fatal(err)
		}
		again, err := store.load(func(path string, err error) { t.Fatalf("the encoded state does not load: %v\n%s", err, encoded) })
		if err != nil || len(again) != 1 {
			t.Fatalf("load: %v, %d states", err, len(again))
		}
		if reencoded, err := json.Marshal(again[0]); err != nil || !bytes.Equal(reencoded, encoded) {
			t.Fatalf("state\n%s\nloads as\n%s (%v)", encoded, reencoded, err)
		}
	})
}
