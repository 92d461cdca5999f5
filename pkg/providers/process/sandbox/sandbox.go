package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/internal/pty"
)

// ErrNotRunning is returned for an operation on a container or sandbox
// that does not run.
var ErrNotRunning = errors.New("not running")

// Sandbox is one pod's sandbox as seen from the agent. Its methods are safe
// for concurrent use.
type Sandbox struct {
	m   *Manager
	dir string
	rec sandboxRecord

	startMu sync.Mutex // serialises StartContainer

	mu       sync.Mutex
	watching map[attemptKey]bool
	starting map[string]bool
	hostPIDs map[attemptKey]int
	removed  bool
	replaced bool
	lastCPU  map[string]cpuSample // by container name, "" for the pod
	watchers sync.WaitGroup
}

type attemptKey struct {
	name    string
	attempt int
}

type cpuSample struct {
	at    time.Time
	usage uint64
}

// Spec returns the spec the sandbox was made with.
func (s *Sandbox) Spec() SandboxSpec { return s.rec.Spec }

// AppliesSecurity tells whether the sandbox applies the Security of the
// containers it starts: false for a sandbox an agent of an earlier version
// started, which runs them as root with every capability.
func (s *Sandbox) AppliesSecurity() bool { return s.rec.AppliesSecurity }

// Alive tells whether the sandbox process runs: not once it is exiting,
// as killed it may still wait for its containers to die.
func (s *Sandbox) Alive() bool { return processRunning(s.rec.PID, s.rec.StartTime) }

func (s *Sandbox) attemptDir(name string, attempt int) string {
	return filepath.Join(s.dir, containersDir, name, strconv.Itoa(attempt))
}

// LogDir is the directory of the pod's logs, below which ReadLogs follows
// no symbolic link.
func (s *Sandbox) LogDir() string { return filepath.Join(s.dir, logsDir) }

// LogPath is the log file of one attempt of a container; rotated files are
// LogPath.1 (newest) to LogPath.N.
func (s *Sandbox) LogPath(container string, attempt int) string {
	return filepath.Join(s.dir, logsDir, container, strconv.Itoa(attempt)+".log")
}

func (s *Sandbox) containerNames() []string {
	entries, _ := os.ReadDir(filepath.Join(s.dir, containersDir))
	var names []string
	for _, e := range entries {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return names
}

// validContainerName tells whether name is safe as a directory name: 1 to
// 253 letters, digits, '-', '_' or '.', starting and ending with a letter or
// digit. (A regular expression would do, but compiling it would cost every
// shim's start more than the check itself.)
func validContainerName(name string) bool {
	if len(name) == 0 || len(name) > 253 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || i == len(name)-1 || c != '-' && c != '_' && c != '.') {
			return false
		}
	}
	return true
}

