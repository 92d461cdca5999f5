//go:build linux

package crienv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ErrUnavailable is wrapped by the error of Start when the environment
// cannot run on this machine: not root, or a binary is missing. Tests skip
// on it (errors.Is).
var ErrUnavailable = errors.New("unavailable")

// Defaults of Options.
const (
	DefaultSandboxImage = "registry.k8s.io/pause:3.10.2"
	DefaultRunc         = "/usr/sbin/runc"
	DefaultCNIBinDir    = "/usr/lib/cni"
	DefaultStartTimeout = time.Minute
)

// DefaultMirrorOf are the registries that Options.Mirror serves by default.
var DefaultMirrorOf = []string{"registry.k8s.io", "docker.io"}

// cniPlugins are the CNI plugins the network configuration uses (loopback
// is the one containerd adds on its own).
var cniPlugins = []string{"bridge", "host-local", "portmap", "loopback"}

// Options configure one environment. The zero value is usable.
type Options struct {
	// BinDir holds containerd and containerd-shim-runc-v2. Default: the
	// bin/ directory at the top of this repository, found from the working
	// directory upwards.
	BinDir string
	// Runc is the runc binary. Default: DefaultRunc.
	Runc string
	// CNIBinDir holds the CNI plugins. Default: DefaultCNIBinDir.
	CNIBinDir string
	// SandboxImage is the pause image of pod sandboxes. Default:
	// DefaultSandboxImage.
	SandboxImage string
	// Mirror is a registry endpoint ("http://127.0.0.1:5000") that serves
	// the registries of MirrorOf, and itself, over plain http (an https
	// endpoint is not verified). Empty: no mirror, and no registry
	// configuration of the host is read either.
	Mirror string
	// MirrorOf are the registries the mirror serves. Default:
	// DefaultMirrorOf.
	MirrorOf []string
	// Subnet is the pod subnet (a CIDR, at most /30) of the CNI bridge.
	// Default: 10.213.<slot>.0/24, where the slot is the one this
	// environment holds (unique among the environments running at once on
	// the machine).
	Subnet string
	// Dir is where the environment's directory is created. Default: the
	// system temporary directory (or /tmp when that is too long for the
	// sockets inside).
	Dir string
	// StartTimeout bounds each start of containerd, until its CRI reports
	// the runtime and the network ready. Default: DefaultStartTimeout.
	StartTimeout time.Duration
}

func (o *Options) setDefaults() error {
	if o.BinDir == "" {
		dir, err := repoBinDir()
		if err != nil {
			return err
		}
		o.BinDir = dir
	}
	if o.Runc == "" {
		o.Runc = DefaultRunc
	}
	if o.CNIBinDir == "" {
		o.CNIBinDir = DefaultCNIBinDir
	}
	if o.SandboxImage == "" {
		o.SandboxImage = DefaultSandboxImage
	}
	if o.MirrorOf == nil {
		o.MirrorOf = DefaultMirrorOf
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = DefaultStartTimeout
	}
	if o.Dir == "" {
		o.Dir = os.TempDir()
	}
	return nil
}

// available says whether everything the environment runs is here, with
// an error wrapping ErrUnavailable otherwise.
func (o *Options) available() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: needs root", ErrUnavailable)
	}
	need := []struct{ path, hint string }{
		{filepath.Join(o.BinDir, "containerd"), "make bin/containerd"},
		{filepath.Join(o.BinDir, "containerd-shim-runc-v2"), "make bin/containerd-shim-runc-v2"},
		{o.Runc, "make cri-deps"},
	}
	for _, p := range cniPlugins {
		need = append(need, struct{ path, hint string }{filepath.Join(o.CNIBinDir, p), "make cri-deps"})
	}
	for _, n := range need {
		st, err := os.Stat(n.path)
		if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			return fmt.Errorf("%w: no executable %s (%s)", ErrUnavailable, n.path, n.hint)
		}
	}
	return nil
}

