package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodelet/nodelet/pkg/atomicfile"
)

// On-disk layout of one pod, under RootDir/pods/<uid>/:
//
//	sandbox.json                       sandboxRecord
//	sandbox.sock                       the sandbox's control socket
//	sandbox.log                        the sandbox's own output
//	containers/<name>/<attempt>/       one attempt of a container:
//	    config.json                    shimConfig, written before the start
//	    state.json                     startRecord, written once it runs
//	    exit.json                      exitRecord, written once it exited
//	    shim.sock                      the shim's socket while it runs
//	logs/<name>/<attempt>.log[.N]      CRI-format logs, .1 the newest rotated
const (
	sandboxFile     = "sandbox.json"
	sandboxSock     = "sandbox.sock"
	sandboxLog      = "sandbox.log"
	containersDir   = "containers"
	logsDir         = "logs"
	configFile      = "config.json"
	stateFile       = "state.json"
	exitFile        = "exit.json"
	shimSock        = "shim.sock"
	defaultPath     = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	maxHostnameSize = 63
)

// sandboxRecord describes a sandbox process so that any agent can adopt it.
type sandboxRecord struct {
	Spec SandboxSpec `json:"spec"`
	// PID is the host PID of the sandbox and StartTime its start time in
	// clock ticks since boot, which tells a reused PID apart.
	PID       int    `json:"pid,omitempty"`
	StartTime uint64 `json:"startTime,omitempty"`
	// Cgroups are the pod's cgroup directories, one per hierarchy.
	Cgroups  []string `json:"cgroups,omitempty"`
	CgroupV2 bool     `json:"cgroupV2,omitempty"`
	// AppliesSecurity: the sandbox applies ContainerSpec.Security. The
	// sandboxes of agents that predate it run every container as root with
	// every capability, whatever its spec says.
	AppliesSecurity bool `json:"appliesSecurity,omitempty"`
}

// shimConfig is everything a shim needs to run one container attempt.
type shimConfig struct {
	Spec        ContainerSpec `json:"spec"`
	LogPath     string        `json:"logPath"`
	LogMaxSize  int64         `json:"logMaxSize"`
	LogMaxFiles int           `json:"logMaxFiles"`
	Cgroups     []string      `json:"cgroups,omitempty"`
	CgroupV2    bool          `json:"cgroupV2,omitempty"`
}

// startRecord says that the main process of an attempt runs.
type startRecord struct {
	// PID is the main process's PID in the pod's PID namespace.
	PID       int       `json:"pid"`
	StartedAt time.Time `json:"startedAt"`
}

// exitRecord says how an attempt ended.
type exitRecord struct {
	ExitCode   int       `json:"exitCode"`
	Signal     int       `json:"signal,omitempty"`
	Reason     string    `json:"reason"`
	Message    string    `json:"message,omitempty"`
	StartedAt  time.Time `json:"startedAt,omitempty"`
	FinishedAt time.Time `json:"finishedAt"`
}

// writeJSONAtomic writes v to path through a temporary file and a rename, so
// that readers see the old content or the new, never a part, whenever the
// writer dies. There is no fsync: these records describe processes, and a
// crash of the machine, the one thing an fsync guards against, ends the
// processes too; it would only slow every container start.
func writeJSONAtomic(path string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", filepath.Base(path), err)
	}
	return atomicfile.Write(path, data, atomicfile.Options{})
}

// readJSON reads path into v. A missing file is reported as fs.ErrNotExist.
func readJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("decode %s: %w", path, err)
	}
	return nil
}

// exitRecorded tells whether the attempt in dir has an exit record that
// reads. One that does not (a crash of the machine can leave it empty, as
// it is not synced) is as good as none: the attempt is finalized again
// rather than seen running for ever.
func exitRecorded(dir string) bool {
	var rec exitRecord
	return readJSON(filepath.Join(dir, exitFile), &rec) == nil
}

// attempts lists the attempt numbers recorded for a container, ascending.
func attempts(containerDir string) []int {
	entries, err := os.ReadDir(containerDir)
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		if n, err := strconv.Atoi(e.Name()); err == nil && e.IsDir() && n >= 0 {
			out = append(out, n)
		}
	}
	sort.Ints(out)
	return out
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func isNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }

// lockAttempt takes the lock of the attempt directory dir (flock): the
// sandbox holds it while it starts the attempt, the agent while it decides
// that an attempt whose shim does not answer has ended. Either side thus
// sees the other's decision whole: the agent never records as ended an
// attempt whose start is under way (an agent killed while the sandbox
// started one, and the next agent adopting the sandbox meanwhile), and the
// sandbox never starts an attempt the agent recorded as ended. It waits up
// to wait, or until ctx ends.
func lockAttempt(ctx context.Context, dir string, wait time.Duration) (unlock func(), err error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("lock attempt: %w", err)
	}
	deadline := time.Now().Add(wait)
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil // closing the descriptor releases the lock
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			f.Close()
			return nil, fmt.Errorf("lock attempt %s: %w", dir, err)
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("lock attempt %s: held for %s", dir, wait)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("lock attempt %s: %w", dir, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}
