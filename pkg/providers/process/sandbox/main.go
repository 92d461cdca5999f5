package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"syscall"
)

// The runtime's own subcommands of the nodelet binary.
const (
	cmdSandbox = "runtime-sandbox" // runtime-sandbox <pod dir>
	cmdShim    = "runtime-shim"    // runtime-shim <attempt dir>
	cmdInit    = "runtime-init"    // runtime-init <security> <path> <argv...> (initstage.go)
)

// A subcommand's main goroutine keeps the main thread to itself, so that
// no other goroutine runs there: the thread a container is forked from
// moves into the container's mount namespace and cgroups and must end with
// its goroutine, and the main thread cannot end (the runtime parks it for
// good instead, in the container's cgroups, where a kill of the cgroup's
// processes would take the whole supervisor).
func init() {
	if len(os.Args) > 1 && IsSubcommand(os.Args[1]) {
		goruntime.LockOSThread()
	}
}

// IsSubcommand tells whether name (os.Args[1]) is one of the runtime's
// subcommands, to be run by Main.
func IsSubcommand(name string) bool {
	return name == cmdSandbox || name == cmdShim || name == cmdInit
}

// Main runs a runtime subcommand; args start with its name. It returns the
// process's exit code.
func Main(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "runtime: no subcommand")
		return 2
	}
	var err error
	switch args[0] {
	case cmdInit:
		return runInit(args[1:])
	case cmdSandbox:
		if len(args) != 2 {
			err = fmt.Errorf("usage: %s <pod dir>", cmdSandbox)
			break
		}
		err = runSandbox(args[1])
	case cmdShim:
		if len(args) != 2 {
			err = fmt.Errorf("usage: %s <attempt dir>", cmdShim)
			break
		}
		err = runShim(args[1])
	default:
		err = fmt.Errorf("unknown subcommand %q", args[0])
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", args[0], err)
		return 1
	}
	return 0
}

// startErrorCode is the exit code of an attempt that could not start.
const startErrorCode = 128

// joinCgroupsForFork makes the next child forked by the calling thread
// start in the cgroups dirs. On v1 the thread itself moves (a v1 hierarchy
// places threads one by one); on v2 the fork goes straight into the cgroup
// (CLONE_INTO_CGROUP) through attr. The caller has locked its OS thread.
func joinCgroupsForFork(dirs []string, v2 bool, attr *syscall.ProcAttr) error {
	if len(dirs) == 0 {
		return nil
	}
	if v2 {
		fd, err := syscall.Open(dirs[0], syscall.O_DIRECTORY|syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open cgroup %s: %w", dirs[0], err)
		}
		attr.Sys.UseCgroupFD, attr.Sys.CgroupFD = true, fd
		return nil
	}
	tid := []byte(strconv.Itoa(syscall.Gettid()))
	for _, dir := range dirs {
		if err := os.WriteFile(filepath.Join(dir, "tasks"), tid, 0); err != nil {
			return fmt.Errorf("join cgroup %s: %w", dir, err)
		}
	}
	return nil
}

// lookPath finds the executable file of name: name itself (relative to
// the working directory dir) when it has a slash, else the first match in
// the environment's PATH.
func lookPath(name, dir string, env []string) (string, error) {
	if name == "" {
		return "", fmt.Errorf("empty command")
	}
	if strings.Contains(name, "/") {
		p := name
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if err := executable(p); err != nil {
			return "", fmt.Errorf("exec %q: %w", name, err)
		}
		return p, nil
	}
	path := defaultPath
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, entry := range filepath.SplitList(path) {
		if !filepath.IsAbs(entry) {
			entry = filepath.Join(dir, entry)
		}
		p := filepath.Join(entry, name)
		if executable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("exec: %q: executable file not found in $PATH", name)
}

func executable(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if st.IsDir() {
		return fmt.Errorf("is a directory")
	}
	if st.Mode()&0o111 == 0 {
		return fmt.Errorf("permission denied")
	}
	return nil
}
