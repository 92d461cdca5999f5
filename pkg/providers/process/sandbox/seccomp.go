package sandbox

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The runtime's default seccomp filter (seccompProfile RuntimeDefault),
// written as a deny list: the syscalls that containerd's default profile
// does not allow a container return EPERM, some of them only while the
// container lacks the capability that containerd's profile allows them
// with (mount with CAP_SYS_ADMIN, ptrace's relatives with CAP_SYS_PTRACE,
// ...). Everything else is allowed, also a syscall newer than the list.
// System calls of another ABI than the native one (32-bit, x32) are
// refused whole, as a deny list of native numbers cannot cover them.

// capRule denies a syscall unless the container has one of caps (none:
// denied whatever the capabilities).
type capRule struct {
	nr   uint32
	caps []int
}

// Offsets in struct seccomp_data.
const (
	seccompDataNr       = 0
	seccompDataArch     = 4
	seccompDataArg0Low  = 16 // little-endian: the low half first
	seccompDataArg0High = 20
)

// cloneNamespaceFlags are the clone flags that make namespaces, which a
// container without CAP_SYS_ADMIN may not use.
const cloneNamespaceFlags = unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWUSER |
	unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWCGROUP

// allowedPersonalities are the personality(2) arguments allowed: Linux,
// UNAME26, ADDR_NO_RANDOMIZE (alone and with UNAME26), and the query.
var allowedPersonalities = []uint32{0x0, 0x8, 0x20000, 0x20008, 0xffffffff}

func stmt(code uint16, k uint32) unix.SockFilter { return unix.SockFilter{Code: code, K: k} }

func jump(code uint16, k uint32, jt, jf uint8) unix.SockFilter {
	return unix.SockFilter{Code: code, Jt: jt, Jf: jf, K: k}
}

const (
	bpfLoadWord = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
	bpfJumpEq   = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
	bpfJumpGE   = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
	bpfJumpSet  = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
	bpfReturn   = unix.BPF_RET | unix.BPF_K

	seccompAllow  = unix.SECCOMP_RET_ALLOW
	seccompEPERM  = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	seccompENOSYS = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
)

// defaultSeccompFilter is the default filter for a container with the
// capabilities caps (bit n for capability n). Every test jumps at most
// over a short block, so no offset comes near the 255 limit.
func defaultSeccompFilter(caps uint64) []unix.SockFilter {
	has := func(cs []int) bool {
		for _, c := range cs {
			if caps&(1<<c) != 0 {
				return true
			}
		}
		return false
	}
	admin := has([]int{unix.CAP_SYS_ADMIN})
	prog := []unix.SockFilter{
		stmt(bpfLoadWord, seccompDataArch),
		jump(bpfJumpEq, nativeAuditArch, 1, 0),
		stmt(bpfReturn, seccompEPERM),
		stmt(bpfLoadWord, seccompDataNr),
	}
	if foreignSyscallBit != 0 {
		prog = append(prog, jump(bpfJumpGE, foreignSyscallBit, 0, 1), stmt(bpfReturn, seccompEPERM))
	}
	for _, r := range deniedSyscalls {
		if len(r.caps) > 0 && has(r.caps) {
			continue
		}
		prog = append(prog, jump(bpfJumpEq, r.nr, 0, 1), stmt(bpfReturn, seccompEPERM))
	}
	// personality: only the arguments above (the high half must be 0).
	block := []unix.SockFilter{
		stmt(bpfLoadWord, seccompDataArg0High),
		jump(bpfJumpEq, 0, 1, 0),
		stmt(bpfReturn, seccompEPERM),
		stmt(bpfLoadWord, seccompDataArg0Low),
	}
	for _, p := range allowedPersonalities {
		block = append(block, jump(bpfJumpEq, p, 0, 1), stmt(bpfReturn, seccompAllow))
	}
	block = append(block, stmt(bpfReturn, seccompEPERM))
	prog = append(prog, jump(bpfJumpEq, sysPersonality, 0, uint8(len(block))))
	prog = append(prog, block...)
	if !admin {
		// clone without new namespaces; clone3 answers ENOSYS, so that
		// libcs fall back to clone, whose flags a filter can read.
		prog = append(prog,
			jump(bpfJumpEq, sysClone, 0, 4),
			stmt(bpfLoadWord, cloneFlagsArg),
			jump(bpfJumpSet, cloneNamespaceFlags, 0, 1),
			stmt(bpfReturn, seccompEPERM),
			stmt(bpfReturn, seccompAllow),
			jump(bpfJumpEq, sysClone3, 0, 1),
			stmt(bpfReturn, seccompENOSYS),
		)
	}
	return append(prog, stmt(bpfReturn, seccompAllow))
}

// DefaultSeccompSupported tells whether the shim has a default seccomp
// filter for this architecture (amd64 only).
const DefaultSeccompSupported = nativeAuditArch != 0

// loadDefaultSeccomp loads the default filter into the calling thread.
func loadDefaultSeccomp(caps uint64) error {
	if nativeAuditArch == 0 {
		return fmt.Errorf("seccomp profile %s: not available on this architecture", SeccompRuntimeDefault)
	}
	prog := defaultSeccompFilter(caps)
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if _, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fprog))); errno != 0 {
		return fmt.Errorf("load seccomp profile %s: %w", SeccompRuntimeDefault, errno)
	}
	return nil
}