// StartContainer starts one attempt of a container and returns once its
// main process runs. An attempt that could not start is recorded as exited
// with code 128 and reason StartError, and the error says why. Starting an
// attempt that runs already is a no-op; starting while another attempt of
// the container runs is an error.
func (s *Sandbox) StartContainer(ctx context.Context, spec ContainerSpec) error {
	if !validContainerName(spec.Name) {
		return fmt.Errorf("invalid container name %q", spec.Name)
	}
	if spec.Attempt < 0 {
		return fmt.Errorf("container %s: negative attempt %d", spec.Name, spec.Attempt)
	}
	if len(spec.Args) == 0 {
		return fmt.Errorf("container %s: no command", spec.Name)
	}
	s.startMu.Lock()
	defer s.startMu.Unlock()
	logger := klog.FromContext(ctx).WithValues("podUID", s.rec.Spec.UID, "container", spec.Name, "attempt", spec.Attempt)

	for _, a := range attempts(filepath.Join(s.dir, containersDir, spec.Name)) {
		if exists(filepath.Join(s.attemptDir(spec.Name, a), exitFile)) {
			if a == spec.Attempt {
				return fmt.Errorf("container %s: attempt %d ran already", spec.Name, a)
			}
			continue
		}
		if !s.isWatching(spec.Name, a) {
			// Left over by a start that never completed, or by one the
			// sandbox still makes for an agent that died: followed if its
			// shim answers, else recorded as ended.
			s.watch(ctx, spec.Name, a)
		}
		running := s.isWatching(spec.Name, a)
		switch {
		case running && a == spec.Attempt:
			return nil
		case running:
			return fmt.Errorf("container %s: attempt %d is still running", spec.Name, a)
		case exists(s.attemptDir(spec.Name, a)) && !exitRecorded(s.attemptDir(spec.Name, a)):
			// Neither followed, ended nor removed: the sandbox was still
			// starting it when the wait for its lock ran out.
			return fmt.Errorf("container %s: attempt %d is still being started", spec.Name, a)
		}
	}
	if exists(s.attemptDir(spec.Name, spec.Attempt)) {
		return fmt.Errorf("container %s: attempt %d ran already", spec.Name, spec.Attempt)
	}
	if !s.Alive() {
		return fmt.Errorf("container %s: pod sandbox: %w", spec.Name, ErrNotRunning)
	}
	dir := s.attemptDir(spec.Name, spec.Attempt)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create container directory: %w", err)
	}
	cfg := shimConfig{
		Spec:        spec,
		LogPath:     s.LogPath(spec.Name, spec.Attempt),
		LogMaxSize:  s.m.opts.LogMaxSize,
		LogMaxFiles: s.m.opts.LogMaxFiles,
		CgroupV2:    s.rec.CgroupV2,
	}
	for _, cg := range s.rec.Cgroups {
		cfg.Cgroups = append(cfg.Cgroups, filepath.Join(cg, spec.Name))
	}
	if err := writeJSONAtomic(filepath.Join(dir, configFile), cfg); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(cfg.LogPath), 0o755); err != nil {
		return fmt.Errorf("create log directory: %w", err)
	}

	s.mu.Lock()
	s.starting[spec.Name] = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.starting, spec.Name)
		s.mu.Unlock()
	}()
	reply, err := s.request(ctx, filepath.Join(s.dir, sandboxSock), message{Op: opStart, Name: spec.Name, Attempt: spec.Attempt})
	if err != nil && ctx.Err() != nil {
		// The agent is stopping: the sandbox may have started the attempt.
		// The next agent finds it running, or finalizes a start that never
		// happened; recording a failure here would restart a live container.
		return fmt.Errorf("start container %s: %w", spec.Name, err)
	}
	if err != nil && errNoListener(err) {
		// The sandbox no longer serves its socket: it died, even if its
		// process has not turned zombie yet. Nothing started; the attempt
		// is not one.
		if rerr := os.RemoveAll(dir); rerr != nil {
			logger.Error(rerr, "Removing the container directory of an attempt that never started failed")
		}
		return fmt.Errorf("start container %s: pod sandbox: %w (%w)", spec.Name, ErrNotRunning, err)
	}
	if err != nil {
		switch dead, started := s.diedDuringStart(spec.Name, spec.Attempt); {
		case dead && !started:
			// Killed with the request in flight, before its shim started
			// the container: nothing started; the attempt is not one.
			if rerr := os.RemoveAll(dir); rerr != nil {
				logger.Error(rerr, "Removing the container directory of an attempt that never started failed")
			}
			return fmt.Errorf("start container %s: pod sandbox: %w (%w)", spec.Name, ErrNotRunning, err)
		case dead:
			// Killed once the container had started, which died with it.
			s.finalize(spec.Name, spec.Attempt)
		default:
			s.recordStartError(spec.Name, spec.Attempt, err.Error())
		}
		return fmt.Errorf("start container %s: %w", spec.Name, err)
	}
	if reply.Error != "" {
		s.recordStartError(spec.Name, spec.Attempt, reply.Error)
		return fmt.Errorf("start container %s: %s", spec.Name, reply.Error)
	}
	s.watch(ctx, spec.Name, spec.Attempt)
	logger.V(2).Info("Started container")
	return nil
}

