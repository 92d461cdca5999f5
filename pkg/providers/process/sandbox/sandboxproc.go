package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// sandboxReadyFD is the descriptor on which the sandbox tells the agent
// that it serves its socket; on sandboxRecordedFD the agent tells the
// sandbox that its PID is recorded.
const (
	sandboxReadyFD    = 3
	sandboxRecordedFD = 4
)

// runSandbox is the pod sandbox: PID 1 of the pod's namespaces. It names
// the pod's host, keeps its mounts private, reaps orphans and, when the
// agent asks on its socket, starts container attempts and supervises them:
// it is the pod's one supervising process.
func runSandbox(podDir string) error {
	syscall.CloseOnExec(sandboxReadyFD)
	syscall.CloseOnExec(sandboxRecordedFD)
	ready := os.NewFile(sandboxReadyFD, "ready")
	// Nothing runs until the agent has recorded this process: an agent
	// killed before it did closes the pipe, and no one could ever find this
	// sandbox to stop it.
	recorded := os.NewFile(sandboxRecordedFD, "recorded")
	var b [1]byte
	n, _ := recorded.Read(b[:])
	recorded.Close()
	if n != 1 {
		return errors.New("the agent that started the sandbox is gone before recording it")
	}
	ctx := klog.NewContext(context.Background(), klog.Background().WithValues("sandbox", podDir))
	logger := klog.FromContext(ctx)
	var rec sandboxRecord
	if err := readJSON(filepath.Join(podDir, sandboxFile), &rec); err != nil {
		return fmt.Errorf("read sandbox record: %w", err)
	}
	hostname := rec.Spec.Hostname
	if hostname == "" {
		hostname = rec.Spec.Name
	}
	if len(hostname) > maxHostnameSize {
		hostname = hostname[:maxHostnameSize]
	}
	if hostname != "" {
		if err := unix.Sethostname([]byte(hostname)); err != nil {
			return fmt.Errorf("set hostname: %w", err)
		}
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	// A /proc of the pod's own PID namespace, seen by its containers.
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		logger.Error(err, "Mounting the pod's /proc failed; containers see the host's")
	}
	r := newReaper()
	l, err := listenPacket(filepath.Join(podDir, sandboxSock))
	if err != nil {
		return err
	}
	logger.Info("Sandbox ready", "hostname", hostname)
	if ready != nil {
		_, _ = ready.Write([]byte{1})
		ready.Close()
	}
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			logger.Error(err, "Accept failed")
			continue
		}
		go serveSandboxConn(ctx, r, podDir, c)
	}
}

func serveSandboxConn(ctx context.Context, r *reaper, podDir string, c *net.UnixConn) {
	defer c.Close()
	m, files, err := recvMsg(c)
	closeFDs(files)
	if err != nil {
		return
	}
	var reply message
	switch m.Op {
	case opStart:
		pid, _, err := startAttempt(filepath.Join(podDir, containersDir, m.Name, strconv.Itoa(m.Attempt)), r, true)
		if err != nil {
			reply.Error = err.Error()
		}
		reply.PID = pid
		klog.FromContext(ctx).V(2).Info("Started container", "container", m.Name, "attempt", m.Attempt, "pid", pid, "err", err)
	default:
		reply.Error = fmt.Sprintf("unknown operation %q", m.Op)
	}
	_ = sendMsg(c, reply)
}

// shimReport is what a shim process writes on its status pipe once the
// container's main process runs, or could not start.
type shimReport struct {
	PID   int    `json:"pid,omitempty"`
	Error string `json:"error,omitempty"`
}
