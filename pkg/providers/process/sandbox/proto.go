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
	"time"

	"golang.org/x/sys/unix"
)

// The sandbox and the shims speak JSON messages over SOCK_SEQPACKET unix
// sockets: one message per packet, file descriptors (stdio of exec and
// attach sessions) passed along with SCM_RIGHTS.

// message is every request and reply of the protocol; Op says which.
type message struct {
	Op string `json:"op,omitempty"`

	// start (sandbox)
	Name    string `json:"name,omitempty"`
	Attempt int    `json:"attempt,omitempty"`

	// exec, attach
	Argv  []string `json:"argv,omitempty"`
	TTY   bool     `json:"tty,omitempty"`
	Stdin bool     `json:"stdin,omitempty"`

	// stop
	Grace time.Duration `json:"grace,omitempty"`

	// resize
	Width  uint16 `json:"width,omitempty"`
	Height uint16 `json:"height,omitempty"`

	// replies
	PID   int    `json:"pid,omitempty"`
	Error string `json:"error,omitempty"`
	Exit  *int   `json:"exit,omitempty"`
}

const (
	opStart  = "start"
	opWait   = "wait"
	opStop   = "stop"
	opExec   = "exec"
	opAttach = "attach"
	opResize = "resize"
)

const maxMessage = 1 << 20

func sendMsg(c *net.UnixConn, m message, files ...*os.File) error {
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	var oob []byte
	if len(files) > 0 {
		fds := make([]int, len(files))
		for i, f := range files {
			fds[i] = int(f.Fd())
		}
		oob = unix.UnixRights(fds...)
	}
	_, _, err = c.WriteMsgUnix(data, oob, nil)
	return err
}

// recvMsg reads one message and the descriptors passed with it (close on
// exec). It returns io.EOF when the peer closed the connection.
func recvMsg(c *net.UnixConn) (message, []int, error) {
	size, err := nextPacketSize(c)
	if err != nil {
		return message{}, nil, err
	}
	buf := make([]byte, min(max(size, 1), maxMessage))
	oob := make([]byte, unix.CmsgSpace(4*8))
	n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return message{}, nil, err
	}
	var files []int
	if oobn > 0 {
		cmsgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return message{}, nil, fmt.Errorf("parse control message: %w", err)
		}
		for _, cm := range cmsgs {
			fds, err := unix.ParseUnixRights(&cm)
			if err != nil {
				continue
			}
			for _, fd := range fds {
				unix.CloseOnExec(fd)
				files = append(files, fd)
			}
		}
	}
	if n == 0 && oobn == 0 {
		closeFDs(files)
		return message{}, nil, io.EOF
	}
	var m message
	if err := json.Unmarshal(buf[:n], &m); err != nil {
		closeFDs(files)
		return message{}, nil, fmt.Errorf("decode message: %w", err)
	}
	return m, files, nil
}

// nextPacketSize waits for the next packet and returns its length without
// reading it, so that a reader holds no more memory than the message needs
// (an idle connection holds none).
func nextPacketSize(c *net.UnixConn) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var perr error
	err = rc.Read(func(fd uintptr) bool {
		n, _, perr = unix.Recvfrom(int(fd), nil, unix.MSG_PEEK|unix.MSG_TRUNC)
		return perr != unix.EAGAIN
	})
	if err != nil {
		return 0, err
	}
	return n, perr
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

func closeAll(files []*os.File) {
	for _, f := range files {
		if f != nil {
			f.Close()
		}
	}
}

// onShortPath calls f with a path to the same file that fits in a unix
// socket address (108 bytes), going through /proc/self/fd when it is long.
func onShortPath(path string, f func(string) error) error {
	if len(path) < 100 {
		return f(path)
	}
	dir, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer dir.Close()
	return f(fmt.Sprintf("/proc/self/fd/%d/%s", dir.Fd(), filepath.Base(path)))
}

func listenPacket(path string) (*net.UnixListener, error) {
	var l *net.UnixListener
	err := onShortPath(path, func(p string) error {
		os.Remove(path)
		var err error
		l, err = net.ListenUnix("unixpacket", &net.UnixAddr{Name: p, Net: "unixpacket"})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	l.SetUnlinkOnClose(false)
	return l, nil
}

func dialPacket(ctx context.Context, path string) (*net.UnixConn, error) {
	var c *net.UnixConn
	err := onShortPath(path, func(p string) error {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "unixpacket", p)
		if err != nil {
			return err
		}
		c = conn.(*net.UnixConn)
		return nil
	})
	return c, err
}

// errNoListener tells that nothing serves a socket: its process is gone.
func errNoListener(err error) bool {
	return errors.Is(err, unix.ECONNREFUSED) || errors.Is(err, unix.ENOENT)
}
