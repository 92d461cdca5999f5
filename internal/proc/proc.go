// Package proc reads one process's figures from /proc, for the tools that
// measure agents: bench and the conformance runner.
package proc

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of the CPU times in /proc/PID/stat: the kernel's
// USER_HZ, 100 on every Linux architecture nodelet runs on.
const userHZ = 100

// Stat reads /proc/PID/stat: the command name, and the fields after it
// (state, ppid, …).
func Stat(pid int) (comm string, fields []string, err error) {
	path := fmt.Sprintf("/proc/%d/stat", pid)
	data, err := os.ReadFile(path)
	if err != nil {
		return "", nil, err
	}
	// The command name is in parentheses and may hold anything.
	start, end := strings.IndexByte(string(data), '('), strings.LastIndexByte(string(data), ')')
	if start < 0 || end < start {
		return "", nil, fmt.Errorf("%s: no command name", path)
	}
	return string(data[start+1 : end]), strings.Fields(string(data[end+1:])), nil
}

// CPU is the user and system CPU the process has taken so far (its
// children's not counted).
func CPU(pid int) (time.Duration, error) {
	_, f, err := Stat(pid)
	if err != nil {
		return 0, err
	}
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the name", pid, len(f))
	}
	var ticks int64
	for _, s := range f[11:13] { // utime, stime
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// StatusKB reads one field of /proc/PID/status given in kB, such as
// VmRSS or VmHWM (the peak resident memory).
func StatusKB(pid int, field string) (int64, error) {
	path := fmt.Sprintf("/proc/%d/status", pid)
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s: %s: %w", path, field, err)
			}
			return kb, nil
		}
	}
	return 0, fmt.Errorf("%s: no %s", path, field)
}
