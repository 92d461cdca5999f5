package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/mountinfo"
)

// Options configure a Manager. Zero values take the defaults.
type Options struct {
	// RootDir holds the pods, under RootDir/pods/<pod uid>/. Required.
	RootDir string
	// Exe is the nodelet binary that runs the subcommands; default
	// os.Executable().
	Exe string
	// CgroupName is the parent cgroup of the pods in each hierarchy;
	// default "nodelet".
	CgroupName string
	// LogMaxSize is the size in bytes at which a container log file is
	// rotated; default 10 MiB.
	LogMaxSize int64
	// LogMaxFiles is how many files are kept per container attempt,
	// including the current one; default 5.
	LogMaxFiles int
	// Clock paces the polls of the Manager; default the real clock.
	Clock clock.Clock
}

func (o *Options) setDefaults() error {
	if o.RootDir == "" {
		return errors.New("runtime options: RootDir is required")
	}
	root, err := filepath.Abs(o.RootDir)
	if err != nil {
		return fmt.Errorf("runtime options: RootDir: %w", err)
	}
	o.RootDir = root
	if o.Exe == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("runtime options: find own executable: %w", err)
		}
		o.Exe = exe
	}
	if o.CgroupName == "" {
		o.CgroupName = DefaultCgroupName
	}
	if strings.Contains(o.CgroupName, "..") || strings.HasPrefix(o.CgroupName, "/") {
		return fmt.Errorf("runtime options: CgroupName %q must be a relative path", o.CgroupName)
	}
	if o.LogMaxSize == 0 {
		o.LogMaxSize = 10 << 20
	}
	if o.LogMaxSize < 0 {
		return fmt.Errorf("runtime options: LogMaxSize %d is negative", o.LogMaxSize)
	}
	if o.LogMaxFiles == 0 {
		o.LogMaxFiles = 5
	}
	if o.LogMaxFiles < 0 {
		return fmt.Errorf("runtime options: LogMaxFiles %d is negative", o.LogMaxFiles)
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	return nil
}

// Manager creates, adopts and removes the pod sandboxes under a root
// directory. Its methods are safe for concurrent use.
type Manager struct {
	opts Options

	mu        sync.Mutex
	sandboxes map[types.UID]*Sandbox
	podLocks  map[types.UID]*sync.Mutex
	onExit    []func(types.UID, string)

	// cgParents are the pods' parent cgroups the last sandbox was made
	// under, for the removal of sandboxes that recorded none.
	cgParents []string
}

// DefaultCgroupName is the pods' parent cgroup when Options names none.
const DefaultCgroupName = "nodelet"

// NewManager validates opts and returns a Manager; it starts nothing.
func NewManager(opts Options) (*Manager, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	return &Manager{opts: opts, sandboxes: map[types.UID]*Sandbox{}, podLocks: map[types.UID]*sync.Mutex{}}, nil
}

// OnExit registers f to be called when a container of any sandbox exits.
// f is called from any goroutine and must not block.
func (m *Manager) OnExit(f func(podUID types.UID, container string)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.onExit = append(m.onExit, f)
}

func (m *Manager) notifyExit(uid types.UID, container string) {
	m.mu.Lock()
	fs := append([]func(types.UID, string){}, m.onExit...)
	m.mu.Unlock()
	for _, f := range fs {
		f(uid, container)
	}
}

func (m *Manager) podDir(uid types.UID) string {
	return filepath.Join(m.opts.RootDir, "pods", string(uid))
}

func validUID(uid types.UID) error {
	s := string(uid)
	if s == "" || s == "." || s == ".." || strings.ContainsAny(s, "/\x00") {
		return fmt.Errorf("invalid pod UID %q", s)
	}
	return nil
}

// lockPod serialises the creation and removal of one pod's sandbox.
func (m *Manager) lockPod(uid types.UID) func() {
	m.mu.Lock()
	l, ok := m.podLocks[uid]
	if !ok {
		l = &sync.Mutex{}
		m.podLocks[uid] = l
	}
	m.mu.Unlock()
	l.Lock()
	return l.Unlock
}

// cgroups returns the directories pods' cgroups are made under, making
// them (again, if a teardown removed them: RemoveCgroupParents) for each
// sandbox that starts.
func (m *Manager) cgroups() ([]string, bool, error) {
	dirs, v2, err := cgroupParents(m.opts.CgroupName)
	if err == nil {
		m.mu.Lock()
		m.cgParents = dirs
		m.mu.Unlock()
	}
	return dirs, v2, err
}

// lastCgroups returns the directories the last sandbox's cgroups were
// made under, without making them.
func (m *Manager) lastCgroups() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cgParents
}

