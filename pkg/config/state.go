package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/nodelet/nodelet/pkg/atomicfile"
	"github.com/nodelet/nodelet/pkg/config/checkpoint"
)

// stateFile, in the checkpoint store's directory, is what the controller
// keeps across restarts besides the store's records: the config that was
// in use, to tell when it changes, and the failed starts of the config on
// trial.
const stateFile = "controller-state.json"

// state is the content of stateFile.
type state struct {
	// InUse is the config the agent last ran.
	InUse inUse `json:"inUse"`
	// Trial counts the starts of the config on trial that did not become
	// healthy.
	Trial trialState `json:"trial"`
}

// inUse identifies a config the agent ran.
type inUse struct {
	// Source is the checkpoint it came from; nil is the local config.
	Source *checkpoint.Source `json:"source"`
	// LastKnownGood tells that it was the last-known-good, taken because
	// the assigned config failed.
	LastKnownGood bool `json:"lastKnownGood,omitempty"`
}

func (u inUse) equal(o inUse) bool {
	if (u.Source == nil) != (o.Source == nil) || u.LastKnownGood != o.LastKnownGood {
		return false
	}
	return u.Source == nil || *u.Source == *o.Source
}

// trialState counts the failed starts of one assigned config.
type trialState struct {
	Source       *checkpoint.Source `json:"source"`
	FailedStarts int                `json:"failedStarts"`
}

// readState reads the state file of the store in dir. A missing file is
// the zero state; an unreadable one is the zero state and an error to log.
func readState(dir string) (state, error) {
	var s state
	data, err := os.ReadFile(filepath.Join(dir, stateFile))
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return s, fmt.Errorf("read controller state: %w", err)
	}
	if err := json.Unmarshal(data, &s); err != nil {
		return state{}, fmt.Errorf("controller state %s: %w", filepath.Join(dir, stateFile), err)
	}
	return s, nil
}

func writeState(dir string, s state) error {
	data, err := json.Marshal(s)
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(dir, stateFile), append(data, '\n'), atomicfile.Options{Perm: 0o600, Sync: true})
}