// repoBinDir finds bin/ beside the go.mod of this repository, from the
// working directory upwards (go test runs in the package's directory).
func repoBinDir() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find bin directory: %w", err)
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(strings.TrimSpace(string(b)), "module github.com/nodelet/nodelet\n") {
			return filepath.Join(dir, "bin"), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("%w: no go.mod of github.com/nodelet/nodelet above the working directory; set Options.BinDir", ErrUnavailable)
		}
		dir = parent
	}
}

// Env is one private containerd. Its methods are safe for concurrent use.
type Env struct {
	opts    Options
	layout  layout
	slot    *slot
	network network
	conn    *grpc.ClientConn

	mu      sync.Mutex
	proc    *daemon // nil while containerd is not running
	stopped bool
	stopErr error
}

// Available says whether Start can run here with these options: nil, or
// an error wrapping ErrUnavailable (not root, a binary missing).
func Available(opts Options) error {
	_, err := prepare(opts)
	return err
}

// prepare fills in the defaults of opts and checks that everything they
// name is here.
func prepare(opts Options) (Options, error) {
	if err := opts.setDefaults(); err != nil {
		return opts, fmt.Errorf("containerd test environment: %w", err)
	}
	if err := opts.available(); err != nil {
		return opts, fmt.Errorf("containerd test environment: %w", err)
	}
	return opts, nil
}

// Start creates the environment's directory and configuration, and starts
// containerd; it returns once the CRI reports the runtime and the network
// ready. On error, everything it made is gone again.
func Start(ctx context.Context, opts Options) (*Env, error) {
	opts, err := prepare(opts)
	if err != nil {
		return nil, err
	}
	e := &Env{opts: opts}
	if err := e.setUp(); err != nil {
		return nil, errors.Join(fmt.Errorf("containerd test environment: %w", err), e.Stop())
	}
	if err := e.Restart(ctx); err != nil {
		return nil, errors.Join(err, e.Stop())
	}
	return e, nil
}

// setUp takes a slot, makes the directory and writes the configuration.
func (e *Env) setUp() error {
	s, err := takeSlot(func(index int) (err error) {
		e.network, err = newNetwork(index, e.opts.Subnet)
		return err
	})
	if err != nil {
		return err
	}
	e.slot = s
	// A bridge of this slot can only be left over from a run that died.
	if err := deleteLink(e.network.bridge); err != nil {
		return err
	}
	base, err := makeBaseDir(e.opts.Dir)
	if err != nil {
		return err
	}
	e.layout = newLayout(base)
	if err := e.writeConfig(); err != nil {
		return err
	}
	e.conn, err = grpc.NewClient("unix://"+e.layout.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("CRI client: %w", err)
	}
	return nil
}

// Endpoint is the CRI endpoint, "unix:///…/c.sock".
func (e *Env) Endpoint() string { return "unix://" + e.layout.socket }

// LogPath is containerd's log file (stdout and stderr of every start). It
// lives in the environment's directory and goes with Stop.
func (e *Env) LogPath() string { return e.layout.log }

// Dir is the environment's directory: containerd's root, state, sockets and
// configuration are all inside.
func (e *Env) Dir() string { return e.layout.base }

// Bridge is the name of the CNI bridge of the pod network.
func (e *Env) Bridge() string { return e.network.bridge }

// Subnet is the pod subnet (CIDR).
func (e *Env) Subnet() string { return e.network.subnet.String() }

// Network is the name of the CNI network.
func (e *Env) Network() string { return e.network.name }

// Snapshotter is the snapshotter of the CRI: overlayfs, or native where
// overlayfs cannot mount in the environment's directory.
func (e *Env) Snapshotter() string { return e.layout.snapshotter }

// RuntimeClient is a CRI runtime client on the environment's endpoint,
// valid until Stop.
func (e *Env) RuntimeClient() runtimeapi.RuntimeServiceClient {
	return runtimeapi.NewRuntimeServiceClient(e.conn)
}