// EnsureSandbox returns the pod's running sandbox, adopting one that runs
// already (started by this or an earlier agent) or starting a new one.
func (m *Manager) EnsureSandbox(ctx context.Context, spec SandboxSpec) (*Sandbox, error) {
	if err := validUID(spec.UID); err != nil {
		return nil, err
	}
	unlock := m.lockPod(spec.UID)
	defer unlock()
	logger := klog.FromContext(ctx).WithValues("pod", klog.KRef(spec.Namespace, spec.Name), "podUID", spec.UID)

	m.mu.Lock()
	s := m.sandboxes[spec.UID]
	m.mu.Unlock()
	if s != nil && s.Alive() {
		return s, nil
	}
	dir := m.podDir(spec.UID)
	rec, err := readRecord(dir, spec.UID)
	if err != nil && !isNotExist(err) {
		return nil, err
	}
	if err == nil && processRunning(rec.PID, rec.StartTime) {
		logger.V(2).Info("Adopting running sandbox", "pid", rec.PID)
		return m.adopt(ctx, dir, rec), nil
	}
	if err == nil && rec.PID > 0 {
		// A sandbox that is exiting takes the pod's processes with it: the
		// new one starts once they are gone, never beside them.
		if err := m.waitExit(ctx, rec.PID, rec.StartTime); err != nil {
			return nil, err
		}
	}

	for _, sub := range []string{containersDir, logsDir} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return nil, fmt.Errorf("create pod directory: %w", err)
		}
	}
	rec = sandboxRecord{Spec: spec, AppliesSecurity: true}
	parents, v2, cgErr := m.cgroups()
	if cgErr != nil {
		logger.Error(cgErr, "Running the pod without cgroups")
	} else {
		for _, p := range parents {
			rec.Cgroups = append(rec.Cgroups, filepath.Join(p, "pod"+string(spec.UID)))
		}
		rec.CgroupV2 = v2
		if err := makeCgroups(rec.Cgroups, v2); err != nil {
			return nil, fmt.Errorf("create pod cgroups: %w", err)
		}
		if err := setResources(rec.Cgroups, v2, spec.Resources); err != nil {
			return nil, fmt.Errorf("set pod cgroup limits: %w", err)
		}
	}
	if err := writeJSONAtomic(filepath.Join(dir, sandboxFile), rec); err != nil {
		return nil, err
	}
	pid, ready, recorded, err := m.startSandbox(dir)
	if err != nil {
		return nil, err
	}
	defer ready.Close()
	if cgErr == nil {
		joinSupervisorsCgroup(logger, pid, parents, v2)
	}
	rec.PID = pid
	rec.StartTime, _, _, _ = procStat(pid)
	err = writeJSONAtomic(filepath.Join(dir, sandboxFile), rec)
	if err == nil {
		_, err = recorded.Write([]byte{1})
	}
	recorded.Close()
	if err != nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		return nil, err
	}
	if err := waitReady(ctx, dir, ready); err != nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		return nil, err
	}
	logger.V(2).Info("Started sandbox", "pid", pid)
	return m.adopt(ctx, dir, rec), nil
}

// startSandbox starts the sandbox process in new PID, UTS, IPC and mount
// namespaces and its own session, so that it outlives the agent. The
// sandbox waits for a byte on recorded, which the agent writes once the
// sandbox's PID is in its record: an agent that dies before leaves no
// sandbox that nobody could find to stop. The sandbox then writes a byte on
// ready once it serves its socket.
func (m *Manager) startSandbox(dir string) (pid int, ready, recorded *os.File, err error) {
	out, err := os.OpenFile(filepath.Join(dir, sandboxLog), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("open sandbox log: %w", err)
	}
	defer out.Close()
	ready, w, err := os.Pipe()
	if err != nil {
		return 0, nil, nil, err
	}
	defer w.Close()
	told, recorded, err := os.Pipe()
	if err != nil {
		ready.Close()
		return 0, nil, nil, err
	}
	defer told.Close()
	cmd := exec.Command(m.opts.Exe, cmdSandbox, dir)
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=" + defaultPath, "GOMAXPROCS=1"}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.ExtraFiles = []*os.File{w, told} // descriptors 3 and 4: sandboxReadyFD, sandboxRecordedFD
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWUTS | syscall.CLONE_NEWIPC | syscall.CLONE_NEWNS,
		Setsid:     true,
	}
	if err := cmd.Start(); err != nil {
		ready.Close()
		recorded.Close()
		return 0, nil, nil, fmt.Errorf("start sandbox: %w", err)
	}
	// Reap it if it ends while we run; an agent that dies leaves it running.
	go func() { _ = cmd.Wait() }()
	return cmd.Process.Pid, ready, recorded, nil
}

// supervisorsCgroup is the CPU cgroup, under the pods' parent, that the
// sandboxes run in.
const supervisorsCgroup = "supervisors"

