//go:build !unix

package sim

import "os/exec"

// setCredential does nothing where there are no Unix credentials: the
// command runs as the agent.
func setCredential(*exec.Cmd, *int64, *int64) {}