// ImageClient is a CRI image client on the environment's endpoint, valid
// until Stop.
func (e *Env) ImageClient() runtimeapi.ImageServiceClient {
	return runtimeapi.NewImageServiceClient(e.conn)
}

// Kill sends SIGKILL to containerd, as a crash would, and waits for it to
// exit. Its shims and containers keep running; Restart finds them again.
func (e *Env) Kill() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.proc == nil {
		return nil
	}
	err := e.proc.kill()
	e.proc = nil
	return err
}

// Restart starts containerd on the same root and state, stopping it first
// (SIGTERM) if it runs, and returns once its CRI reports the runtime and
// the network ready.
func (e *Env) Restart(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped {
		return errors.New("containerd test environment: restart after stop")
	}
	if e.proc != nil {
		err := e.proc.terminate()
		e.proc = nil
		if err != nil {
			return fmt.Errorf("containerd test environment: %w", err)
		}
	}
	p, err := startDaemon(e.opts.BinDir, e.layout)
	if err != nil {
		return fmt.Errorf("containerd test environment: %w", err)
	}
	if err := e.waitReady(ctx, p); err != nil {
		return errors.Join(fmt.Errorf("containerd test environment: %w (log %s:\n%s)", err, e.layout.log, tail(e.layout.log, 20)), p.kill())
	}
	e.proc = p
	return nil
}

// waitReady polls the CRI's Status until the runtime and the network are
// ready, containerd exits, or the start timeout passes.
func (e *Env) waitReady(ctx context.Context, p *daemon) error {
	ctx, cancel := context.WithTimeout(ctx, e.opts.StartTimeout)
	defer cancel()
	client := e.RuntimeClient()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		last = ready(ctx, client)
		if last == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("containerd exited before it was ready: %v", p.cmd.ProcessState)
		case <-ctx.Done():
			return fmt.Errorf("wait for the CRI to be ready: %w (last: %v)", ctx.Err(), last)
		case <-tick.C:
		}
	}
}

// ready asks the CRI once whether the runtime and the network are ready.
func ready(ctx context.Context, client runtimeapi.RuntimeServiceClient) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := client.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		return fmt.Errorf("CRI status: %w", err)
	}
	for _, want := range []string{runtimeapi.RuntimeReady, runtimeapi.NetworkReady} {
		ok := false
		for _, c := range st.GetStatus().GetConditions() {
			if c.GetType() == want && c.GetStatus() {
				ok = true
			}
		}
		if !ok {
			return fmt.Errorf("CRI status: %s is not true: %v", want, st.GetStatus().GetConditions())
		}
	}
	return nil
}

// Stop removes every pod sandbox and container containerd still has (through
// the CRI, starting containerd again if it was killed), stops containerd,
// kills whatever of its shims and containers is left, unmounts everything
// under its directory, deletes its bridge and what the CNI plugins left of
// its network, and removes the directory; if no other environment runs, it
// also removes the CRI's parent cgroups and the portmap plugin's shared
// chains when nothing uses them. It is idempotent; the first call's error
// is returned again.
func (e *Env) Stop() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped {
		return e.stopErr
	}
	e.stopped = true
	var errs []error
	if e.layout.base != "" {
		errs = append(errs, e.teardown())
	}
	if e.slot != nil {
		if e.network.bridge != "" {
			errs = append(errs, deleteLink(e.network.bridge), scrubIptables(e.network.name), removeCNICache(e.network.name))
		}
		errs = append(errs, scrubPortmapChains(e.slot), removeNamespaceCgroups(e.slot))
		errs = append(errs, e.slot.release())
	}
	if err := errors.Join(errs...); err != nil {
		e.stopErr = fmt.Errorf("containerd test environment: stop: %w", err)
	}
	return e.stopErr
}

