package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

type childExit struct {
	name string
	err  error
}

// child is one server of the control plane. Its command line is kept so
// that it can be started again after a stop on request.
type child struct {
	name  string
	path  string
	args  []string
	ready func() bool // how waitFor saw it ready; nil until then

	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	held bool          // stopped on request: its exit is not a failure
}

// group runs the control plane's servers as children of this process and
// stops them in reverse order. A child may be stopped and started again on
// request (the fault-injection tests do it); any other exit ends "up".
type group struct {
	self   string
	logDir string
	exited chan childExit

	mu       sync.Mutex
	children []*child
}

// start runs one of this binary's commands.
func (g *group) start(name string, args ...string) error {
	return g.startProgram(name, g.self, append([]string{name}, args...)...)
}

// startProgram runs path with args, its output in the log named for name.
func (g *group) startProgram(name, path string, args ...string) error {
	c := &child{name: name, path: path, args: args}
	if err := g.spawn(c); err != nil {
		return err
	}
	g.mu.Lock()
	g.children = append(g.children, c)
	g.mu.Unlock()
	return nil
}

// spawn starts c's command and watches for its exit.
func (g *group) spawn(c *child) error {
	log, err := os.OpenFile(filepath.Join(g.logDir, c.name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(c.path, c.args...)
	cmd.Stdout, cmd.Stderr = log, log
	// Children die with us even if we are killed without a chance to stop them.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("start %s: %w", c.name, err)
	}
	done := make(chan struct{})
	g.mu.Lock()
	c.cmd, c.done, c.held = cmd, done, false
	g.mu.Unlock()
	go func() {
		err := cmd.Wait()
		log.Close()
		g.mu.Lock()
		held := c.held
		g.mu.Unlock()
		close(done)
		if held {
			return
		}
		select {
		case g.exited <- childExit{name: c.name, err: err}:
		default:
		}
	}()
	return nil
}

// waitFor polls ready until it holds, a child exits, ctx ends or timeout
// passes. The child named name keeps ready for when it is started again.
func (g *group) waitFor(ctx context.Context, name string, timeout time.Duration, ready func() bool) error {
	if c := g.child(name); c != nil {
		g.mu.Lock()
		c.ready = ready
		g.mu.Unlock()
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for !ready() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e := <-g.exited:
			return fmt.Errorf("%s exited while waiting for %s: %v (see %s)", e.name, name, e.err, filepath.Join(g.logDir, e.name+".log"))
		case <-deadline.C:
			return fmt.Errorf("%s not ready after %s (see %s)", name, timeout, filepath.Join(g.logDir, name+".log"))
		case <-tick.C:
		}
	}
	return nil
}

func (g *group) child(name string) *child {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, c := range g.children {
		if c.name == name {
			return c
		}
	}
	return nil
}

// childState is what the control socket says of a child.
type childState struct {
	Name    string `json:"name"`
	PID     int    `json:"pid,omitempty"`
	Running bool   `json:"running"`
}

func (g *group) states() []childState {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]childState, 0, len(g.children))
	for _, c := range g.children {
		s := childState{Name: c.name}
		select {
		case <-c.done:
		default:
			s.Running, s.PID = true, c.cmd.Process.Pid
		}
		out = append(out, s)
	}
	return out
}

// stopChild sends sig to the named child and waits for it to exit; its
// exit is expected and does not end "up". A child that ignores SIGTERM for
// 30 seconds is killed.
func (g *group) stopChild(name string, sig syscall.Signal) error {
	c := g.child(name)
	if c == nil {
		return fmt.Errorf("no component %q", name)
	}
	g.mu.Lock()
	c.held = true
	cmd, done := c.cmd, c.done
	g.mu.Unlock()
	select {
	case <-done:
		return nil
	default:
	}
	if err := cmd.Process.Signal(sig); err != nil {
		return err
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
	return nil
}

// startChild starts a child stopped by stopChild again, with the same
// command line, and waits up to timeout until it is ready.
func (g *group) startChild(ctx context.Context, name string, timeout time.Duration) error {
	c := g.child(name)
	if c == nil {
		return fmt.Errorf("no component %q", name)
	}
	g.mu.Lock()
	held, done, ready := c.held, c.done, c.ready
	g.mu.Unlock()
	select {
	case <-done:
	default:
		return fmt.Errorf("%s is running", name)
	}
	if !held {
		return fmt.Errorf("%s exited on its own; up is stopping", name)
	}
	if err := g.spawn(c); err != nil {
		return err
	}
	if ready == nil {
		return nil
	}
	return g.waitFor(ctx, name, timeout, ready)
}

// stopAll sends SIGTERM to each child, newest first, and kills any that has
// not exited 15 seconds later.
func (g *group) stopAll() {
	g.mu.Lock()
	children := append([]*child(nil), g.children...)
	for _, c := range children {
		c.held = true
	}
	g.mu.Unlock()
	for i := len(children) - 1; i >= 0; i-- {
		c := children[i]
		select {
		case <-c.done:
			continue
		default:
		}
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.done:
		case <-time.After(15 * time.Second):
			_ = c.cmd.Process.Kill()
			<-c.done
		}
	}
}
