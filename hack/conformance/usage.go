package main

import (
	"fmt"
	"os"
	"time"

	"github.com/nodelet/nodelet/internal/proc"
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

// measureAgents returns a function that, called when the suite has run,
// gives each node agent's usage over it; an agent it cannot read is left
// out (the run goes on without its figures).
func measureAgents(nodes []*node) func() []usage {
	start := map[string]time.Duration{}
	for _, n := range nodes {
		if cpu, err := proc.CPU(n.agent.PID()); err == nil {
			start[n.name] = cpu
		}
	}
	return func() []usage {
		var out []usage
		for _, n := range nodes {
			cpu, err := proc.CPU(n.agent.PID())
			peak, err2 := proc.StatusKB(n.agent.PID(), "VmHWM")
			if err != nil || err2 != nil {
				fmt.Fprintf(os.Stderr, "conformance: %s: no usage figures: %v %v\n", n.name, err, err2)
				continue
			}
			out = append(out, usage{Node: n.name, PeakRSS: peak << 10, CPU: cpu - start[n.name]})
		}
		return out
	}
}