// joinSupervisorsCgroup moves a sandbox into the supervisors' CPU cgroup:
// together, the pods' supervisors weigh on the CPU as much as one busy
// process, so that a hundred starting at once cannot starve the agent and
// the API server they report to. The cgroup has no memory limit: a pod's
// memory limit never kills its supervisor. Failing to is logged, not fatal.
// parents are the pods' parent cgroups the sandbox's were made under.
func joinSupervisorsCgroup(logger klog.Logger, pid int, parents []string, v2 bool) {
	for _, p := range parents {
		if !v2 && !exists(filepath.Join(p, "cpu.shares")) {
			continue
		}
		dir := filepath.Join(p, supervisorsCgroup)
		err := os.Mkdir(dir, 0o755)
		if err == nil || os.IsExist(err) {
			err = os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0)
		}
		if err != nil {
			logger.Error(err, "Moving the sandbox to the supervisors' cgroup failed", "cgroup", dir)
		}
	}
}

// waitReady waits until the sandbox says, on ready, that it serves its
// socket; a sandbox that exits first closes the pipe without a word.
func waitReady(ctx context.Context, dir string, ready *os.File) error {
	if err := ready.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { _ = ready.SetReadDeadline(time.Now()) })
	defer stop()
	var b [1]byte
	n, err := ready.Read(b[:])
	switch {
	case n == 1:
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("wait for sandbox: %w", ctx.Err())
	case errors.Is(err, os.ErrDeadlineExceeded):
		return errors.New("sandbox did not become ready in 30s")
	default:
		log, _ := os.ReadFile(filepath.Join(dir, sandboxLog))
		return fmt.Errorf("sandbox exited at start: %s", strings.TrimSpace(string(log)))
	}
}

// adopt makes the Sandbox of a record and watches its running containers.
func (m *Manager) adopt(ctx context.Context, dir string, rec sandboxRecord) *Sandbox {
	s := &Sandbox{
		m:        m,
		dir:      dir,
		rec:      rec,
		watching: map[attemptKey]bool{},
		hostPIDs: map[attemptKey]int{},
		starting: map[string]bool{},
	}
	m.mu.Lock()
	if old := m.sandboxes[rec.Spec.UID]; old != nil {
		old.mu.Lock()
		old.replaced = true
		old.mu.Unlock()
	}
	m.sandboxes[rec.Spec.UID] = s
	m.mu.Unlock()
	for _, name := range s.containerNames() {
		for _, a := range attempts(filepath.Join(dir, containersDir, name)) {
			if !exitRecorded(s.attemptDir(name, a)) {
				s.watch(ctx, name, a)
			}
		}
	}
	return s
}

// Sandboxes returns every sandbox found on disk, adopted. A sandbox whose
// process died is returned too, with Alive false, so that its containers'
// exits can be read.
func (m *Manager) Sandboxes(ctx context.Context) ([]*Sandbox, error) {
	entries, err := os.ReadDir(filepath.Join(m.opts.RootDir, "pods"))
	if isNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	var out []*Sandbox
	for _, e := range entries {
		uid := types.UID(e.Name())
		if !e.IsDir() || validUID(uid) != nil {
			continue
		}
		s, err := m.load(ctx, uid)
		if err != nil {
			klog.FromContext(ctx).Error(err, "Skipping unreadable sandbox", "podUID", uid)
			continue
		}
		if s != nil {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].rec.Spec.UID < out[j].rec.Spec.UID })
	return out, nil
}

func (m *Manager) load(ctx context.Context, uid types.UID) (*Sandbox, error) {
	unlock := m.lockPod(uid)
	defer unlock()
	m.mu.Lock()
	s := m.sandboxes[uid]
	m.mu.Unlock()
	if s != nil {
		return s, nil
	}
	rec, err := readRecord(m.podDir(uid), uid)
	if err != nil {
		if isNotExist(err) {
			return nil, nil
		}
		return nil, err
	}
	return m.adopt(ctx, m.podDir(uid), rec), nil
}

// readRecord reads the sandbox record in dir, the directory of the pod
// uid. A record of another pod, or naming a cgroup other than the pod's
// own, is an error: the agent adopts the sandbox by the record's UID, and
// kills every process of the record's cgroups and removes them with the
// pod.
func readRecord(dir string, uid types.UID) (sandboxRecord, error) {
	var rec sandboxRecord
	if err := readJSON(filepath.Join(dir, sandboxFile), &rec); err != nil {
		return sandboxRecord{}, err
	}
	if rec.Spec.UID != uid {
		return sandboxRecord{}, fmt.Errorf("%s: the record of pod %q", filepath.Join(dir, sandboxFile), rec.Spec.UID)
	}
	for _, cg := range rec.Cgroups {
		if cg != filepath.Clean(cg) || !strings.HasPrefix(cg, cgroupRoot+"/") || filepath.Base(cg) != "pod"+string(uid) {
			return sandboxRecord{}, fmt.Errorf("%s: cgroup %q is not the pod's", filepath.Join(dir, sandboxFile), cg)
		}
	}
	return rec, nil
}

