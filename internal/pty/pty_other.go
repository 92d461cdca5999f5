//go:build !linux

package pty

import (
	"errors"
	"os"
)

var errNoPTY = errors.New("pseudo-terminals are supported on Linux only")

// Open fails: pseudo-terminals are opened on Linux only.
func Open() (master, slave *os.File, err error) { return nil, nil, errNoPTY }

// SetSize fails: pseudo-terminals are opened on Linux only.
func SetSize(*os.File, uint16, uint16) error { return errNoPTY }
