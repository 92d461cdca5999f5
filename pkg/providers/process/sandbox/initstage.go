package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The init stage: Go's fork and exec cannot drop capabilities, set
// no_new_privs or load a seccomp filter in the child, so a container
// process whose spec has a Security is started as this binary's
// runtime-init subcommand, which applies it to its own thread and execs
// the command in its place (the PID stays the same). It runs in the
// container's mount namespace, cgroups, working directory and
// environment, with the container's stdio, as root with every capability.
//
//	<binary> runtime-init <security JSON> <executable path> <argv...>
//
// Descriptor 3 is the write end of a close-on-exec pipe: a successful exec
// closes it with nothing written, a failure writes its reason there and
// exits.

// initReportFD is the init stage's descriptor for its failure.
const initReportFD = 3

// initArgv is the argv that starts argv (found at path) through the init
// stage with sec.
func initArgv(sec *Security, path string, argv []string) ([]string, error) {
	data, err := json.Marshal(sec)
	if err != nil {
		return nil, fmt.Errorf("encode security: %w", err)
	}
	return append([]string{os.Args[0], cmdInit, string(data), path}, argv...), nil
}

// runInit applies the security in args[0] to the calling thread and execs
// args[1] with argv args[2:]. It returns only on failure, having reported
// it on initReportFD.
func runInit(args []string) int {
	unix.CloseOnExec(initReportFD)
	report := os.NewFile(initReportFD, "report")
	err := func() error {
		if len(args) < 3 {
			return fmt.Errorf("usage: %s <security> <path> <argv...>", cmdInit)
		}
		var sec Security
		if err := json.Unmarshal([]byte(args[0]), &sec); err != nil {
			return fmt.Errorf("decode security: %w", err)
		}
		if err := applySecurity(&sec); err != nil {
			return err
		}
		if err := syscall.Exec(args[1], args[2:], os.Environ()); err != nil {
			return fmt.Errorf("exec %s: %w", args[1], err)
		}
		return nil
	}()
	if _, werr := io.WriteString(report, err.Error()); werr != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", cmdInit, err)
	}
	return startErrorCode
}

// applySecurity gives the calling thread (the one that execs next) the
// container's identity and privileges, in the order runc applies them:
// the bounding set, no_new_privs and the seccomp filter while the thread
// still has every capability (loading a filter without no_new_privs needs
// CAP_SYS_ADMIN), then groups, group and user (keeping the permitted
// capabilities across the change of user), then the capability sets. Every
// call acts on this thread alone; the exec replaces the others.
func applySecurity(sec *Security) error {
	last := lastCap()
	caps := sec.Capabilities & (uint64(1)<<(last+1) - 1)
	for c := 0; c <= last; c++ {
		if caps&(1<<c) != 0 {
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	if sec.NoNewPrivs {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("set no_new_privs: %w", err)
		}
	}
	switch sec.Seccomp {
	case "":
	case SeccompRuntimeDefault:
		if err := loadDefaultSeccomp(caps); err != nil {
			return err
		}
	default:
		return fmt.Errorf("unknown seccomp profile %q", sec.Seccomp)
	}
	if err := setGroups(sec.Groups); err != nil {
		return err
	}
	if _, _, errno := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(sec.GID), uintptr(sec.GID), uintptr(sec.GID)); errno != 0 {
		return fmt.Errorf("set group %d: %w", sec.GID, errno)
	}
	if err := unix.Prctl(unix.PR_SET_KEEPCAPS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("keep capabilities: %w", err)
	}
	if _, _, errno := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(sec.UID), uintptr(sec.UID), uintptr(sec.UID)); errno != 0 {
		return fmt.Errorf("set user %d: %w", sec.UID, errno)
	}
	if err := unix.Prctl(unix.PR_SET_KEEPCAPS, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("keep capabilities: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	for i := range data {
		data[i].Effective = uint32(caps >> (32 * i))
		data[i].Permitted = uint32(caps >> (32 * i))
	}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("set capabilities: %w", err)
	}
	// No ambient capabilities (a kernel older than 4.3 has none anyway).
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	return nil
}

// setGroups sets the thread's supplementary groups (none when empty).
func setGroups(groups []uint32) error {
	var p unsafe.Pointer
	if len(groups) > 0 {
		p = unsafe.Pointer(&groups[0])
	}
	if _, _, errno := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(groups)), uintptr(p), 0); errno != 0 {
		return fmt.Errorf("set supplementary groups %v: %w", groups, errno)
	}
	return nil
}

// lastCap is the highest capability the kernel knows.
func lastCap() int {
	data, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil && n >= 0 && n < 64 {
			return n
		}
	}
	return unix.CAP_LAST_CAP
}
