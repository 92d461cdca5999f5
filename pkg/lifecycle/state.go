package lifecycle

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/pkg/atomicfile"
)

// podState is what survives an agent restart besides the runtime's
// records: the pod's spec, its start time, why it failed if it did, and
// how far its deletion got.
type podState struct {
	Pod         *corev1.Pod `json:"pod"`
	StartTime   time.Time   `json:"startTime"`
	FailReason  string      `json:"failReason,omitempty"`
	FailMessage string      `json:"failMessage,omitempty"`
	// Deleting: the pod is being terminated, within Grace. A restarted
	// agent goes on terminating it and never starts its containers again.
	Deleting bool          `json:"deleting,omitempty"`
	Grace    time.Duration `json:"grace,omitempty"`
	// Final is the status the terminated pod reports, saved before its
	// sandbox (with the records it was computed from) is removed: an agent
	// restarted after that reports it, not a pod with no containers yet.
	// A pod that ended saves it too when its volumes are torn down, in
	// case its sandbox goes before the pod is deleted.
	Final *corev1.PodStatus `json:"final,omitempty"`
	// VolumesTornDown: the pod ended and its volumes were torn down. A
	// restarted agent never sets them up again, nor starts its containers.
	VolumesTornDown bool `json:"volumesTornDown,omitempty"`
}

// stateStore keeps one file per pod, <dir>/<uid>.json.
type stateStore struct{ dir string }

func (s stateStore) path(uid types.UID) string {
	return filepath.Join(s.dir, string(uid)+".json")
}

func (s stateStore) save(st *podState) error {
	data, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("encode pod state: %w", err)
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return fmt.Errorf("pod state: %w", err)
	}
	if err := atomicfile.Write(s.path(st.Pod.UID), data, atomicfile.Options{Sync: true}); err != nil {
		return fmt.Errorf("pod state: %w", err)
	}
	return nil
}

func (s stateStore) remove(uid types.UID) error {
	if err := os.Remove(s.path(uid)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("pod state: %w", err)
	}
	return nil
}

// load reads every pod state; bad files are reported through skip and
// left alone. The temporary file of a save that an earlier agent's end cut
// short is removed: load runs before this agent saves anything. A state must be that of the pod its file is named for: save
// and remove find the file by the pod's UID, and another UID ("../x")
// would make them write and remove another file.
func (s stateStore) load(skip func(path string, err error)) ([]*podState, error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read pod states: %w", err)
	}
	var out []*podState
	for _, e := range entries {
		path := filepath.Join(s.dir, e.Name())
		if atomicfile.IsTemp(e.Name()) {
			if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				skip(path, err)
			}
			continue
		}
		if filepath.Ext(e.Name()) != ".json" {
			continue
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("read pod state: %w", err)
		}
		var st podState
		err = json.Unmarshal(data, &st)
		switch {
		case err != nil:
		case st.Pod == nil:
			err = errors.New("no pod")
		case string(st.Pod.UID)+".json" != e.Name():
			err = fmt.Errorf("holds the state of pod uid %q", st.Pod.UID)
		}
		if err != nil {
			skip(path, err)
			continue
		}
		out = append(out, &st)
	}
	return out, nil
}
