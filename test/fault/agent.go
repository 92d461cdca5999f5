package fault

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// MemoryEvictionOnly is the hard eviction flag of the tests' process and
// cri agents: memory only. Their disk is the host's, shared with everything
// else the machine runs (the builds of the run among them), and at the
// kubelet's default 10-15% free a test's outcome would be the machine's
// fill level, not the agent's behaviour. Tests of disk eviction set their
// thresholds with a later --eviction-hard, which adds to this one.
const MemoryEvictionOnly = "--eviction-hard=memory.available<100Mi"

// Agent is one bin/nodelet process that may be started, killed and
// started again with the same flags; each start logs to a file of its own
// in LogDir.
type Agent struct {
	Bin    string
	Args   []string
	LogDir string

	Log  string // the log of the latest start
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited; nil when not started
	err  error
}

// Start runs the agent (again).
func (a *Agent) Start() error {
	if a.Running() {
		return errors.New("agent already running")
	}
	f, err := os.CreateTemp(a.LogDir, "nodelet-*.log")
	if err != nil {
		return err
	}
	a.Log = f.Name()
	a.cmd = exec.Command(a.Bin, a.Args...)
	a.cmd.Stdout, a.cmd.Stderr = f, f
	// The agent dies with the test, even when the test is killed.
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := a.cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", a.Bin, err)
	}
	done := make(chan struct{})
	a.done, a.err = done, nil
	go func() { a.err = a.cmd.Wait(); f.Close(); close(done) }()
	return nil
}

// Running says whether the agent runs.
func (a *Agent) Running() bool {
	if a.done == nil {
		return false
	}
	select {
	case <-a.done:
		return false
	default:
		return true
	}
}

// Exited says whether the agent has exited on its own, and how.
func (a *Agent) Exited() (bool, error) {
	if a.done == nil {
		return false, nil
	}
	select {
	case <-a.done:
		return true, a.err
	default:
		return false, nil
	}
}

// Kill ends the agent with SIGKILL, as a crash would, and waits for it.
func (a *Agent) Kill() {
	if a.done == nil {
		return
	}
	_ = a.cmd.Process.Kill()
	<-a.done
	a.done = nil
}

// Stop sends SIGTERM and waits up to 30 seconds; it reports an exit other
// than status 0, or a kill after the wait.
func (a *Agent) Stop() error {
	if a.done == nil {
		return nil
	}
	defer func() { a.done = nil }()
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.done:
		if a.err != nil {
			return fmt.Errorf("nodelet exited with %v after SIGTERM, want status 0", a.err)
		}
		return nil
	case <-time.After(30 * time.Second):
		_ = a.cmd.Process.Kill()
		<-a.done
		return errors.New("nodelet did not stop within 30s of SIGTERM")
	}
}

// LogText is the log of the latest start.
func (a *Agent) LogText() string {
	out, _ := os.ReadFile(a.Log)
	return string(out)
}
