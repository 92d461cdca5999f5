package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/internal/pty"
)

// shim supervises one container attempt: it is the parent of the main
// process and of exec sessions, owns their stdio and the log files, and
// records the exit.
type shim struct {
	dir    string
	cfg    shimConfig
	r      *reaper
	logger klog.Logger
	ownNS  bool // make the container's mount namespace (see startAttempt)

	oomBase   uint64
	startedAt time.Time
	mainPID   int // in the pod's PID namespace; also its process group
	logs      *logWriter
	stdin     *os.File // write end of the main process's stdin, or the pty master
	master    *os.File // pty master when TTY

	mu    sync.Mutex
	mntNS int // the container's mount namespace, -1 when not open
	// cgroupsReleased is set once the main process is reaped and the
	// cgroups emptied: from then on they may hold the next attempt.
	cgroupsReleased bool
	exited          chan struct{} // closed once exit.json is written
	done            bool
	termSent        bool
	killTimer       *time.Timer
	killAt          time.Time
	attaches        map[*attachClient]struct{}
	stdinUsed       bool
	pumps           sync.WaitGroup
}

// startAttempt starts one container attempt, supervised by goroutines of
// this process, and returns once its main process runs or could not start;
// an attempt that could not start is recorded as such. ended is closed once
// the attempt's exit is recorded and its socket is gone. With ownNS the
// container gets a mount namespace of its own; without, it shares the
// process's (a shim process made one for it).
func startAttempt(dir string, r *reaper, ownNS bool) (pid int, ended <-chan struct{}, err error) {
	s := &shim{dir: dir, r: r, ownNS: ownNS, mntNS: -1, exited: make(chan struct{}), attaches: map[*attachClient]struct{}{}}
	s.logger = klog.Background().WithValues("attempt", dir)
	// The whole start holds the attempt's lock (lockAttempt): an agent
	// that finds no shim to follow waits for it before it records the
	// attempt as ended, and an attempt recorded so is not started.
	unlock, err := lockAttempt(context.Background(), dir, attemptLockWait)
	if err != nil {
		return 0, nil, err
	}
	defer unlock()
	if exists(filepath.Join(dir, exitFile)) {
		return 0, nil, fmt.Errorf("attempt %s was recorded as ended before it started", dir)
	}
	var prior startRecord
	if readJSON(filepath.Join(dir, stateFile), &prior) == nil && prior.PID > 0 {
		// Started already, at an earlier request for the same start (an
		// agent killed while it asked, and the next one asking again):
		// the attempt runs once.
		return prior.PID, nil, nil
	}
	var l *net.UnixListener
	var waitCh <-chan syscall.WaitStatus
	err = readJSON(filepath.Join(dir, configFile), &s.cfg)
	if err != nil {
		err = fmt.Errorf("read container config: %w", err)
	} else if l, err = listenPacket(filepath.Join(dir, shimSock)); err == nil {
		if waitCh, err = s.start(); err != nil {
			l.Close()
		}
	}
	if err != nil {
		rec := exitRecord{ExitCode: startErrorCode, Reason: ReasonStartError, Message: err.Error(), FinishedAt: time.Now()}
		if werr := writeJSONAtomic(filepath.Join(dir, exitFile), rec); werr != nil {
			s.logger.Error(werr, "Recording the start error failed")
		}
		os.Remove(filepath.Join(dir, shimSock))
		return 0, nil, err
	}
	if err := writeJSONAtomic(filepath.Join(dir, stateFile), startRecord{PID: s.mainPID, StartedAt: s.startedAt}); err != nil {
		s.logger.Error(err, "Recording the start failed")
	}
	done := make(chan struct{})
	go s.serve(l)
	go func() {
		s.finish(<-waitCh)
		l.Close()
		os.Remove(filepath.Join(dir, shimSock))
		close(done)
	}()
	return s.mainPID, done, nil
}

// runShim runs one container attempt to its end in a process of its own
// (started with a mount namespace of its own). Sandboxes of earlier nodelet
// versions start one per attempt; it reports on descriptor 3 once the main
// process runs or could not start.
func runShim(dir string) error {
	syscall.CloseOnExec(3)
	report := os.NewFile(3, "report")
	var rep shimReport
	var ended <-chan struct{}
	err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	if err == nil {
		rep.PID, ended, err = startAttempt(dir, newReaper(), false)
	}
	if err != nil {
		rep.Error = err.Error()
	}
	data, _ := json.Marshal(rep)
	report.Write(data)
	report.Close()
	if ended != nil {
		<-ended
	}
	return nil
}

