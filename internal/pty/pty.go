// Package pty opens pseudo-terminals for sessions that ask for a terminal
// (kubectl exec -t, attach -t): the process gets the slave side as its
// controlling terminal and its standard streams, the agent copies the
// session's streams to and from the master side. Linux only; elsewhere
// Open fails.
package pty

import (
	"errors"
	"io"
	"os"
	"syscall"
)

// Reader reads a master side, turning the EIO it reports once every
// slave is closed into a plain end of file.
type Reader struct{ F *os.File }

func (r Reader) Read(p []byte) (int, error) {
	n, err := r.F.Read(p)
	if err != nil && errors.Is(err, syscall.EIO) {
		err = io.EOF
	}
	return n, err
}
