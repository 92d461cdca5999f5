package runtime

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// The runtime's own subcommands of the nodelet binary.
const (
	cmdSandbox = "runtime-sandbox" // runtime-sandbox <pod dir>
	cmdShim    = "runtime-shim"    // runtime-shim <attempt dir>
	cmdExec    = "runtime-exec"    // runtime-exec [--cgroup DIR]... [--cwd DIR] -- argv...
)

// IsSubcommand tells whether name (os.Args[1]) is one of the runtime's
// subcommands, to be run by Main.
func IsSubcommand(name string) bool {
	return name == cmdSandbox || name == cmdShim || name == cmdExec
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
	case cmdExec:
		return runExecHelper(args[1:])
	default:
		err = fmt.Errorf("unknown subcommand %q", args[0])
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", args[0], err)
		return 1
	}
	return 0
}

// execStatusFD is the descriptor on which runtime-exec reports why it could
// not exec; it is closed on a successful exec.
const execStatusFD = 3

// startErrorCode is the exit code of an attempt that could not start.
const startErrorCode = 128

// runExecHelper joins the container's cgroups, changes to its working
// directory and execs its command, so the command is confined before any of
// its code runs. The environment is the container's.
func runExecHelper(args []string) int {
	status := os.NewFile(execStatusFD, "status")
	syscall.CloseOnExec(execStatusFD)
	fail := func(format string, a ...any) int {
		msg := fmt.Sprintf(format, a...)
		if status != nil {
			status.WriteString(msg)
		}
		fmt.Fprintln(os.Stderr, msg)
		return startErrorCode
	}
	var cgroups []string
	var cwd string
	for len(args) > 0 && args[0] != "--" {
		if len(args) < 2 {
			return fail("%s: bad arguments", cmdExec)
		}
		switch args[0] {
		case "--cgroup":
			cgroups = append(cgroups, args[1])
		case "--cwd":
			cwd = args[1]
		default:
			return fail("%s: unknown flag %s", cmdExec, args[0])
		}
		args = args[2:]
	}
	if len(args) < 2 {
		return fail("%s: no command", cmdExec)
	}
	argv := args[1:]
	for _, dir := range cgroups {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte("0"), 0); err != nil {
			return fail("join cgroup %s: %v", dir, err)
		}
	}
	if cwd != "" {
		if err := os.Chdir(cwd); err != nil {
			return fail("working directory: %v", err)
		}
	}
	env := os.Environ()
	path, err := lookPath(argv[0], env)
	if err != nil {
		return fail("%v", err)
	}
	err = syscall.Exec(path, argv, env)
	return fail("exec %s: %v", argv[0], err)
}

// lookPath finds the executable file of name: name itself when it has a
// slash, else the first match in the environment's PATH.
func lookPath(name string, env []string) (string, error) {
	if name == "" {
		return "", fmt.Errorf("empty command")
	}
	if strings.Contains(name, "/") {
		if err := executable(name); err != nil {
			return "", fmt.Errorf("exec %q: %w", name, err)
		}
		return name, nil
	}
	path := defaultPath
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
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