// start prepares the container's mounts, cgroups, logs and stdio and starts
// its main process.
func (s *shim) start() (<-chan syscall.WaitStatus, error) {
	spec := s.cfg.Spec
	if err := makeCgroups(s.cfg.Cgroups, s.cfg.CgroupV2); err != nil {
		return nil, err
	}
	if err := setResources(s.cfg.Cgroups, s.cfg.CgroupV2, spec.Resources); err != nil {
		return nil, err
	}
	s.oomBase = oomKills(s.cfg.Cgroups)
	if err := os.MkdirAll(filepath.Dir(s.cfg.LogPath), 0o755); err != nil {
		return nil, fmt.Errorf("create log directory: %w", err)
	}
	logs, err := openLogWriter(s.cfg.LogPath, s.cfg.LogMaxSize, s.cfg.LogMaxFiles)
	if err != nil {
		return nil, err
	}
	s.logs = logs

	var childFiles []*os.File // closed in the shim once the child runs
	var outputs []struct {
		r      io.Reader
		stream string
	}
	sys := &syscall.SysProcAttr{Setpgid: true}
	var stdio [3]*os.File
	if spec.TTY {
		master, slave, err := pty.Open()
		if err != nil {
			return nil, err
		}
		s.master = master
		if spec.Stdin {
			s.stdin = master
		}
		stdio = [3]*os.File{slave, slave, slave}
		childFiles = append(childFiles, slave)
		outputs = append(outputs, struct {
			r      io.Reader
			stream string
		}{pty.Reader{F: master}, "stdout"})
		sys = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	} else {
		if spec.Stdin {
			r, w, err := os.Pipe()
			if err != nil {
				return nil, err
			}
			s.stdin, stdio[0] = w, r
		} else {
			devnull, err := os.Open(os.DevNull)
			if err != nil {
				return nil, err
			}
			stdio[0] = devnull
		}
		childFiles = append(childFiles, stdio[0])
		for i, stream := range []string{"stdout", "stderr"} {
			r, w, err := os.Pipe()
			if err != nil {
				return nil, err
			}
			stdio[i+1] = w
			childFiles = append(childFiles, w)
			outputs = append(outputs, struct {
				r      io.Reader
				stream string
			}{r, stream})
		}
	}
	pid, waitCh, err := s.spawn(spec.Args, [3]uintptr{stdio[0].Fd(), stdio[1].Fd(), stdio[2].Fd()}, sys, s.makeMountNamespace)
	closeAll(childFiles)
	if err != nil {
		return nil, err
	}
	s.mainPID = pid
	s.startedAt = time.Now()
	s.pumps.Add(len(outputs))
	for _, o := range outputs {
		go func() {
			defer s.pumps.Done()
			pumpLog(o.r, o.stream, s.logs, s.tee)
		}()
	}
	return waitCh, nil
}

