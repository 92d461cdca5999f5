//go:build unix

package sim

import (
	"os/exec"
	"syscall"
)

// setCredential runs c as the user and group given (either may be nil:
// the agent's).
func setCredential(c *exec.Cmd, uid, gid *int64) {
	if uid == nil && gid == nil {
		return
	}
	cred := &syscall.Credential{Uid: uint32(syscall.Getuid()), Gid: uint32(syscall.Getgid()), NoSetGroups: true}
	if uid != nil {
		cred.Uid = uint32(*uid)
	}
	if gid != nil {
		cred.Gid = uint32(*gid)
	}
	c.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
}
