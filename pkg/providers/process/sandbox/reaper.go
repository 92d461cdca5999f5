package sandbox

import (
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// reaper collects every child of the process (and, for PID 1 or a child
// subreaper, every orphan) with one wait loop, and hands the status of the
// children that someone waits for to that someone. Children must be started
// with reaper.start so that an early exit is not missed.
type reaper struct {
	mu      sync.Mutex
	waiters map[int]chan syscall.WaitStatus
	early   map[int]syscall.WaitStatus
}

func newReaper() *reaper {
	r := &reaper{waiters: map[int]chan syscall.WaitStatus{}, early: map[int]syscall.WaitStatus{}}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGCHLD)
	go func() {
		for range sigs {
			r.reap()
		}
	}()
	return r
}

func (r *reaper) reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
		r.mu.Lock()
		if ch, ok := r.waiters[pid]; ok {
			delete(r.waiters, pid)
			ch <- ws
		} else {
			r.early[pid] = ws
			// Orphans nobody waits for must not pile up.
			if len(r.early) > 1024 {
				r.early = map[int]syscall.WaitStatus{}
			}
		}
		r.mu.Unlock()
	}
}

// start forks and execs argv0 and returns its PID and a channel that
// receives its wait status.
func (r *reaper) start(argv0 string, argv []string, attr *syscall.ProcAttr) (int, <-chan syscall.WaitStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, err := syscall.ForkExec(argv0, argv, attr)
	if err != nil {
		return 0, nil, err
	}
	ch := make(chan syscall.WaitStatus, 1)
	if ws, ok := r.early[pid]; ok {
		delete(r.early, pid)
		ch <- ws
	} else {
		r.waiters[pid] = ch
	}
	return pid, ch, nil
}

// exitCode is the shell convention: the code, or 128 plus the signal.
func exitCode(ws syscall.WaitStatus) (code, sig int) {
	if ws.Signaled() {
		return 128 + int(ws.Signal()), int(ws.Signal())
	}
	return ws.ExitStatus(), 0
}