// spawn starts argv in the container's mount namespace, cgroups and
// working directory with the container's environment, and returns once it
// exec'd or failed to. enterNS puts the calling thread in the mount
// namespace the child is to have.
func (s *shim) spawn(argv []string, stdio [3]uintptr, sys *syscall.SysProcAttr, enterNS func() error) (int, <-chan syscall.WaitStatus, error) {
	spec := s.cfg.Spec
	env := spec.Env
	hasPath := false
	for _, kv := range env {
		if strings.HasPrefix(kv, "PATH=") {
			hasPath = true
		}
	}
	if !hasPath {
		env = append(append([]string(nil), env...), "PATH="+defaultPath)
	}
	if len(argv) == 0 {
		return 0, nil, errors.New("no command")
	}
	dir := spec.WorkingDir
	if dir == "" {
		dir = "/"
	}
	attr := &syscall.ProcAttr{Dir: dir, Env: env, Files: stdio[:], Sys: sys}
	// With a Security, the child is the init stage, which applies it and
	// execs the command; it reports a failure on a pipe.
	sec := spec.Security
	var report, reportW *os.File
	if sec != nil {
		var err error
		if report, reportW, err = os.Pipe(); err != nil {
			return 0, nil, err
		}
		defer report.Close()
		defer reportW.Close()
		attr.Files = append(attr.Files, reportW.Fd()) // initReportFD
	}
	type result struct {
		pid    int
		waitCh <-chan syscall.WaitStatus
		err    error
	}
	done := make(chan result, 1)
	go func() {
		// The child is forked from this thread and inherits its mount
		// namespace and cgroups, so it is confined before any of its code
		// runs. The thread is never unlocked: it ends with the goroutine
		// rather than carry the container's namespace or cgroups back into
		// the supervisor.
		goruntime.LockOSThread()
		if err := enterNS(); err != nil {
			done <- result{err: err}
			return
		}
		// The command is looked up in the container's mount namespace.
		path, err := lookPath(argv[0], dir, env)
		if err != nil {
			done <- result{err: err}
			return
		}
		if err := joinCgroupsForFork(s.cfg.Cgroups, s.cfg.CgroupV2, attr); err != nil {
			done <- result{err: err}
			return
		}
		exe, args := path, argv
		if sec != nil {
			// This very binary, also if a newer one replaced its file.
			exe = "/proc/self/exe"
			if args, err = initArgv(sec, path, argv); err != nil {
				done <- result{err: err}
				return
			}
		}
		pid, waitCh, err := s.r.start(exe, args, attr)
		if attr.Sys.UseCgroupFD {
			syscall.Close(attr.Sys.CgroupFD)
		}
		if err != nil {
			err = fmt.Errorf("start %s: %w", argv[0], err)
		}
		done <- result{pid, waitCh, err}
	}()
	r := <-done
	if r.err != nil || sec == nil {
		return r.pid, r.waitCh, r.err
	}
	// The init stage execs the command (which closes the pipe) or says
	// why it could not, and exits.
	reportW.Close()
	msg, err := io.ReadAll(report)
	if err == nil && len(msg) == 0 {
		return r.pid, r.waitCh, nil
	}
	<-r.waitCh
	if err != nil {
		return 0, nil, fmt.Errorf("start %s: read the init stage's report: %w", argv[0], err)
	}
	return 0, nil, fmt.Errorf("start %s: %s", argv[0], msg)
}

// makeMountNamespace gives the calling thread the container's mount
// namespace: a copy of the pod's (unless the process has one for the
// container already) with the container's volumes bound in. The namespace
// is kept open for exec sessions until the attempt ends.
func (s *shim) makeMountNamespace() error {
	if s.ownNS {
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			return fmt.Errorf("new mount namespace: %w", err)
		}
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	for _, m := range s.cfg.Spec.Mounts {
		if err := bindMount(m); err != nil {
			return err
		}
	}
	fd, err := unix.Open("/proc/thread-self/ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the container's mount namespace: %w", err)
	}
	s.mu.Lock()
	s.mntNS = fd
	s.mu.Unlock()
	return nil
}

// enterMountNamespace moves the calling thread into the container's mount
// namespace.
func (s *shim) enterMountNamespace() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mntNS < 0 || s.done {
		return errors.New("container is not running")
	}
	// A thread shares its root and working directory with the others
	// until it unshares them, and setns refuses to move such a thread.
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return fmt.Errorf("enter the container's mount namespace: %w", err)
	}
	if err := unix.Setns(s.mntNS, unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("enter the container's mount namespace: %w", err)
	}
	return nil
}

// bindMount binds a host file or directory at its destination, creating
// the mount point if needed.
func bindMount(m Mount) error {
	st, err := os.Stat(m.Source)
	if err != nil {
		return fmt.Errorf("mount source: %w", err)
	}
	if !filepath.IsAbs(m.Destination) {
		return fmt.Errorf("mount destination %q is not absolute", m.Destination)
	}
	if st.IsDir() {
		if err := os.MkdirAll(m.Destination, 0o755); err != nil {
			return fmt.Errorf("create mount point: %w", err)
		}
	} else {
		if err := os.MkdirAll(filepath.Dir(m.Destination), 0o755); err != nil {
			return fmt.Errorf("create mount point: %w", err)
		}
		if !exists(m.Destination) {
			f, err := os.OpenFile(m.Destination, os.O_CREATE|os.O_WRONLY, 0o644)
			if err != nil {
				return fmt.Errorf("create mount point: %w", err)
			}
			f.Close()
		}
	}
	if err := unix.Mount(m.Source, m.Destination, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s at %s: %w", m.Source, m.Destination, err)
	}
	if m.ReadOnly {
		if err := unix.Mount("", m.Destination, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			return fmt.Errorf("make %s read-only: %w", m.Destination, err)
		}
	}
	return nil
}

