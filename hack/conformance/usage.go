package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// usage is what one node's agent used: its peak resident memory (the
// process's high-water mark, since it started) and the CPU it took while
// the suite ran.
type usage struct {
	Node    string
	PeakRSS int64 // bytes
	CPU     time.Duration
}

func (u usage) String() string {
	return fmt.Sprintf("%s peak RSS %d MiB, CPU %s", u.Node, u.PeakRSS>>20, u.CPU.Round(time.Second))
}

// userHZ is the unit of the CPU times in /proc/PID/stat: the kernel's
// USER_HZ, 100 on every Linux architecture nodelet runs on.
const userHZ = 100

// processCPU is the user and system CPU the process has taken so far.
func processCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces: the fields that
	// count come after its closing one (state first, utime the 12th).
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the name", pid, len(f))
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// peakRSS is the process's high-water mark of resident memory (VmHWM).
func peakRSS(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/%d/status: VmHWM: %w", pid, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmHWM", pid)
}

// measureAgents returns a function that, called when the suite has run,
// gives each node agent's usage over it; an agent it cannot read is left
// out (the run goes on without its figures).
func measureAgents(nodes []*node) func() []usage {
	start := map[string]time.Duration{}
	for _, n := range nodes {
		if cpu, err := processCPU(n.agent.PID()); err == nil {
			start[n.name] = cpu
		}
	}
	return func() []usage {
		var out []usage
		for _, n := range nodes {
			cpu, err := processCPU(n.agent.PID())
			peak, err2 := peakRSS(n.agent.PID())
			if err != nil || err2 != nil {
				fmt.Fprintf(os.Stderr, "conformance: %s: no usage figures: %v %v\n", n.name, err, err2)
				continue
			}
			out = append(out, usage{Node: n.name, PeakRSS: peak, CPU: cpu - start[n.name]})
		}
		return out
	}
}