// diedDuringStart tells, after a start's request failed, whether the
// sandbox died (waiting up to sandboxDeathWait for its process to go)
// and, if so, whether the attempt's shim had recorded its start.
func (s *Sandbox) diedDuringStart(name string, attempt int) (dead, started bool) {
	deadline := time.Now().Add(sandboxDeathWait)
	for s.Alive() {
		if time.Now().After(deadline) {
			return false, false
		}
		time.Sleep(20 * time.Millisecond)
	}
	var start startRecord
	_ = readJSON(filepath.Join(s.attemptDir(name, attempt), stateFile), &start)
	return true, start.PID != 0
}

// sandboxDeathWait bounds how long a failed start waits for a sandbox
// that broke the connection to be gone.
const sandboxDeathWait = 2 * time.Second

// request sends one message and reads one reply, giving up when ctx ends.
func (s *Sandbox) request(ctx context.Context, sock string, m message) (message, error) {
	c, err := dialPacket(ctx, sock)
	if err != nil {
		return message{}, err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	if err := sendMsg(c, m); err != nil {
		return message{}, err
	}
	reply, fds, err := recvMsg(c)
	closeFDs(fds)
	if err != nil {
		if ctx.Err() != nil {
			return message{}, ctx.Err()
		}
		return message{}, err
	}
	return reply, nil
}

func (s *Sandbox) recordStartError(name string, attempt int, msg string) {
	path := filepath.Join(s.attemptDir(name, attempt), exitFile)
	if exists(path) {
		return
	}
	_ = writeJSONAtomic(path, exitRecord{ExitCode: startErrorCode, Reason: ReasonStartError, Message: msg, FinishedAt: time.Now()})
}

// watch follows a running attempt through its shim's socket and calls the
// OnExit callbacks when it ends.
func (s *Sandbox) watch(ctx context.Context, name string, attempt int) {
	key := attemptKey{name, attempt}
	s.mu.Lock()
	if s.watching[key] {
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	c, err := s.follow(ctx, name, attempt)
	if err != nil {
		// No shim answers, and the sandbox is not starting it: the shim
		// is gone; it wrote its exit record, or it was killed. The lock
		// keeps the sandbox from starting it after all.
		dir := s.attemptDir(name, attempt)
		unlock, lerr := lockAttempt(ctx, dir, attemptLockWait)
		if lerr != nil {
			klog.FromContext(ctx).Error(lerr, "Attempt neither answers nor ends; leaving it", "container", name, "attempt", attempt)
			return
		}
		defer unlock()
		if c, err = s.follow(ctx, name, attempt); err != nil {
			if !exists(filepath.Join(dir, stateFile)) {
				// Its start never began (an agent killed with the request
				// unsent, or unread): nothing started, so the attempt is
				// not one, and its number is the next start's, not a
				// restart. A request still queued finds no attempt.
				if rerr := os.RemoveAll(dir); rerr != nil {
					klog.FromContext(ctx).Error(rerr, "Removing the container directory of an attempt that never started failed", "container", name, "attempt", attempt)
				}
				return
			}
			s.finalize(name, attempt)
			return
		}
	}
	s.mu.Lock()
	s.watching[key] = true
	s.mu.Unlock()
	s.watchers.Add(1)
	go func() {
		defer s.watchers.Done()
		for {
			_, fds, err := recvMsg(c)
			closeFDs(fds)
			if err != nil {
				break
			}
		}
		c.Close()
		s.finalize(name, attempt)
		s.mu.Lock()
		delete(s.watching, key)
		quiet := s.removed || s.replaced
		s.mu.Unlock()
		if !quiet {
			s.m.notifyExit(s.rec.Spec.UID, name)
		}
	}()
}

// isWatching tells whether a watcher follows the attempt.
func (s *Sandbox) isWatching(name string, attempt int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.watching[attemptKey{name, attempt}]
}

// follow dials the shim of the attempt and asks to be told of its end.
func (s *Sandbox) follow(ctx context.Context, name string, attempt int) (*net.UnixConn, error) {
	c, err := dialPacket(ctx, filepath.Join(s.attemptDir(name, attempt), shimSock))
	if err != nil {
		return nil, err
	}
	if err := sendMsg(c, message{Op: opWait}); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// attemptLockWait bounds a wait for an attempt's lock (lockAttempt): the
// other side holds it for one start, or one look.
const attemptLockWait = 30 * time.Second

// finalize records an attempt whose shim is gone without a record of the
// exit: it was killed, or its pod sandbox died.
func (s *Sandbox) finalize(name string, attempt int) {
	s.mu.Lock()
	removed := s.removed
	s.mu.Unlock()
	dir := s.attemptDir(name, attempt)
	path := filepath.Join(dir, exitFile)
	if removed || exitRecorded(dir) || !exists(dir) {
		return
	}
	var start startRecord
	_ = readJSON(filepath.Join(dir, stateFile), &start)
	msg := "container supervisor ended without recording the exit"
	if !s.Alive() {
		msg = "pod sandbox is gone"
	}
	rec := exitRecord{ExitCode: 137, Signal: 9, Reason: ReasonError, Message: msg, StartedAt: start.StartedAt, FinishedAt: time.Now()}
	if start.PID == 0 {
		rec.ExitCode, rec.Signal, rec.Reason = startErrorCode, 0, ReasonStartError
	}
	_ = writeJSONAtomic(path, rec)
}

// Containers returns the latest attempt of each container.
func (s *Sandbox) Containers() []ContainerStatus {
	var out []ContainerStatus
	for _, name := range s.containerNames() {
		if st, ok := s.Container(name); ok {
			out = append(out, st)
		}
	}
	return out
}

// Container returns the latest attempt of a container.
func (s *Sandbox) Container(name string) (ContainerStatus, bool) {
	as := attempts(filepath.Join(s.dir, containersDir, name))
	if len(as) == 0 {
		return ContainerStatus{}, false
	}
	return s.status(name, as[len(as)-1])
}

// Previous returns the attempt of a container before the latest one.
func (s *Sandbox) Previous(name string) (ContainerStatus, bool) {
	as := attempts(filepath.Join(s.dir, containersDir, name))
	if len(as) < 2 {
		return ContainerStatus{}, false
	}
	return s.status(name, as[len(as)-2])
}

func (s *Sandbox) status(name string, attempt int) (ContainerStatus, bool) {
	dir := s.attemptDir(name, attempt)
	if !exists(dir) {
		return ContainerStatus{}, false
	}
	st := ContainerStatus{Name: name, Attempt: attempt, State: StateRunning}
	var start startRecord
	_ = readJSON(filepath.Join(dir, stateFile), &start)
	st.StartedAt = start.StartedAt
	var exit exitRecord
	if err := readJSON(filepath.Join(dir, exitFile), &exit); err == nil {
		st.State = StateExited
		st.ExitCode, st.Signal, st.Reason, st.Message = exit.ExitCode, exit.Signal, exit.Reason, exit.Message
		st.FinishedAt = exit.FinishedAt
		if st.StartedAt.IsZero() {
			st.StartedAt = exit.StartedAt
		}
		return st, true
	}
	if start.PID > 0 {
		st.PID = s.hostPID(attemptKey{name, attempt}, start.PID)
	}
	return st, true
}

// hostPID translates a PID of the pod's namespace to the host's.
func (s *Sandbox) hostPID(key attemptKey, podPID int) int {
	s.mu.Lock()
	pid, ok := s.hostPIDs[key]
	s.mu.Unlock()
	if ok {
		return pid
	}
	pid = findHostPID(s.rec.PID, podPID)
	if pid > 0 {
		s.mu.Lock()
		s.hostPIDs[key] = pid
		s.mu.Unlock()
	}
	return pid
}

// findHostPID finds the host PID of the process that is podPID in the PID
// namespace of the sandbox process sandboxPID, among the sandbox's
// descendants.
func findHostPID(sandboxPID, podPID int) int {
	want := strconv.Itoa(podPID)
	queue := []int{sandboxPID}
	for visited := 0; len(queue) > 0 && visited < 1<<16; visited++ {
		pid := queue[0]
		queue = queue[1:]
		if pid != sandboxPID && innermostPID(pid) == want {
			return pid
		}
		queue = append(queue, children(pid)...)
	}
	return 0
}

// innermostPID is a process's PID in the innermost PID namespace it is in.
func innermostPID(pid int) string {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				return f[len(f)-1]
			}
		}
	}
	return ""
}