// finish records how the main process ended, after killing what is left
// of the container and draining its output.
func (s *shim) finish(ws syscall.WaitStatus) {
	finishedAt := time.Now()
	code, sig := exitCode(ws)
	s.mu.Lock()
	if s.killTimer != nil {
		s.killTimer.Stop()
	}
	s.mu.Unlock()
	_ = syscall.Kill(-s.mainPID, syscall.SIGKILL)
	killCgroups(s.cfg.Cgroups, time.Now().Add(10*time.Second))
	s.mu.Lock()
	s.cgroupsReleased = true
	s.mu.Unlock()

	drained := make(chan struct{})
	go func() { s.pumps.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(2 * time.Second):
		// Something outside the cgroup holds the output open.
	}
	s.logs.Close()

	rec := exitRecord{ExitCode: code, Signal: sig, StartedAt: s.startedAt, FinishedAt: finishedAt}
	switch {
	case oomKills(s.cfg.Cgroups) > s.oomBase:
		rec.Reason = "OOMKilled"
	case code == 0:
		rec.Reason = "Completed"
	default:
		rec.Reason = "Error"
	}
	if err := writeJSONAtomic(filepath.Join(s.dir, exitFile), rec); err != nil {
		s.logger.Error(err, "Recording the exit failed")
	}
	s.mu.Lock()
	s.done = true
	clients := s.attaches
	s.attaches = nil
	if s.mntNS >= 0 {
		unix.Close(s.mntNS)
		s.mntNS = -1
	}
	s.mu.Unlock()
	close(s.exited)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() { defer wg.Done(); c.close() }()
	}
	flushed := make(chan struct{})
	go func() { wg.Wait(); close(flushed) }()
	select {
	case <-flushed:
	case <-time.After(2 * time.Second):
	}
}

// kill SIGKILLs the main process's group and everything in the cgroups.
func (s *shim) kill() {
	_ = syscall.Kill(-s.mainPID, syscall.SIGKILL)
	// Each round under the lock, and none once the attempt is finished:
	// the next attempt reuses the cgroups and must not be killed.
	go killUntilEmpty(time.Now().Add(10*time.Second), func() int {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.cgroupsReleased {
			return 0
		}
		return killCgroupProcesses(s.cfg.Cgroups)
	})
}

// stop asks the main process to terminate, and kills it after grace. A
// later stop may only bring the deadline closer.
func (s *shim) stop(grace time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return
	}
	if grace <= 0 {
		s.kill()
		return
	}
	if !s.termSent {
		s.termSent = true
		_ = syscall.Kill(-s.mainPID, syscall.SIGTERM)
	}
	at := time.Now().Add(grace)
	if s.killTimer == nil || at.Before(s.killAt) {
		if s.killTimer != nil {
			s.killTimer.Stop()
		}
		s.killAt = at
		s.killTimer = time.AfterFunc(grace, s.kill)
	}
}

func (s *shim) serve(l *net.UnixListener) {
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			return
		}
		go s.serveConn(c)
	}
}

func (s *shim) serveConn(c *net.UnixConn) {
	defer c.Close()
	m, fds, err := recvMsg(c)
	if err != nil {
		return
	}
	switch m.Op {
	case opWait:
		closeFDs(fds)
		s.waitOrHangup(c)
	case opStop:
		closeFDs(fds)
		s.stop(m.Grace)
		s.waitOrHangup(c)
	case opExec:
		s.exec(c, m, fds)
	case opAttach:
		s.attach(c, m, fds)
	default:
		closeFDs(fds)
		_ = sendMsg(c, message{Error: fmt.Sprintf("unknown operation %q", m.Op)})
	}
}

// waitOrHangup returns when the container exited or the client hung up.
func (s *shim) waitOrHangup(c *net.UnixConn) {
	hangup := make(chan struct{})
	go func() {
		for {
			if _, fds, err := recvMsg(c); err != nil {
				close(hangup)
				return
			} else {
				closeFDs(fds)
			}
		}
	}()
	select {
	case <-s.exited:
	case <-hangup:
	}
}

