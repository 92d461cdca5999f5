package main

import (
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
)

// reexec replaces the agent with a fresh start of itself, with the same
// arguments and environment, in the same process: what it started and
// left running (the process provider's sandboxes) stays its children, and
// a service manager sees no exit. It returns only on failure.
func reexec() error {
	err := syscall.Exec("/proc/self/exe", os.Args, os.Environ())
	return fmt.Errorf("restart in place: %w", err)
}

// reapInherited reaps the children that an earlier run of this process
// (before reexec) started and that outlive it: the new run does not know
// them, and without it they would stay zombies once they exit. Call it
// before the agent starts any child of its own.
func reapInherited() {
	pids := childrenOf(os.Getpid())
	if len(pids) == 0 {
		return
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGCHLD)
	go func() {
		defer signal.Stop(sigs)
		for {
			for pid := range pids {
				var ws syscall.WaitStatus
				// Only these PIDs: the agent's own children are waited
				// for by whoever started them.
				if got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); got == pid || err == syscall.ECHILD {
					delete(pids, pid)
				}
			}
			if len(pids) == 0 {
				return
			}
			<-sigs
		}
	}()
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(pid int) map[int]bool {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int]bool{}
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid …; comm may hold spaces and parentheses.
		i := strings.LastIndexByte(string(data), ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(data[i+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			children[child] = true
		}
	}
	return children
}