// children lists the children of every thread of a process.
func children(pid int) []int {
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	var out []int
	for _, t := range tasks {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, t.Name()))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(data)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// shimFor returns the socket of the running latest attempt of a container.
func (s *Sandbox) shimFor(name string) (string, error) {
	st, ok := s.Container(name)
	if !ok {
		return "", fmt.Errorf("container %s: %w", name, errNoContainer)
	}
	if st.State != StateRunning {
		return "", fmt.Errorf("container %s: %w", name, ErrNotRunning)
	}
	return filepath.Join(s.attemptDir(name, st.Attempt), shimSock), nil
}

var errNoContainer = errors.New("no such container")

// StopContainer sends SIGTERM to the container's process group and SIGKILL
// after grace (at once when grace is 0); it returns when the container
// exited or ctx ends. The shim enforces the deadline even if the agent dies.
func (s *Sandbox) StopContainer(ctx context.Context, name string, grace time.Duration) error {
	sock, err := s.shimFor(name)
	if err != nil {
		if errors.Is(err, ErrNotRunning) || errors.Is(err, errNoContainer) {
			return nil
		}
		return err
	}
	c, err := dialPacket(ctx, sock)
	if err != nil {
		if errNoListener(err) {
			return nil
		}
		return fmt.Errorf("stop container %s: %w", name, err)
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	if grace <= 0 {
		grace = 0
	}
	if err := sendMsg(c, message{Op: opStop, Grace: grace}); err != nil {
		return fmt.Errorf("stop container %s: %w", name, err)
	}
	for {
		_, fds, err := recvMsg(c)
		closeFDs(fds)
		if err != nil {
			break
		}
	}
	if ctx.Err() != nil {
		return fmt.Errorf("stop container %s: %w", name, ctx.Err())
	}
	return nil
}

// RemoveContainer forgets the records of the container's attempts that
// ended, keeping their log files.
func (s *Sandbox) RemoveContainer(ctx context.Context, name string) error {
	for _, a := range attempts(filepath.Join(s.dir, containersDir, name)) {
		dir := s.attemptDir(name, a)
		if exists(filepath.Join(dir, exitFile)) {
			if err := os.RemoveAll(dir); err != nil {
				return fmt.Errorf("remove container %s attempt %d: %w", name, a, err)
			}
		}
	}
	os.Remove(filepath.Join(s.dir, containersDir, name)) // only if empty
	return nil
}

// Exec runs argv in the container (its mount namespace, cgroups,
// environment and working directory) and returns its exit code. The
// session is killed when ctx ends.
func (s *Sandbox) Exec(ctx context.Context, container string, argv []string, sio StreamIO) (int, error) {
	if len(argv) == 0 {
		return 0, errors.New("exec: no command")
	}
	sock, err := s.shimFor(container)
	if err != nil {
		return 0, fmt.Errorf("exec: %w", err)
	}
	c, err := dialPacket(ctx, sock)
	if err != nil {
		return 0, fmt.Errorf("exec in container %s: %w", container, err)
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()

	var copies sync.WaitGroup
	var local []*os.File // our ends, closed when done
	defer func() { closeAll(local) }()
	var remote []*os.File // the session's ends, closed once sent
	defer func() { closeAll(remote) }()
	if sio.TTY {
		master, slave, err := pty.Open()
		if err != nil {
			return 0, err
		}
		local, remote = append(local, master), append(remote, slave)
		if sio.Stdin != nil {
			go func() { _, _ = io.Copy(master, sio.Stdin) }()
		}
		copies.Add(1)
		go func() {
			defer copies.Done()
			_, _ = io.Copy(writerOrDiscard(sio.Stdout), pty.Reader{F: master})
		}()
		if sio.Resize != nil {
			go func() {
				for size := range sio.Resize {
					_ = pty.SetSize(master, size.Width, size.Height)
				}
			}()
		}
	} else {
		var stdinR *os.File
		if sio.Stdin != nil {
			r, w, err := os.Pipe()
			if err != nil {
				return 0, err
			}
			stdinR = r
			local = append(local, w)
			go func() {
				_, _ = io.Copy(w, sio.Stdin)
				w.Close()
			}()
		} else {
			devnull, err := os.Open(os.DevNull)
			if err != nil {
				return 0, err
			}
			stdinR = devnull
		}
		remote = append(remote, stdinR)
		for _, out := range []io.Writer{sio.Stdout, sio.Stderr} {
			r, w, err := os.Pipe()
			if err != nil {
				return 0, err
			}
			local, remote = append(local, r), append(remote, w)
			copies.Add(1)
			go func() {
				defer copies.Done()
				_, _ = io.Copy(writerOrDiscard(out), r)
			}()
		}
	}
	if err := sendMsg(c, message{Op: opExec, Argv: argv, TTY: sio.TTY}, remote...); err != nil {
		return 0, fmt.Errorf("exec in container %s: %w", container, err)
	}
	closeAll(remote)
	remote = nil
	reply, _, err := recvMsg(c)
	if err != nil {
		return 0, execErr(ctx, container, err)
	}
	if reply.Error != "" {
		return 0, fmt.Errorf("exec in container %s: %s", container, reply.Error)
	}
	reply, _, err = recvMsg(c)
	if err != nil {
		return 0, execErr(ctx, container, err)
	}
	if reply.Exit == nil {
		return 0, fmt.Errorf("exec in container %s: no exit code", container)
	}
	// Let the output that the session wrote reach the client; a process it
	// left behind may hold the pipes open, so do not wait for ever.
	waitTimeout(&copies, 2*time.Second)
	return *reply.Exit, nil
}

func execErr(ctx context.Context, container string, err error) error {
	if ctx.Err() != nil {
		err = ctx.Err()
	} else if errors.Is(err, io.EOF) {
		err = ErrNotRunning
	}
	return fmt.Errorf("exec in container %s: %w", container, err)
}

func writerOrDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

func waitTimeout(wg *sync.WaitGroup, d time.Duration) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// Attach connects sio to the container's main process: its output from now
// on, and its stdin if the container has one. It returns when the container
// exits or ctx ends.
func (s *Sandbox) Attach(ctx context.Context, container string, sio StreamIO) error {
	sock, err := s.shimFor(container)
	if err != nil {
		return fmt.Errorf("attach: %w", err)
	}
	st, _ := s.Container(container)
	var cfg shimConfig
	if err := readJSON(filepath.Join(s.attemptDir(container, st.Attempt), configFile), &cfg); err != nil {
		return fmt.Errorf("attach: %w", err)
	}
	tty := cfg.Spec.TTY
	c, err := dialPacket(ctx, sock)
	if err != nil {
		return fmt.Errorf("attach to container %s: %w", container, err)
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()

	var copies sync.WaitGroup
	var local, remote []*os.File
	defer func() { closeAll(local); closeAll(remote) }()
	outs := []io.Writer{sio.Stdout}
	if !tty {
		outs = append(outs, sio.Stderr)
	}
	for _, out := range outs {
		r, w, err := os.Pipe()
		if err != nil {
			return err
		}
		local, remote = append(local, r), append(remote, w)
		copies.Add(1)
		go func() {
			defer copies.Done()
			_, _ = io.Copy(writerOrDiscard(out), r)
		}()
	}
	withStdin := sio.Stdin != nil && cfg.Spec.Stdin
	if withStdin {
		r, w, err := os.Pipe()
		if err != nil {
			return err
		}
		local, remote = append(local, w), append(remote, r)
		go func() {
			_, _ = io.Copy(w, sio.Stdin)
			w.Close()
		}()
	}
	if err := sendMsg(c, message{Op: opAttach, Stdin: withStdin, TTY: tty}, remote...); err != nil {
		return fmt.Errorf("attach to container %s: %w", container, err)
	}
	closeAll(remote)
	remote = nil
	reply, _, err := recvMsg(c)
	if err != nil {
		return execErr(ctx, container, err)
	}
	if reply.Error != "" {
		return fmt.Errorf("attach to container %s: %s", container, reply.Error)
	}
	if sio.Resize != nil && tty {
		go func() {
			for size := range sio.Resize {
				if sendMsg(c, message{Op: opResize, Width: size.Width, Height: size.Height}) != nil {
					return
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { copies.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