// exec runs a command in the container as a child of the shim, with the
// client's descriptors as its stdio (one pty slave when TTY).
func (s *shim) exec(c *net.UnixConn, m message, fds []int) {
	defer func() { closeFDs(fds) }()
	var stdio [3]uintptr
	sys := &syscall.SysProcAttr{Setpgid: true}
	switch {
	case m.TTY && len(fds) == 1:
		stdio = [3]uintptr{uintptr(fds[0]), uintptr(fds[0]), uintptr(fds[0])}
		sys = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	case !m.TTY && len(fds) == 3:
		stdio = [3]uintptr{uintptr(fds[0]), uintptr(fds[1]), uintptr(fds[2])}
	default:
		_ = sendMsg(c, message{Error: "exec: wrong number of descriptors"})
		return
	}
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	if done {
		_ = sendMsg(c, message{Error: "container is not running"})
		return
	}
	pid, waitCh, err := s.spawn(m.Argv, stdio, sys, s.enterMountNamespace)
	if err != nil {
		_ = sendMsg(c, message{Error: err.Error()})
		return
	}
	closeFDs(fds)
	fds = nil
	_ = sendMsg(c, message{PID: pid})
	hangup := make(chan struct{})
	go func() {
		for {
			if _, more, err := recvMsg(c); err != nil {
				close(hangup)
				return
			} else {
				closeFDs(more)
			}
		}
	}()
	select {
	case ws := <-waitCh:
		code, _ := exitCode(ws)
		_ = sendMsg(c, message{Exit: &code})
	case <-hangup:
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-waitCh
	}
}

// attachClient receives the container's output from now on and may feed
// its stdin.
type attachClient struct {
	out    chan outputChunk
	stdout *os.File
	stderr *os.File // nil with a TTY: everything goes to stdout
	stdin  *os.File
	done   chan struct{}
	once   sync.Once
}

type outputChunk struct {
	stream string
	data   []byte
}

// close stops the client after what is queued was written.
func (a *attachClient) close() {
	a.once.Do(func() { close(a.out) })
	<-a.done
}

func (a *attachClient) write() {
	defer close(a.done)
	defer func() {
		a.stdout.Close()
		if a.stderr != nil {
			a.stderr.Close()
		}
		if a.stdin != nil {
			a.stdin.Close()
		}
	}()
	for chunk := range a.out {
		w := a.stdout
		if chunk.stream == "stderr" && a.stderr != nil {
			w = a.stderr
		}
		if _, err := w.Write(chunk.data); err != nil {
			for range a.out {
			}
			return
		}
	}
}

// tee hands output to the attached clients; a client too slow to keep up
// loses output rather than stalling the container.
func (s *shim) tee(stream string, b []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for a := range s.attaches {
		select {
		case a.out <- outputChunk{stream, append([]byte(nil), b...)}:
		default:
		}
	}
}

// nonblockingFile wraps a passed descriptor so that closing it interrupts
// a pending read or write.
func nonblockingFile(fd int, name string) *os.File {
	_ = unix.SetNonblock(fd, true)
	return os.NewFile(uintptr(fd), name)
}

// attach connects a client to the main process: descriptors are stdout,
// then stderr unless TTY, then stdin if m.Stdin.
func (s *shim) attach(c *net.UnixConn, m message, fds []int) {
	want := 1
	if !s.cfg.Spec.TTY {
		want++
	}
	if m.Stdin {
		want++
	}
	if len(fds) != want {
		closeFDs(fds)
		_ = sendMsg(c, message{Error: "attach: wrong number of descriptors"})
		return
	}
	a := &attachClient{out: make(chan outputChunk, 256), done: make(chan struct{})}
	a.stdout = nonblockingFile(fds[0], "stdout")
	fds = fds[1:]
	if !s.cfg.Spec.TTY {
		a.stderr = nonblockingFile(fds[0], "stderr")
		fds = fds[1:]
	}
	if m.Stdin {
		a.stdin = nonblockingFile(fds[0], "stdin")
	}
	s.mu.Lock()
	if s.done {
		s.mu.Unlock()
		_ = sendMsg(c, message{Error: "container is not running"})
		go a.write()
		a.close()
		return
	}
	s.attaches[a] = struct{}{}
	feedStdin := a.stdin != nil && s.stdin != nil && !(s.cfg.Spec.StdinOnce && s.stdinUsed)
	if feedStdin {
		s.stdinUsed = true
	}
	s.mu.Unlock()
	go a.write()
	_ = sendMsg(c, message{})
	if feedStdin {
		go func() {
			_, _ = io.Copy(s.stdin, a.stdin)
			if s.cfg.Spec.StdinOnce && s.master == nil {
				s.stdin.Close()
			}
		}()
	}
	for {
		m, more, err := recvMsg(c)
		closeFDs(more)
		if err != nil {
			break
		}
		if m.Op == opResize && s.master != nil {
			_ = pty.SetSize(s.master, m.Width, m.Height)
		}
	}
	s.mu.Lock()
	delete(s.attaches, a)
	s.mu.Unlock()
	a.close()
}
