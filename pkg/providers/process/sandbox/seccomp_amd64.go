package sandbox

import "golang.org/x/sys/unix"

const (
	nativeAuditArch = unix.AUDIT_ARCH_X86_64
	// foreignSyscallBit marks the x32 ABI's syscall numbers.
	foreignSyscallBit = 0x40000000
	sysPersonality    = unix.SYS_PERSONALITY
	sysClone          = unix.SYS_CLONE
	sysClone3         = unix.SYS_CLONE3
	// cloneFlagsArg is where clone's flags are: its first argument.
	cloneFlagsArg = seccompDataArg0Low
)

// deniedSyscalls are those of containerd's default profile (2.x) that a
// container may not make, unless it has one of the capabilities named.
var deniedSyscalls = []capRule{
	// Never allowed.
	{nr: unix.SYS_ADD_KEY}, {nr: unix.SYS_KEYCTL}, {nr: unix.SYS_REQUEST_KEY},
	{nr: unix.SYS_USERFAULTFD},
	{nr: unix.SYS_KEXEC_LOAD}, {nr: unix.SYS_KEXEC_FILE_LOAD},
	{nr: unix.SYS_SWAPON}, {nr: unix.SYS_SWAPOFF},
	{nr: unix.SYS_PIVOT_ROOT},
	{nr: unix.SYS_MBIND}, {nr: unix.SYS_SET_MEMPOLICY}, {nr: unix.SYS_GET_MEMPOLICY},
	{nr: unix.SYS_SET_MEMPOLICY_HOME_NODE}, {nr: unix.SYS_MOVE_PAGES}, {nr: unix.SYS_MIGRATE_PAGES},
	{nr: unix.SYS_NFSSERVCTL}, {nr: unix.SYS_USELIB}, {nr: unix.SYS_USTAT}, {nr: unix.SYS_SYSFS}, {nr: unix.SYS__SYSCTL},
	{nr: unix.SYS_CREATE_MODULE}, {nr: unix.SYS_GET_KERNEL_SYMS}, {nr: unix.SYS_QUERY_MODULE},
	// With CAP_SYS_ADMIN.
	{nr: unix.SYS_MOUNT, caps: capsAdmin}, {nr: unix.SYS_UMOUNT2, caps: capsAdmin},
	{nr: unix.SYS_MOUNT_SETATTR, caps: capsAdmin}, {nr: unix.SYS_MOVE_MOUNT, caps: capsAdmin},
	{nr: unix.SYS_OPEN_TREE, caps: capsAdmin}, {nr: unix.SYS_FSOPEN, caps: capsAdmin},
	{nr: unix.SYS_FSCONFIG, caps: capsAdmin}, {nr: unix.SYS_FSMOUNT, caps: capsAdmin}, {nr: unix.SYS_FSPICK, caps: capsAdmin},
	{nr: unix.SYS_UNSHARE, caps: capsAdmin}, {nr: unix.SYS_SETNS, caps: capsAdmin},
	{nr: unix.SYS_SETHOSTNAME, caps: capsAdmin}, {nr: unix.SYS_SETDOMAINNAME, caps: capsAdmin},
	{nr: unix.SYS_QUOTACTL, caps: capsAdmin}, {nr: unix.SYS_QUOTACTL_FD, caps: capsAdmin},
	{nr: unix.SYS_FANOTIFY_INIT, caps: capsAdmin}, {nr: unix.SYS_LOOKUP_DCOOKIE, caps: capsAdmin},
	{nr: unix.SYS_NAME_TO_HANDLE_AT, caps: capsAdmin},
	{nr: unix.SYS_BPF, caps: []int{unix.CAP_SYS_ADMIN, unix.CAP_BPF}},
	{nr: unix.SYS_PERF_EVENT_OPEN, caps: []int{unix.CAP_SYS_ADMIN, unix.CAP_PERFMON}},
	{nr: unix.SYS_SYSLOG, caps: []int{unix.CAP_SYS_ADMIN, unix.CAP_SYSLOG}},
	// With the capability of what they do.
	{nr: unix.SYS_OPEN_BY_HANDLE_AT, caps: []int{unix.CAP_DAC_READ_SEARCH}},
	{nr: unix.SYS_REBOOT, caps: []int{unix.CAP_SYS_BOOT}},
	{nr: unix.SYS_CHROOT, caps: []int{unix.CAP_SYS_CHROOT}},
	{nr: unix.SYS_INIT_MODULE, caps: capsModule}, {nr: unix.SYS_FINIT_MODULE, caps: capsModule},
	{nr: unix.SYS_DELETE_MODULE, caps: capsModule},
	{nr: unix.SYS_ACCT, caps: []int{unix.CAP_SYS_PACCT}},
	{nr: unix.SYS_KCMP, caps: capsPtrace}, {nr: unix.SYS_PIDFD_GETFD, caps: capsPtrace},
	{nr: unix.SYS_PROCESS_MADVISE, caps: capsPtrace},
	{nr: unix.SYS_PROCESS_VM_READV, caps: capsPtrace}, {nr: unix.SYS_PROCESS_VM_WRITEV, caps: capsPtrace},
	{nr: unix.SYS_IOPL, caps: capsRawIO}, {nr: unix.SYS_IOPERM, caps: capsRawIO},
	{nr: unix.SYS_SETTIMEOFDAY, caps: capsTime}, {nr: unix.SYS_CLOCK_SETTIME, caps: capsTime},
	{nr: unix.SYS_VHANGUP, caps: []int{unix.CAP_SYS_TTY_CONFIG}},
}

var (
	capsAdmin  = []int{unix.CAP_SYS_ADMIN}
	capsModule = []int{unix.CAP_SYS_MODULE}
	capsPtrace = []int{unix.CAP_SYS_PTRACE}
	capsRawIO  = []int{unix.CAP_SYS_RAWIO}
	capsTime   = []int{unix.CAP_SYS_TIME}
)
