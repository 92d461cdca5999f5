//go:build !amd64

package sandbox

// The default seccomp filter is written for amd64 only: elsewhere a
// container asking for it does not start (loadDefaultSeccomp says why).
const (
	nativeAuditArch   = 0
	foreignSyscallBit = 0
	sysPersonality    = 0
	sysClone          = 0
	sysClone3         = 0
	cloneFlagsArg     = 0
)

var deniedSyscalls []capRule