// teardown is Stop's part in the environment's directory.
func (e *Env) teardown() error {
	var errs []error
	if e.conn != nil {
		if e.proc == nil && fileExists(e.layout.config) {
			// Killed: start it again so that the CRI removes the pods
			// and the CNI plugins undo their network setup.
			if p, err := startDaemon(e.opts.BinDir, e.layout); err == nil {
				if e.waitReady(context.Background(), p) == nil {
					e.proc = p
				} else {
					errs = append(errs, p.kill())
				}
			}
		}
		if e.proc != nil {
			errs = append(errs, removePods(e.RuntimeClient()))
		}
	}
	if e.proc != nil {
		errs = append(errs, e.proc.terminate())
		e.proc = nil
	}
	if e.conn != nil {
		errs = append(errs, e.conn.Close())
	}
	errs = append(errs,
		killContainers(e.opts.Runc, e.layout.runcRoot),
		killShims(e.layout.socket),
		unmountUnder(e.layout.base),
	)
	if err := os.RemoveAll(e.layout.base); err != nil {
		errs = append(errs, fmt.Errorf("remove %s: %w", e.layout.base, err))
	}
	return errors.Join(errs...)
}

// removePods stops and removes every container and pod sandbox of the CRI.
func removePods(client runtimeapi.RuntimeServiceClient) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var errs []error
	ctrs, err := client.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		return fmt.Errorf("list containers: %w", err)
	}
	for _, c := range ctrs.GetContainers() {
		if _, err := client.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: c.GetId()}); err != nil {
			errs = append(errs, fmt.Errorf("stop container %s: %w", c.GetId(), err))
		}
		if _, err := client.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: c.GetId()}); err != nil {
			errs = append(errs, fmt.Errorf("remove container %s: %w", c.GetId(), err))
		}
	}
	sbs, err := client.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("list pod sandboxes: %w", err))...)
	}
	for _, s := range sbs.GetItems() {
		if _, err := client.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: s.GetId()}); err != nil {
			errs = append(errs, fmt.Errorf("stop pod sandbox %s: %w", s.GetId(), err))
		}
		if _, err := client.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: s.GetId()}); err != nil {
			errs = append(errs, fmt.Errorf("remove pod sandbox %s: %w", s.GetId(), err))
		}
	}
	return errors.Join(errs...)
}

// daemon is one run of containerd.
type daemon struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process is reaped
}

// startDaemon starts containerd on the layout's configuration, in its own
// process group, with binDir first on its PATH (where it finds the shim).
func startDaemon(binDir string, l layout) (*daemon, error) {
	log, err := os.OpenFile(l.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open containerd log: %w", err)
	}
	defer log.Close()
	cmd := exec.Command(filepath.Join(binDir, "containerd"), "--config", l.config)
	cmd.Env = append(withoutEnv(os.Environ(), "PATH"), "PATH="+binDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start containerd: %w", err)
	}
	d := &daemon{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(d.done)
	}()
	return d, nil
}

// terminate sends SIGTERM and waits for containerd to exit, killing it if
// it has not after 10 s.
func (d *daemon) terminate() error {
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("stop containerd (pid %d): %w", d.cmd.Process.Pid, err)
	}
	select {
	case <-d.done:
		return nil
	case <-time.After(10 * time.Second):
		return d.kill()
	}
}

// kill sends SIGKILL and waits for containerd to exit.
func (d *daemon) kill() error {
	if err := d.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill containerd (pid %d): %w", d.cmd.Process.Pid, err)
	}
	select {
	case <-d.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("containerd (pid %d) still runs 10 s after SIGKILL", d.cmd.Process.Pid)
	}
}

func withoutEnv(env []string, name string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// tail returns the last n lines of a file, for error messages.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// overlaps says whether a subnet overlaps an address of a host interface.
func overlaps(subnet *net.IPNet) (bool, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false, fmt.Errorf("list host addresses: %w", err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && (subnet.Contains(n.IP) || n.Contains(subnet.IP)) {
			return true, nil
		}
	}
	return false, nil
}
