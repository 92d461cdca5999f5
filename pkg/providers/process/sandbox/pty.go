package sandbox

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// TermSize is the size of a terminal in characters.
type TermSize struct{ Width, Height uint16 }

// openPTY opens a new pseudo-terminal pair. The master is non-blocking so
// that reads on it can be interrupted by closing it.
func openPTY() (master, slave *os.File, err error) {
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open pty: %w", err)
	}
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		unix.Close(fd)
		return nil, nil, fmt.Errorf("unlock pty: %w", err)
	}
	n, err := unix.IoctlGetUint32(fd, unix.TIOCGPTN)
	if err != nil {
		unix.Close(fd)
		return nil, nil, fmt.Errorf("pty number: %w", err)
	}
	sfd, err := unix.Open(fmt.Sprintf("/dev/pts/%d", n), unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(fd)
		return nil, nil, fmt.Errorf("open pty slave: %w", err)
	}
	unix.SetNonblock(fd, true)
	return os.NewFile(uintptr(fd), "ptmx"), os.NewFile(uintptr(sfd), "pts"), nil
}

func setWinsize(f *os.File, size TermSize) error {
	conn, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ierr error
	err = conn.Control(func(fd uintptr) {
		ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: size.Height, Col: size.Width})
	})
	if err != nil {
		return err
	}
	return ierr
}

// ptyReader turns the EIO a pty master reports once the slave side is closed
// into a plain end of file.
type ptyReader struct{ f *os.File }

func (r ptyReader) Read(p []byte) (int, error) {
	n, err := r.f.Read(p)
	if err != nil && errors.Is(err, syscall.EIO) {
		err = errEOF
	}
	return n, err
}
