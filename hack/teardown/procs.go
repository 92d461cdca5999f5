//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// proc is one process of the process table.
type proc struct {
	pid, ppid int
	start     uint64 // start time in clock ticks after boot: tells a reused PID apart
	exe, cwd  string // empty when unreadable
	args      []string
}

// readProc reads one process from /proc.
func readProc(pid int) (*proc, error) {
	base := filepath.Join("/proc", strconv.Itoa(pid))
	stat, err := os.ReadFile(filepath.Join(base, "stat"))
	if err != nil {
		return nil, err
	}
	// The fields after the command name, which is in parentheses and may
	// hold anything: state, ppid, … starttime is the 22nd field.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil, fmt.Errorf("%s/stat: no command name", base)
	}
	fields := strings.Fields(s[i+1:])
	if len(fields) < 20 {
		return nil, fmt.Errorf("%s/stat: %d fields", base, len(fields))
	}
	p := &proc{pid: pid}
	if fields[0] == "Z" {
		return nil, fmt.Errorf("process %d is a zombie", pid)
	}
	p.ppid, _ = strconv.Atoi(fields[1])
	p.start, _ = strconv.ParseUint(fields[19], 10, 64)
	if exe, err := os.Readlink(filepath.Join(base, "exe")); err == nil {
		p.exe = strings.TrimSuffix(exe, " (deleted)")
	}
	if cwd, err := os.Readlink(filepath.Join(base, "cwd")); err == nil {
		p.cwd = cwd
	}
	if cmdline, err := os.ReadFile(filepath.Join(base, "cmdline")); err == nil {
		p.args = strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	}
	return p, nil
}

// readProcs reads every live process.
func readProcs() (map[int]*proc, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	procs := map[int]*proc{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, err := readProc(pid); err == nil {
			procs[pid] = p
		}
	}
	return procs, nil
}

// names tells whether a process's executable or a path on its command line
// lies under the directories; "--flag=path" and "unix://path" count as
// paths. Relative paths are taken from the process's working directory
// when that lies outside the directories: make run starts everything from
// the repository, while what runs inside .local/ (a shell, less) is the
// user's and its arguments say nothing.
func (t *teardown) names(p *proc) bool {
	if p.exe != "" && t.owns(p.exe) {
		return true
	}
	cwd := p.cwd
	if t.owns(cwd) {
		cwd = ""
	}
	for _, arg := range p.args {
		candidates := []string{arg}
		if _, v, ok := strings.Cut(arg, "="); ok {
			candidates = append(candidates, v)
		}
		for _, c := range candidates {
			c = strings.TrimPrefix(c, "unix://")
			if c == "" {
				continue
			}
			if !filepath.IsAbs(c) {
				if cwd == "" {
					continue
				}
				c = filepath.Join(cwd, c)
			}
			if t.owns(filepath.Clean(c)) {
				return true
			}
		}
	}
	return false
}

// owned returns the processes that name the directories, and all their
// descendants, parents first; never this process or its ancestors.
func (t *teardown) owned(procs map[int]*proc) []*proc {
	pids := make([]int, 0, len(procs))
	for pid, p := range procs {
		if t.names(p) {
			pids = append(pids, pid)
		}
	}
	slices.Sort(pids)
	return withDescendants(procs, pids)
}

// withDescendants returns the processes of pids and all their descendants,
// parents first, leaving out this process and its ancestors.
func withDescendants(procs map[int]*proc, pids []int) []*proc {
	mine := map[int]bool{}
	for pid := os.Getpid(); pid > 0 && !mine[pid]; {
		mine[pid] = true
		p, ok := procs[pid]
		if !ok {
			break
		}
		pid = p.ppid
	}
	children := map[int][]int{}
	for _, p := range procs {
		children[p.ppid] = append(children[p.ppid], p.pid)
	}
	var out []*proc
	seen := map[int]bool{}
	var add func(pid int)
	add = func(pid int) {
		p, ok := procs[pid]
		if !ok || seen[pid] || mine[pid] {
			return
		}
		seen[pid] = true
		out = append(out, p)
		for _, c := range children[pid] {
			add(c)
		}
	}
	for _, pid := range pids {
		add(pid)
	}
	return out
}

// terminate sends SIGTERM to the processes, waits up to the grace period
// for them to exit, then sends SIGKILL to those left, with every
// descendant they have then, and waits for them.
func (t *teardown) terminate(ctx context.Context, procs []*proc) error {
	signalAll(procs, syscall.SIGTERM)
	left := waitGone(ctx, procs, time.Now().Add(t.grace))
	if len(left) == 0 {
		return nil
	}
	pids := make([]int, 0, len(left))
	for _, p := range left {
		t.log("process %d still runs %s after SIGTERM: SIGKILL", p.pid, t.grace)
		pids = append(pids, p.pid)
	}
	if all, err := readProcs(); err == nil {
		left = withDescendants(all, pids)
	}
	signalAll(left, syscall.SIGKILL)
	if left = waitGone(ctx, left, time.Now().Add(30*time.Second)); len(left) > 0 {
		var pids []string
		for _, p := range left {
			pids = append(pids, strconv.Itoa(p.pid))
		}
		return fmt.Errorf("processes %s still run 30s after SIGKILL", strings.Join(pids, ", "))
	}
	return nil
}

// signalAll signals each process that is still the one that was read.
func signalAll(procs []*proc, sig syscall.Signal) {
	for _, p := range procs {
		if p.alive() {
			_ = syscall.Kill(p.pid, sig)
		}
	}
}

// alive tells whether the process still runs, with the same start time
// (not a zombie: a zombie has ended; its parent reaps it).
func (p *proc) alive() bool {
	now, err := readProc(p.pid)
	return err == nil && now.start == p.start
}

// waitGone polls until every process has exited or the deadline passes,
// and returns those left.
func waitGone(ctx context.Context, procs []*proc, deadline time.Time) []*proc {
	for {
		var left []*proc
		for _, p := range procs {
			if p.alive() {
				left = append(left, p)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		select {
		case <-ctx.Done():
			return left
		case <-time.After(50 * time.Millisecond): // poll interval, bounded by the deadline
		}
		procs = left
	}
}