// RemoveSandbox kills every process of the pod, waits for them to end and
// removes the pod's cgroups and directory, unless something is still
// mounted in it (an error). Removing a sandbox that is gone is not an
// error.
func (m *Manager) RemoveSandbox(ctx context.Context, uid types.UID) error {
	if err := validUID(uid); err != nil {
		return err
	}
	unlock := m.lockPod(uid)
	defer unlock()
	m.mu.Lock()
	s := m.sandboxes[uid]
	delete(m.sandboxes, uid)
	m.mu.Unlock()
	if s != nil {
		s.mu.Lock()
		s.removed = true
		s.mu.Unlock()
	}
	dir := m.podDir(uid)
	rec, err := readRecord(dir, uid)
	if err != nil && !isNotExist(err) {
		return err
	}
	// Killing PID 1 of the pod's PID namespace kills all of the pod.
	if rec.PID > 0 && processAlive(rec.PID, rec.StartTime) {
		_ = syscall.Kill(rec.PID, syscall.SIGKILL)
	}
	if err := m.waitExit(ctx, rec.PID, rec.StartTime); err != nil {
		return err
	}
	if s != nil {
		// Watchers see their shims die; let them finish before the files go.
		waitTimeout(&s.watchers, 10*time.Second)
	}
	cgroups := rec.Cgroups
	for _, p := range m.lastCgroups() {
		cgroups = append(cgroups, filepath.Join(p, "pod"+string(uid)))
	}
	for _, cg := range cgroups {
		if err := removeCgroupTree(cg, time.Now().Add(10*time.Second)); err != nil {
			return err
		}
	}
	// A volume still mounted in the pod's directory (a CSI volume not
	// unpublished) must not be emptied by the removal.
	mounts, err := mountinfo.Under(dir)
	if err != nil {
		return fmt.Errorf("remove pod directory: %w", err)
	}
	if len(mounts) > 0 {
		return fmt.Errorf("refusing to remove pod directory %s: %s is still mounted", dir, mounts[0])
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove pod directory: %w", err)
	}
	klog.FromContext(ctx).V(2).Info("Removed sandbox", "podUID", uid)
	return nil
}

// waitExit waits, up to 30 s, until the sandbox process pid that started
// at start is gone (a zombie is).
func (m *Manager) waitExit(ctx context.Context, pid int, start uint64) error {
	deadline := m.opts.Clock.Now().Add(30 * time.Second)
	for pid > 0 && processAlive(pid, start) {
		if m.opts.Clock.Now().After(deadline) {
			return fmt.Errorf("sandbox process %d did not exit", pid)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for sandbox to exit: %w", ctx.Err())
		case <-m.opts.Clock.After(10 * time.Millisecond):
		}
	}
	return nil
}

// procStat reads a process's start time (clock ticks after boot), state
// and kernel flags.
func procStat(pid int) (start uint64, state byte, flags uint64, err error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, 0, err
	}
	// The command name may hold spaces and parentheses: skip past the last ')'.
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return 0, 0, 0, fmt.Errorf("malformed stat of %d", pid)
	}
	fields := strings.Fields(string(data[i+1:]))
	if len(fields) < 20 {
		return 0, 0, 0, fmt.Errorf("malformed stat of %d", pid)
	}
	if flags, err = strconv.ParseUint(fields[6], 10, 64); err != nil {
		return 0, 0, 0, fmt.Errorf("malformed stat of %d: flags: %w", pid, err)
	}
	start, err = strconv.ParseUint(fields[19], 10, 64)
	return start, fields[0][0], flags, err
}

// pfExiting is the kernel's flag of a process that is exiting. A killed
// sandbox, PID 1 of its namespace, closes its socket and then waits for
// every process of the pod to die before it turns zombie: its containers
// exit while it still looks alive.
const pfExiting = 0x4

// processAlive tells whether pid is still the process that started at
// start and has not exited.
func processAlive(pid int, start uint64) bool {
	if pid <= 0 {
		return false
	}
	st, state, _, err := procStat(pid)
	return err == nil && st == start && state != 'Z' && state != 'X'
}

// processRunning tells whether pid is still the process that started at
// start and is not exiting: one that serves what it served.
func processRunning(pid int, start uint64) bool {
	if pid <= 0 {
		return false
	}
	st, state, flags, err := procStat(pid)
	return err == nil && st == start && state != 'Z' && state != 'X' && flags&pfExiting == 0
}
